// The cuBLASLt calls of kernels/cuda/matmul.cu, on the CPU, for machines without a GPU (CI;
// tests/cuda_emu/cuda_emu.h says why): linked in place of libcublasLt, with the signatures of the
// real cublasLt.h, so the GEMMs behind matmul.cu and cross_entropy.cu run unchanged and their
// tests hold them against the CPU kernels.
//
// The semantics are the ones cublasLt.h documents: D (m, n) = epilogue(alpha * op(A) @ op(B) +
// beta * C [+ bias]), column-major, each dot product accumulated in fp32 in k order and rounded
// once to D's type (nearest even). FAST_TF32 first rounds each fp32 input to TF32 (10 mantissa
// bits) as the tensor cores see it. Work is done when called; streams and the workspace are
// ignored. Emulated is exactly what matmul.cu uses: A, B fp32/bf16/fp16 (the same type), D fp32
// or A's type, compute 32F or 32F_FAST_TF32, scale fp32, host alpha/beta, C == D, epilogues
// DEFAULT, BIAS, GELU[_AUX][_BIAS], and the backward ones DGELU[_BGRAD], BGRADA, BGRADB (their
// semantics below, at cublasLtMatmul); and fp8 A and B as cublasLtMatmul documents its fp8 kernels
// on Ada and Hopper (E4M3 or E5M2 each, not both E5M2; the "TN" form only, A transposed and B
// not; compute 32F; every dimension and leading dimension a multiple of 16 bytes, operands
// 16-byte aligned; A/B_SCALE_POINTER device fp32 factors of the product, which no other types
// accept), with a bf16, fp16 or fp32 D and the epilogues DEFAULT and BIAS. The product of two
// fp8 values is exact in fp32, so D = alpha scale_a scale_b sum(a b) is computed as that.
// Anything else is refused with a cuBLAS status and a line on
// stderr, never computed approximately: an attribute not listed fails when set, a combination
// not emulated fails in the heuristic (where a caller that may decline, like matmul.cu's fused
// paths, falls back: the stderr line is then the only trace). The algorithm the heuristic returns
// records the preference's alignments, and cublasLtMatmul rejects pointers less aligned than
// that, as an algorithm chosen for a stronger alignment fails on the GPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cupti_runtime_cbid.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/emu_trace.h"

// Declared opaque by cublasLt.h; the emulation keeps no per-handle state.
struct cublasLtContext {};

namespace {

// cublasLt.h gives the descriptors as pointers to fixed-size byte arrays (so a caller may also
// place them on its stack with *Init). Create hands out a pointer to one of these structs
// instead, reinterpret_cast to the header's type; the caller only passes it back, and the
// round trip is exact because the struct is at least as aligned as the header's.
struct MatmulDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    std::int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;  // (m), or (n) under BGRADB; D's type; written by the BGRAD ones
    void* aux = nullptr;         // (m, n), ld aux_ld, D's type; read by DGELU[_BGRAD]
    std::int64_t aux_ld = 0;
    const void* a_scale = nullptr;  // fp8 A and B: device fp32 factors
    const void* b_scale = nullptr;
};

struct Layout {
    cudaDataType_t type;
    std::int64_t rows, cols, ld;  // column-major
};

// The preference's defaults, as cublasLt.h documents them.
struct Preference {
    std::uint64_t max_workspace_bytes = 0;
    std::uint32_t min_alignment_bytes[4] = {256, 256, 256, 256};  // A, B, C, D
    std::uint32_t reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
};

static_assert(alignof(MatmulDesc) >= alignof(cublasLtMatmulDescOpaque_t));
static_assert(alignof(Layout) >= alignof(cublasLtMatrixLayoutOpaque_t));
static_assert(alignof(Preference) >= alignof(cublasLtMatmulPreferenceOpaque_t));

MatmulDesc* get(cublasLtMatmulDesc_t d) {
    return reinterpret_cast<MatmulDesc*>(d);
}
const Layout* get(cublasLtMatrixLayout_t l) {
    return reinterpret_cast<const Layout*>(l);
}
Preference* get(cublasLtMatmulPreference_t p) {
    return reinterpret_cast<Preference*>(p);
}

cublasStatus_t refuse(cublasStatus_t status, const char* why) {
    std::fprintf(stderr, "cuBLASLt emulation: %s\n", why);
    return status;
}

// Copies an attribute of exactly sizeof(V) bytes, as cuBLASLt verifies sizeInBytes.
template <class V>
cublasStatus_t set(V& field, const void* buf, std::size_t bytes) {
    if (buf == nullptr || bytes != sizeof(V))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "attribute of the wrong size");
    std::memcpy(&field, buf, sizeof(V));
    return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || has_aux(e);
}
// The backward epilogues: DGELU reads the GELU input (AUX) and multiplies the product by
// gelu'(aux); the BGRAD ones write a bias gradient through BIAS_POINTER.
bool has_dgelu(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool has_bgrad(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
           e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_bias_pointer(std::uint32_t e) {
    return has_bias(e) || has_bgrad(e);
}
bool uses_aux_pointer(std::uint32_t e) {
    return has_aux(e) || has_dgelu(e);
}

bool is_fp8(cudaDataType_t t) {
    return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}

std::size_t element_bytes(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : is_fp8(t) ? 1 : 2;
}

float load(const void* p, cudaDataType_t t, std::int64_t i) {
    if (is_fp8(t)) {
        const __nv_fp8_storage_t code = static_cast<const __nv_fp8_storage_t*>(p)[i];
        return __half2float(
            __half(__nv_cvt_fp8_to_halfraw(code, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2)));
    }
    if (t == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    if (t == CUDA_R_16F) return __half2float(static_cast<const __half*>(p)[i]);
    return static_cast<const float*>(p)[i];
}

void store(void* p, cudaDataType_t t, std::int64_t i, float v) {
    if (t == CUDA_R_16BF)
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    else if (t == CUDA_R_16F)
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    else
        static_cast<float*>(p)[i] = v;
}

// fp32 to TF32 (8-bit exponent, 10 explicit mantissa bits), round to nearest even; inf and NaN
// pass through.
float round_to_tf32(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0xfffu + ((u >> 13) & 1u);
        u &= ~0x1fffu;
    }
    std::memcpy(&x, &u, sizeof u);
    return x;
}

// GPT-2's gelu (tanh approximation) as kernels/cuda/cuda_common.cuh computes it:
// 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
float gelu_tanh(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + std::exp(-2.0f * u));
}

// Its derivative as kernels/cuda/activation.cu's gelu_backward computes it: s + 2 x s (1 - s)
// du/dx with s = sigmoid(2u), 1 - s = e s, e = exp(-2u) capped at exp(88).
float gelu_tanh_grad(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float e = std::exp(std::min(-2.0f * u, 88.0f));
    const float s = 1.0f / (1.0f + e);
    const float du_dx = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return s + 2.0f * x * s * (e * s) * du_dx;
}

// The fp8 kernels' documented requirements (cublasLtMatmul, "FP8"; on Ada and Hopper): A and B
// each E4M3 or E5M2 but not both E5M2; A transposed and B not ("TN"); compute 32F (no fast TF32
// with fp8); the tensor-core alignment rules, which for 1-byte operands make every dimension
// and leading dimension of A and B a multiple of 16, and D's rows and leading dimension 16
// bytes. D fp8 (with its own scale and amax) exists in the library but is not emulated.
cublasStatus_t check_fp8(const MatmulDesc* op, const Layout* a, const Layout* b, const Layout* d) {
    if (!is_fp8(a->type) || !is_fp8(b->type))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 A with a non-fp8 B, or the reverse");
    if (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 A and B both E5M2");
    if (op->compute != CUBLAS_COMPUTE_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 with a compute type other than 32F");
    if (op->trans_a != CUBLAS_OP_T || op->trans_b != CUBLAS_OP_N)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "fp8 GEMM not in the TN form (A transposed, B not), the only one the fp8 "
                      "kernels take");
    if (d->type != CUDA_R_16BF && d->type != CUDA_R_16F && d->type != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 GEMM with a D other than bf16, fp16, fp32");
    const std::int64_t k = a->rows, m = a->cols, n = b->cols;  // TN: A (k, m), B (k, n)
    const auto d_bytes = static_cast<std::int64_t>(element_bytes(d->type));
    if (m % 16 != 0 || n % 16 != 0 || k % 16 != 0 || a->ld % 16 != 0 || b->ld % 16 != 0 ||
        (d->ld * d_bytes) % 16 != 0)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "fp8 GEMM with m, n, k or a leading dimension not a multiple of 16");
    const std::uint32_t e = op->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "fp8 GEMM with an epilogue other than BIAS");
    return CUBLAS_STATUS_SUCCESS;
}

// Whether the problem is one the emulation implements, and consistent: what the heuristic
// answers. Pointers are cublasLtMatmul's to check.
cublasStatus_t check_problem(cublasLtHandle_t handle, const MatmulDesc* op, const Layout* a,
                             const Layout* b, const Layout* c, const Layout* d) {
    if (handle == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
    if (op == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "null descriptor");
    if (op->compute != CUBLAS_COMPUTE_32F && op->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "compute type other than 32F, 32F_FAST_TF32");
    if (op->scale != CUDA_R_32F) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "scale type not fp32");
    if (is_fp8(a->type) || is_fp8(b->type)) {
        const cublasStatus_t st = check_fp8(op, a, b, d);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    } else {
        if (a->type != b->type ||
            (a->type != CUDA_R_32F && a->type != CUDA_R_16BF && a->type != CUDA_R_16F))
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A and B not both fp32, bf16 or fp16");
        if (d->type != CUDA_R_32F && d->type != a->type)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "D neither fp32 nor A's type");
        if (op->a_scale != nullptr || op->b_scale != nullptr)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "A/B_SCALE_POINTER on non-fp8 A and B");
    }
    if (op->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "FAST_TF32 needs fp32 A and B");
    if (c->type != d->type || c->rows != d->rows || c->cols != d->cols || c->ld != d->ld)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C's layout differs from D's (only C == D)");
    for (const std::int32_t t : {op->trans_a, op->trans_b})
        if (t != CUBLAS_OP_N && t != CUBLAS_OP_T)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "transpose other than N, T");
    // op(A) is (m, k) and op(B) (k, n), D (m, n).
    const bool ta = op->trans_a == CUBLAS_OP_T, tb = op->trans_b == CUBLAS_OP_T;
    const std::int64_t k = ta ? a->rows : a->cols;
    if ((ta ? a->cols : a->rows) != d->rows || (tb ? b->cols : b->rows) != k ||
        (tb ? b->rows : b->cols) != d->cols)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "shapes of op(A), op(B) and D disagree");
    const std::uint32_t e = op->epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_gelu(e) && !has_dgelu(e) &&
        !has_bgrad(e))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "epilogue other than DEFAULT, BIAS, GELU*, DGELU*, BGRADA, BGRADB");
    // cublasLt.h: the GELU input's leading dimension must be divisible by 8 and >= D's rows, for
    // the forward's output and the backward's input alike.
    if (uses_aux_pointer(e) && (op->aux_ld < d->rows || op->aux_ld % 8 != 0))
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      "EPILOGUE_AUX_LD below m or not a multiple of 8");
    return CUBLAS_STATUS_SUCCESS;
}

struct StatusText {
    cublasStatus_t status;
    const char* name;
    const char* text;
};

// The statuses of cublas_api.h, with the descriptions of cuBLAS's documentation.
StatusText status_text(cublasStatus_t status) {
    static constexpr StatusText kTexts[] = {
        {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
        {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "not initialized"},
        {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "resource allocation failed"},
        {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "invalid value"},
        {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "architecture mismatch"},
        {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "memory mapping error"},
        {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "execution failed"},
        {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "internal error"},
        {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "not supported"},
        {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "license error"},
    };
    for (const StatusText& t : kTexts)
        if (t.status == status) return t;
    return {status, "CUBLAS_STATUS_UNKNOWN", "unknown status"};
}

bool aligned(const void* p, std::uint64_t bytes) {
    return bytes == 0 || reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Whether the column-major (rows, cols) matrix at p, leading dimension ld, lies inside one
// cudaMalloc allocation: on a GPU, a host pointer or a layout past an allocation's end faults.
bool on_device(const void* p, std::int64_t rows, std::int64_t cols, std::int64_t ld,
               std::size_t element) {
    const std::int64_t elements = rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
    return napkin::emu::is_device_memory(p, static_cast<std::size_t>(elements) * element);
}

// The GEMM itself: D = alpha op(A) op(B) + beta D with the epilogue, as cublasLtMatmul's
// checks let it through. alpha and beta are the host values read at the call (host pointer
// mode: the library reads them then, a capture included); the fp8 scales are device memory,
// read when the GEMM runs.
void emulated_gemm(const MatmulDesc* op, const Layout* la, const Layout* lb, const Layout* ld,
                   const void* A, const void* B, void* D, float alpha_host, float beta_host) {
    const std::uint32_t e = op->epilogue;
    const napkin::emu::DeviceAccess access;
    const std::int64_t m = ld->rows, n = ld->cols;
    const bool ta = op->trans_a == CUBLAS_OP_T, tb = op->trans_b == CUBLAS_OP_T;
    const std::int64_t k = ta ? la->rows : la->cols;
    const bool tf32 = op->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const auto input = [tf32](float x) { return tf32 ? round_to_tf32(x) : x; };
    // op(A) row by row and op(B) column by column, widened to fp32: a_rows (m, k), b_cols (n, k).
    std::vector<float> a_rows(static_cast<std::size_t>(m * k)),
        b_cols(static_cast<std::size_t>(n * k));
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t p = 0; p < k; ++p)
            a_rows[i * k + p] = input(load(A, la->type, ta ? p + i * la->ld : i + p * la->ld));
    for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t p = 0; p < k; ++p)
            b_cols[j * k + p] = input(load(B, lb->type, tb ? j + p * lb->ld : p + j * lb->ld));

    // fp8: the product's factor alpha scale_a scale_b (an unset scale is 1).
    const auto factor = [](const void* p) {
        return p != nullptr ? *static_cast<const float*>(p) : 1.0f;
    };
    const float alpha_f = alpha_host * factor(op->a_scale) * factor(op->b_scale);
    const float beta_f = beta_host;
    // DGELU_BGRAD's bias gradient: row i's sum over the columns of the fp32 values D is rounded
    // from, in column order (cublasLt.h does not say whether it sums before or after rounding;
    // the CPU twin, kernels/cpu/matmul.cpp, sums the same fp32 values).
    std::vector<float> row_sums(
        e == CUBLASLT_EPILOGUE_DGELU_BGRAD ? static_cast<std::size_t>(m) : 0, 0.0f);
    for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t i = 0; i < m; ++i) {
            float acc = 0.0f;
            for (std::int64_t p = 0; p < k; ++p)
                acc += a_rows[i * k + p] * b_cols[j * k + p];
            float v = alpha_f * acc;
            // With beta == 0, C is not read (cuBLAS's rule), so NaN in an output buffer stays out.
            if (beta_f != 0.0f) v += beta_f * load(D, ld->type, i + j * ld->ld);
            if (has_bias(e)) v += load(op->bias, ld->type, i);
            if (has_aux(e)) store(op->aux, ld->type, i + j * op->aux_ld, v);
            if (has_gelu(e)) v = gelu_tanh(v);
            if (has_dgelu(e)) v *= gelu_tanh_grad(load(op->aux, ld->type, i + j * op->aux_ld));
            if (!row_sums.empty()) row_sums[static_cast<std::size_t>(i)] += v;
            store(D, ld->type, i + j * ld->ld, v);
        }
    }
    // The bias gradients, each rounded once into D's type: DGELU_BGRAD's row sums of the output;
    // BGRADA's of op(A) (m, k) and BGRADB's of op(B) (k, n), summed over k in order.
    void* bgrad = const_cast<void*>(op->bias);
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        for (std::int64_t i = 0; i < m; ++i)
            store(bgrad, ld->type, i, row_sums[static_cast<std::size_t>(i)]);
    } else if (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB) {
        const bool on_a = e == CUBLASLT_EPILOGUE_BGRADA;
        const std::vector<float>& rows = on_a ? a_rows : b_cols;
        for (std::int64_t i = 0; i < (on_a ? m : n); ++i) {
            float sum = 0.0f;
            for (std::int64_t p = 0; p < k; ++p)
                sum += rows[i * k + p];
            store(bgrad, ld->type, i, sum);
        }
    }
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null handle pointer");
    *handle = new cublasLtContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (handle == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
    return status_text(status).name;
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
    return status_text(status).text;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    if (desc == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null descriptor pointer");
    *desc = reinterpret_cast<cublasLtMatmulDesc_t>(new MatmulDesc{compute, scale});
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete get(desc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              std::size_t bytes) {
    if (desc == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null descriptor");
    MatmulDesc& d = *get(desc);
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
            return set(d.trans_a, buf, bytes);
        case CUBLASLT_MATMUL_DESC_TRANSB:
            return set(d.trans_b, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
            return set(d.epilogue, buf, bytes);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            return set(d.bias, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            return set(d.aux, buf, bytes);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            return set(d.aux_ld, buf, bytes);
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
            return set(d.a_scale, buf, bytes);
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
            return set(d.b_scale, buf, bytes);
        default:
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "matmul attribute not emulated");
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
    if (layout == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null layout pointer");
    if (rows > INT64_MAX || cols > INT64_MAX || ld < 1 || static_cast<std::uint64_t>(ld) < rows)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "layout with ld < rows");
    const auto r = static_cast<std::int64_t>(rows), c = static_cast<std::int64_t>(cols);
    *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, r, c, ld});
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete get(layout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (pref == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null preference pointer");
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete get(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes) {
    if (pref == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "null preference");
    Preference& p = *get(pref);
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
            return set(p.max_workspace_bytes, buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
            return set(p.min_alignment_bytes[0], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
            return set(p.min_alignment_bytes[1], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
            return set(p.min_alignment_bytes[2], buf, bytes);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
            return set(p.min_alignment_bytes[3], buf, bytes);
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:  // the emulator never splits K
            return set(p.reduction_scheme_mask, buf, bytes);
        default:
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "preference attribute not emulated");
    }
}

// One algorithm, needing no workspace, whose data[0..3] are the alignments of A, B, C and D it
// was chosen for.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* found) {
    if (found == nullptr || results == nullptr || requested <= 0 || pref == nullptr)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "heuristic without room for a result");
    *found = 0;
    const cublasStatus_t st = check_problem(handle, get(desc), get(a), get(b), get(c), get(d));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    results[0] = cublasLtMatmulHeuristicResult_t{};
    for (int i = 0; i < 4; ++i)
        results[0].algo.data[i] = get(pref)->min_alignment_bytes[i];
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c_desc, void* D, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
    // cuBLASLt launches its kernel through the driver; here one traced launch per GEMM.
    napkin::emu::trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    const std::uint64_t start = napkin::emu::trace::now();
    call.returned_at(start);
    const MatmulDesc* op = get(desc);
    const Layout *la = get(a_desc), *lb = get(b_desc), *ld = get(d_desc);
    const cublasStatus_t st = check_problem(handle, op, la, lb, get(c_desc), ld);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || D == nullptr)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "null alpha, beta, A, B or D");
    if (C != D) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C and D differ (only C == D)");
    const std::uint32_t e = op->epilogue;
    if (uses_bias_pointer(e) && op->bias == nullptr)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "BIAS or BGRAD epilogue without BIAS_POINTER");
    if (uses_aux_pointer(e) && op->aux == nullptr)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "AUX epilogue without EPILOGUE_AUX_POINTER");
    const std::size_t ab_bytes = element_bytes(la->type), d_bytes = element_bytes(ld->type);
    const bool fp8 = is_fp8(la->type);
    const void* operands[4] = {A, B, C, D};
    for (int i = 0; i < 4; ++i)
        if (!aligned(operands[i], fp8     ? 16
                                  : i < 2 ? ab_bytes
                                          : d_bytes) ||
            (algo != nullptr && !aligned(operands[i], algo->data[i])))
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "A, B, C or D less aligned than its element or the algorithm");
    if ((uses_bias_pointer(e) && !aligned(op->bias, d_bytes)) ||
        (uses_aux_pointer(e) && !aligned(op->aux, d_bytes)))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "bias or aux not aligned to its element");
    // As cuBLASLt 13.1 does on an H200 (the fp8 scale probe of the H200 session, bench/results):
    // the heuristic offers its algorithms, then cublasLtMatmul refuses an A or B scale pointer
    // that is not 16-byte aligned. Refusing it here too makes a misaligned scale fail in CI.
    if ((op->a_scale != nullptr && !aligned(op->a_scale, 16)) ||
        (op->b_scale != nullptr && !aligned(op->b_scale, 16)))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "A or B scale pointer not 16-byte aligned");
    // The bias (gradient) runs along D's rows, but BGRADB's along its columns.
    const std::int64_t bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? ld->cols : ld->rows;
    if (!on_device(A, la->rows, la->cols, la->ld, ab_bytes) ||
        !on_device(B, lb->rows, lb->cols, lb->ld, ab_bytes) ||
        !on_device(D, ld->rows, ld->cols, ld->ld, d_bytes) ||
        (uses_bias_pointer(e) && !on_device(op->bias, bias_len, 1, bias_len, d_bytes)) ||
        (uses_aux_pointer(e) && !on_device(op->aux, ld->rows, ld->cols, op->aux_ld, d_bytes)) ||
        (workspace != nullptr && !napkin::emu::is_device_memory(workspace, workspace_bytes)) ||
        (op->a_scale != nullptr && !napkin::emu::is_device_memory(op->a_scale, sizeof(float))) ||
        (op->b_scale != nullptr && !napkin::emu::is_device_memory(op->b_scale, sizeof(float))))
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      "A, B, D, bias, aux, workspace or a scale not inside one device allocation "
                      "(a host pointer, or a layout running past the allocation's end)");

    // Copies of the descriptors and the host scalars: on a capturing stream the GEMM runs at
    // each launch of the graph, when the descriptors may be gone.
    const MatmulDesc op_v = *op;
    const Layout la_v = *la, lb_v = *lb, ld_v = *ld;
    const float alpha_v = *static_cast<const float*>(alpha),
                beta_v = *static_cast<const float*>(beta);
    napkin::emu::Work work = [=](std::uint32_t correlation) {
        const std::uint64_t t0 = napkin::emu::trace::now();
        emulated_gemm(&op_v, &la_v, &lb_v, &ld_v, A, B, D, alpha_v, beta_v);
        napkin::emu::trace::kernel(correlation, "cublasLt_emulated_gemm", dim3(1), dim3(1), 0,
                                   stream, t0, napkin::emu::trace::now());
    };
    cudaError_t refused = cudaSuccess;
    switch (napkin::emu::route(stream, "cublasLtMatmul", &refused)) {
        case napkin::emu::Route::refused:
            return CUBLAS_STATUS_EXECUTION_FAILED;
        case napkin::emu::Route::record:
            napkin::emu::record(stream, std::move(work));
            return CUBLAS_STATUS_SUCCESS;
        case napkin::emu::Route::run:
            break;
    }
    work(call.correlation());
    return CUBLAS_STATUS_SUCCESS;
}

std::size_t cublasLtGetVersion(void) {
    return CUBLAS_VERSION;  // the header the emulator was built against (cuBLASLt shares it)
}

// Not the real cuBLAS: no version to report (the device probe then leaves it out).
cublasStatus_t cublasGetProperty(libraryPropertyType /*type*/, int* /*value*/) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

}  // extern "C"
