// matmul on the GPU through cuBLASLt (declared in kernels/matmul.h; the CPU twin is
// kernels/cpu/matmul.cpp): row-major products mapped onto column-major cuBLASLt calls (derived
// below), bias and GELU fused as cuBLASLt epilogues where it has an algorithm, the bias gradient
// as a deterministic column-sum kernel; fp8 operands (fp8-amp) through cuBLASLt's fp8 kernels in
// the TN form they require, transposing the backward's operands first (at the end of the file).
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace napkin::cuda {

namespace {

// Largest power of two (at most 256) dividing the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and an algorithm chosen for a stronger
// alignment than the pointers have fails or faults.
std::uint32_t alignment_of(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::uint32_t align = 256;
    while (align > 1 && a % align != 0)
        align /= 2;
    return align;
}

// RAII for the descriptors of one call.
struct LtDescriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDescriptors() {
        if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
        if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
        if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
        if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
        if (op != nullptr) cublasLtMatmulDescDestroy(op);
    }
};

template <class V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
    NAPKIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}

template <class V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const V& value) {
    NAPKIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

// The algorithm each problem ran with, per handle: cuBLASLt's heuristic costs tens of
// microseconds of host time per call, which on GPT-2 (about 170 GEMMs a step) let the GPU run
// dry between kernels. The key is everything the heuristic and cublasLtMatmul's checks see
// except the pointers' values: the shapes, types, operations, epilogue, what is set, the
// pointers' alignments and the workspace. The heuristic is deterministic, so a cached answer is
// the one a fresh handle would get: runs repeat their bits (tests/engine_cuda's resume tests).
using GemmKey = std::array<std::int64_t, 24>;
struct GemmChoice {
    bool declined = false;  // no algorithm (the caller's unfused path)
    cublasLtMatmulAlgo_t algo{};
};
std::mutex gemm_cache_mutex;
std::map<std::pair<cublasLtHandle_t, GemmKey>, GemmChoice> gemm_cache;

GemmKey gemm_key(const MatmulContext& ctx, const GemmCall& c) {
    return {c.trans_a, c.trans_b, c.m, c.n, c.k, c.lda, c.ldb, c.ldd, c.a_type, c.b_type,
            c.d_type, c.beta != 0.0f, c.epilogue, c.aux_ld, alignment_of(c.a), alignment_of(c.b),
            alignment_of(c.d), alignment_of(c.bias), alignment_of(c.aux), alignment_of(c.a_scale),
            alignment_of(c.b_scale),
            static_cast<std::int64_t>(ctx.workspace != nullptr ? ctx.workspace_bytes : 0), ctx.tf32,
            (c.bias != nullptr ? 1 : 0) | (c.aux != nullptr ? 2 : 0) |
                (c.a_scale != nullptr ? 4 : 0) | (c.b_scale != nullptr ? 8 : 0)};
}

}  // namespace

bool gemm(const MatmulContext& ctx, const GemmCall& c, cudaStream_t stream, bool may_decline) {
    NAPKIN_CUDA_REQUIRE(ctx.handle != nullptr, "matmul: MatmulContext without a cuBLASLt handle");
    NAPKIN_CUDA_REQUIRE(c.m >= 0 && c.n >= 0 && c.k >= 0,
                        "gemm: m " << c.m << ", n " << c.n << ", k " << c.k);
    if (c.m == 0 || c.n == 0) return true;
    if (c.k == 0) {
        NAPKIN_CUDA_REQUIRE(c.beta == 1.0f && c.epilogue == CUBLASLT_EPILOGUE_DEFAULT,
                            "gemm: k = 0 is only supported as an accumulation of nothing");
        return true;
    }
    const bool all_fp32 =
        c.a_type == CUDA_R_32F && c.b_type == CUDA_R_32F && c.d_type == CUDA_R_32F;
    const cublasComputeType_t compute =
        all_fp32 && ctx.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LtDescriptors l;
    NAPKIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&l.op, compute, CUDA_R_32F));
    const cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_desc(l.op, CUBLASLT_MATMUL_DESC_TRANSA, ta);
    set_desc(l.op, CUBLASLT_MATMUL_DESC_TRANSB, tb);
    if (c.a_scale != nullptr) set_desc(l.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, c.a_scale);
    if (c.b_scale != nullptr) set_desc(l.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, c.b_scale);
    if (c.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        set_desc(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
        if (c.bias != nullptr) set_desc(l.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
        if (c.aux != nullptr) {
            set_desc(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
            set_desc(l.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.aux_ld);
        }
    }
    // Stored shapes (column-major rows x cols): A is (k, m) under op T, else (m, k).
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    NAPKIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.a, c.a_type, u(c.trans_a ? c.k : c.m),
                                                   u(c.trans_a ? c.m : c.k), c.lda));
    NAPKIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.b, c.b_type, u(c.trans_b ? c.n : c.k),
                                                   u(c.trans_b ? c.k : c.n), c.ldb));
    NAPKIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, c.d_type, u(c.m), u(c.n), c.ldd));

    const std::size_t workspace_bytes = ctx.workspace != nullptr ? ctx.workspace_bytes : 0;
    const auto run = [&](const cublasLtMatmulAlgo_t& algo) {
        return cublasLtMatmul(ctx.handle, l.op, &c.alpha, c.a, l.a, c.b, l.b, &c.beta, c.d, l.d,
                              c.d, l.d, &algo, ctx.workspace, workspace_bytes, stream);
    };
    const auto key = std::make_pair(ctx.handle, gemm_key(ctx, c));
    {
        std::lock_guard<std::mutex> lock(gemm_cache_mutex);
        const auto hit = gemm_cache.find(key);
        if (hit != gemm_cache.end() && !hit->second.declined) {
            NAPKIN_CUBLAS_CHECK(run(hit->second.algo));
            return true;
        }
        // Declined before: the caller's unfused path again, or (a caller that may not decline)
        // the heuristic once more, to throw with its status.
        if (hit != gemm_cache.end() && may_decline) return false;
    }
    const auto remember = [&](const GemmChoice& choice) {
        std::lock_guard<std::mutex> lock(gemm_cache_mutex);
        gemm_cache.emplace(key, choice);
    };

    NAPKIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&l.pref));
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
             static_cast<std::uint64_t>(workspace_bytes));
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(c.a));
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(c.b));
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(c.d));
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(c.d));

    // Split-K only with its partial sums in fp32 (the compute type): the in-place and
    // output-type schemes add the partials in the output's type, so a bf16 gradient accumulated
    // with beta = 1 is rounded once per split, several bf16 ulps off the one rounding the CPU
    // takes (seen on an H200: dinp 4 ulps off at K = 64).
    set_pref(l.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
             static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));

    // Several candidates, best first: cuBLASLt's heuristic can offer an algorithm that the call
    // itself then refuses (NOT_SUPPORTED); the next one is tried before giving up.
    constexpr int kCandidates = 8;
    cublasLtMatmulHeuristicResult_t heuristic[kCandidates]{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        ctx.handle, l.op, l.a, l.b, l.d, l.d, l.pref, kCandidates, heuristic, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        // Declined: no algorithm for this epilogue, so the caller runs it unfused. Any other
        // status (a bad layout, an invalid value) is a bug in the call, thrown even here.
        if (may_decline && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_SUCCESS)) {
            remember(GemmChoice{true, {}});
            return false;
        }
        NAPKIN_CUBLAS_CHECK(st);
        NAPKIN_CUDA_REQUIRE(false, "cuBLASLt has no algorithm for m "
                                       << c.m << ", n " << c.n << ", k " << c.k << ", epilogue "
                                       << c.epilogue);
    }
    cublasStatus_t matmul_status = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < found && matmul_status == CUBLAS_STATUS_NOT_SUPPORTED; ++i) {
        if (heuristic[i].state != CUBLAS_STATUS_SUCCESS) continue;
        matmul_status = run(heuristic[i].algo);
        if (matmul_status == CUBLAS_STATUS_SUCCESS) remember(GemmChoice{false, heuristic[i].algo});
    }
    if (matmul_status == CUBLAS_STATUS_NOT_SUPPORTED && may_decline) {
        remember(GemmChoice{true, {}});
        return false;
    }
    NAPKIN_CUBLAS_CHECK(matmul_status);
    return true;
}

// out (M, N) = inp (M, K) @ weight (N, K)^T, row-major. Column-major view: out^T (N, M), ld N,
// = weight^T... spelled out: out^T = (inp @ weight^T)^T = weight @ inp^T, an (N, K) @ (K, M)
// product. weight's bytes are the column-major (K, N) matrix with ld K, so op T yields
// weight (N, K); inp's bytes are the column-major (K, M) matrix inp^T with ld K, op N.
// So A = weight (T, lda K), B = inp (N, ldb K), D (N, M) ldd N: m = N, n = M, k = K. A bias of
// length N is then per row of D, as cuBLASLt's BIAS epilogue applies it.
GemmCall gemm_nt(void* out, const void* inp, const void* weight, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta) {
    GemmCall c;
    c.trans_a = true;
    c.trans_b = false;
    c.m = N, c.n = M, c.k = K;
    c.a = weight, c.lda = K;
    c.b = inp, c.ldb = K;
    c.d = out, c.ldd = N;
    c.a_type = ab, c.b_type = ab, c.d_type = d, c.beta = beta;
    return c;
}

// dinp (M, K) = dout (M, N) @ weight (N, K). Column-major: dinp^T (K, M), ld K,
// = weight^T (K, N) @ dout^T (N, M). weight's bytes are the column-major (K, N) matrix weight^T
// with ld K: op N. dout's bytes are the column-major (N, M) matrix dout^T with ld N: op N.
// A = weight (N, lda K), B = dout (N, ldb N), D (K, M) ldd K: m = K, n = M, k = N.
GemmCall gemm_nn(void* dinp, const void* dout, const void* weight, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta) {
    GemmCall c;
    c.trans_a = false;
    c.trans_b = false;
    c.m = K, c.n = M, c.k = N;
    c.a = weight, c.lda = K;
    c.b = dout, c.ldb = N;
    c.d = dinp, c.ldd = K;
    c.a_type = ab, c.b_type = ab, c.d_type = d, c.beta = beta;
    return c;
}

// dweight (N, K) = dout (M, N)^T @ inp (M, K). Column-major: dweight^T (K, N), ld K,
// = inp^T (K, M) @ dout (M, N). inp's bytes are the column-major (K, M) matrix inp^T with ld K:
// op N. dout's bytes are the column-major (N, M) matrix dout^T with ld N: op T gives (M, N).
// A = inp (N, lda K), B = dout (T, ldb N), D (K, N) ldd K: m = K, n = N, k = M.
GemmCall gemm_tn(void* dweight, const void* dout, const void* inp, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta) {
    GemmCall c;
    c.trans_a = false;
    c.trans_b = true;
    c.m = K, c.n = N, c.k = M;
    c.a = inp, c.lda = K;
    c.b = dout, c.ldb = N;
    c.d = dweight, c.ldd = K;
    c.a_type = ab, c.b_type = ab, c.d_type = d, c.beta = beta;
    return c;
}

namespace {

// The unfused path, in two kernels around a plain GEMM so that every value is rounded to T
// exactly where the CPU rounds it: out (M, N) = bias broadcast first (the GEMM then accumulates
// onto it with beta = 1: one rounding of x @ w^T + bias, as the CPU's fp32 sum then narrowing),
// and afterwards, for GELU, pre_gelu = out (when kept) and out = gelu(out).
template <class D>
__global__ void matmul_forward_bias_kernel(D* out, const D* bias, std::int64_t M, std::int64_t N) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         i < M * N; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        out[i] = bias != nullptr ? bias[i % N] : from_f32<D>(0.0f);
}

template <class D>
__global__ void matmul_forward_gelu_kernel(D* out, D* pre_gelu, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        if (pre_gelu != nullptr) pre_gelu[i] = out[i];
        out[i] = from_f32<D>(gelu_tanh(to_f32(out[i])));
    }
}

// dbias (N) += sum over the M rows of dout (M, N). Block (32, 16): threadIdx.x a column of the
// block's 32, threadIdx.y a stride of rows; the 16 partial sums are added in a fixed order, so
// each element has one writer and the same result run to run.
constexpr int kBiasCols = 32;
constexpr int kBiasRows = 16;

template <class D>
__global__ void matmul_backward_bias_kernel(D* dbias, const D* dout, std::int64_t M,
                                            std::int64_t N) {
    __shared__ float partial[kBiasRows][kBiasCols];
    const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(kBiasCols) + threadIdx.x;
    float sum = 0.0f;
    if (col < N) {
        for (std::int64_t m = threadIdx.y; m < M; m += kBiasRows)
            sum += to_f32(dout[m * N + col]);
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < N) {
        float total = 0.0f;
        for (int r = 0; r < kBiasRows; ++r)
            total += partial[r][threadIdx.x];
        dbias[col] = from_f32<D>(to_f32(dbias[col]) + total);
    }
}

// dpre (n) = gelu'(pre) dpre in place: the unfused DGELU, rounded as gelu_backward into a zeroed
// gradient rounds (0 + gelu' dout).
template <class D>
__global__ void matmul_dgelu_kernel(D* dpre, const D* pre, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        dpre[i] = from_f32<D>(0.0f + gelu_tanh_grad(to_f32(pre[i])) * to_f32(dpre[i]));
}

// dbias (n) += grad (n): an epilogue's bias gradient, which cuBLASLt writes, added into the
// gradient that accumulates over micro-batches (the sum in fp32, rounded once more).
template <class D>
__global__ void matmul_bias_accumulate_kernel(D* dbias, const D* grad, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        dbias[i] = from_f32<D>(to_f32(dbias[i]) + to_f32(grad[i]));
}

template <class D>
void bias_sums(D* dbias, const D* dout, std::int64_t M, std::int64_t N, cudaStream_t stream) {
    if (dbias == nullptr || N == 0) return;
    const dim3 block(kBiasCols, kBiasRows);
    const auto grid = static_cast<unsigned>((N + kBiasCols - 1) / kBiasCols);
    matmul_backward_bias_kernel<<<grid, block, 0, stream>>>(dev(dbias), dev(dout), M, N);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

// An epilogue's bias gradient of n elements of T: at the end of the workspace, which cuBLASLt
// then gets that much less of (a few KiB of its 32 MiB). Null when there is no workspace, or the
// vector would not leave it most of it.
struct BiasGradScratch {
    void* grad = nullptr;
    MatmulContext ctx;
};
BiasGradScratch bias_grad_scratch(const MatmulContext& ctx, std::int64_t n, std::size_t elem) {
    BiasGradScratch b;
    b.ctx = ctx;
    const std::size_t bytes = (static_cast<std::size_t>(n) * elem + 255) / 256 * 256;
    if (ctx.workspace == nullptr || bytes > ctx.workspace_bytes / 4) return b;
    b.ctx.workspace_bytes = ctx.workspace_bytes - bytes;
    b.grad = static_cast<char*>(ctx.workspace) + b.ctx.workspace_bytes;
    return b;
}

// dweight (N, K) += dout^T @ inp; dbias (N) += the column sums of dout, by BGRADB on that GEMM
// when asked and cuBLASLt has it (the sums then cost no second read of dout), else the kernel.
template <class T>
void weight_grads(T* dweight, T* dbias, const T* dout, const T* inp, std::int64_t M, std::int64_t N,
                  std::int64_t K, bool bias_epilogue, const MatmulContext& ctx,
                  cudaStream_t stream) {
    constexpr cudaDataType_t type = cuda_data_type<T>();
    if (dweight == nullptr) return bias_sums(dbias, dout, M, N, stream);
    GemmCall c = gemm_tn(dweight, dout, inp, M, N, K, type, type, 1.0f);
    const BiasGradScratch b = bias_grad_scratch(ctx, N, sizeof(device_t<T>));
    if (dbias != nullptr && bias_epilogue && b.grad != nullptr && M > 0 && N > 0 && K > 0) {
        c.epilogue = CUBLASLT_EPILOGUE_BGRADB;
        c.bias = b.grad;
        if (gemm(b.ctx, c, stream, /*may_decline=*/true)) {
            constexpr int kBlock = 256;
            matmul_bias_accumulate_kernel<<<grid_for(N, kBlock), kBlock, 0, stream>>>(
                dev(dbias), dev(static_cast<const T*>(b.grad)), N);
            NAPKIN_CUDA_CHECK_LAUNCH();
            return;
        }
        c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = nullptr;
    }
    gemm(ctx, c, stream);
    bias_sums(dbias, dout, M, N, stream);
}

template <class T>
void forward_impl(T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias, std::int64_t M,
                  std::int64_t N, std::int64_t K, bool gelu, const MatmulContext& ctx,
                  cudaStream_t stream) {
    NAPKIN_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0,
                        "matmul_forward: M " << M << ", N " << N << ", K " << K);
    if (M == 0 || N == 0) return;
    constexpr cudaDataType_t type = cuda_data_type<T>();
    GemmCall c = gemm_nt(out, inp, weight, M, N, K, type, type, 0.0f);
    if (K > 0) {
        // The fused path: BIAS / GELU / GELU_AUX, each with or without the bias.
        const bool aux = gelu && pre_gelu != nullptr;
        if (gelu) {
            c.epilogue =
                aux ? (bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                       : CUBLASLT_EPILOGUE_GELU_AUX)
                    : (bias != nullptr ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
        } else if (bias != nullptr) {
            c.epilogue = CUBLASLT_EPILOGUE_BIAS;
        }
        c.bias = bias;
        // AUX (pre_gelu) is column-major (N, M) like D, leading dimension N, which cuBLASLt wants
        // divisible by 8: otherwise go unfused.
        if (aux) {
            c.aux = pre_gelu;
            c.aux_ld = N;
        }
        const bool fusable = c.epilogue != CUBLASLT_EPILOGUE_DEFAULT && (!aux || N % 8 == 0);
        if (fusable && gemm(ctx, c, stream, /*may_decline=*/true)) return;
        c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        c.bias = nullptr;
        c.aux = nullptr;
        c.aux_ld = 0;
    }
    constexpr int kBlock = 256;
    if (bias != nullptr || K == 0) {  // out = bias (or the empty sum, 0), then accumulate
        matmul_forward_bias_kernel<<<grid_for(M * N, kBlock), kBlock, 0, stream>>>(dev(out),
                                                                                   dev(bias), M, N);
        NAPKIN_CUDA_CHECK_LAUNCH();
        c.beta = 1.0f;
    }
    if (K > 0) gemm(ctx, c, stream);
    if (!gelu) return;
    matmul_forward_gelu_kernel<<<grid_for(M * N, kBlock), kBlock, 0, stream>>>(
        dev(out), dev(pre_gelu), M * N);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

cublasLtContext* matmul_create_handle() {
    cublasLtHandle_t h = nullptr;
    NAPKIN_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
}

void matmul_destroy_handle(cublasLtContext* handle) noexcept {
    if (handle == nullptr) return;
    {
        // A later handle may get the same address (and another device): nothing of this one's
        // stays behind.
        std::lock_guard<std::mutex> lock(gemm_cache_mutex);
        for (auto it = gemm_cache.begin(); it != gemm_cache.end();)
            it = it->first.first == handle ? gemm_cache.erase(it) : std::next(it);
    }
    cublasLtDestroy(handle);
}

template <class T>
void matmul_forward(const MatmulForwardArgs<T>& a, const Launch& launch) {
    forward_impl<T>(a.out, nullptr, a.inp, a.weight, a.bias, a.M, a.N, a.K, false,
                    matmul_context(launch, a.scratch), launch.stream);
}

template <class T>
void matmul_gelu_forward(const MatmulGeluForwardArgs<T>& a, const Launch& launch) {
    forward_impl<T>(a.out, a.pre_gelu, a.inp, a.weight, a.bias, a.M, a.N, a.K, true,
                    matmul_context(launch, a.scratch), launch.stream);
}

template <class T>
void matmul_backward(const MatmulBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, dweight, dbias, dout, inp, weight, M, N, K, scratch, bias_epilogue] = args;
    const MatmulContext ctx = matmul_context(launch, scratch);
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0,
                        "matmul_backward: M " << M << ", N " << N << ", K " << K);
    constexpr cudaDataType_t type = cuda_data_type<T>();
    if (dinp != nullptr) gemm(ctx, gemm_nn(dinp, dout, weight, M, N, K, type, type, 1.0f), stream);
    weight_grads(dweight, dbias, dout, inp, M, N, K, bias_epilogue, ctx, stream);
}

// dpre (M, K) = DGELU(dout @ weight): gemm_nn's D is the column-major (K, M) matrix dpre^T, and
// the pre-activation, stored like dpre, is the AUX input with leading dimension K (cuBLASLt wants
// it divisible by 8). DGELU_BGRAD's bias gradient runs along D's rows: the K columns of dpre.
template <class T>
void matmul_gelu_backward(const MatmulGeluBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dpre, dpre_bias, dweight, dbias, dout, inp, weight, pre_gelu, M, N, K, scratch] =
        args;
    const MatmulContext ctx = matmul_context(launch, scratch);
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0,
                        "matmul_gelu_backward: M " << M << ", N " << N << ", K " << K);
    if (M > 0 && K > 0) {
        constexpr cudaDataType_t type = cuda_data_type<T>();
        GemmCall c = gemm_nn(dpre, dout, weight, M, N, K, type, type, 0.0f);
        const BiasGradScratch b = bias_grad_scratch(ctx, K, sizeof(device_t<T>));
        // Without a workspace to hold it, the fc's bias gradient is summed from dpre by the kernel.
        const bool bgrad = dpre_bias != nullptr && b.grad != nullptr;
        c.epilogue = bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
        c.aux = const_cast<T*>(pre_gelu);
        c.aux_ld = K;
        c.bias = bgrad ? b.grad : nullptr;
        constexpr int kBlock = 256;
        if (N > 0 && K % 8 == 0 && gemm(b.ctx, c, stream, /*may_decline=*/true)) {
            if (bgrad) {
                matmul_bias_accumulate_kernel<<<grid_for(K, kBlock), kBlock, 0, stream>>>(
                    dev(dpre_bias), dev(static_cast<const T*>(b.grad)), K);
                NAPKIN_CUDA_CHECK_LAUNCH();
            } else {
                bias_sums(dpre_bias, static_cast<const T*>(dpre), M, K, stream);
            }
        } else {
            c.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
            c.aux = nullptr;
            c.aux_ld = 0;
            c.bias = nullptr;
            if (N > 0) {
                gemm(ctx, c, stream);
            } else {
                NAPKIN_CUDA_CHECK(cudaMemsetAsync(dpre, 0, sizeof(device_t<T>) * M * K, stream));
            }
            matmul_dgelu_kernel<<<grid_for(M * K, kBlock), kBlock, 0, stream>>>(
                dev(dpre), dev(pre_gelu), M * K);
            NAPKIN_CUDA_CHECK_LAUNCH();
            bias_sums(dpre_bias, static_cast<const T*>(dpre), M, K, stream);
        }
    }
    weight_grads(dweight, dbias, dout, inp, M, N, K, /*bias_epilogue=*/true, ctx, stream);
}

// ---- fp8 (kernels/matmul.h): cuBLASLt's fp8 kernels take the TN form only.

namespace {

void require_fp8_shape(const char* op, std::int64_t M, std::int64_t N, std::int64_t K) {
    NAPKIN_CUDA_REQUIRE(M >= 0 && N >= 0 && K >= 0 && M % kFp8GemmMultiple == 0 &&
                            N % kFp8GemmMultiple == 0 && K % kFp8GemmMultiple == 0,
                        op << ": M " << M << ", N " << N << ", K " << K << " must be multiples of "
                           << kFp8GemmMultiple);
}

}  // namespace

// TN as it stands: gemm_nt's A is weight under op T, B inp under op N.
void matmul_fp8_forward(const MatmulFp8ForwardArgs& args, const Launch& launch) {
    const auto& [out, inp, inp_scale, weight, weight_scale, bias, M, N, K, scratch] = args;
    require_fp8_shape("matmul_fp8_forward", M, N, K);
    if (M == 0 || N == 0) return;
    GemmCall c = gemm_nt(out, inp, weight, M, N, K, CUDA_R_8F_E4M3, CUDA_R_16BF, 0.0f);
    c.a_scale = weight_scale + kFp8ScaleInv;  // 16-byte aligned, as cuBLASLt's fp8 kernels need
    c.b_scale = inp_scale + kFp8ScaleInv;
    if (bias != nullptr) {
        c.epilogue = CUBLASLT_EPILOGUE_BIAS;
        c.bias = bias;
    }
    gemm(matmul_context(launch, scratch), c, launch.stream);
}

// dinp (M, K) += dout8 @ weight8. Column-major: dinp^T (K, M), ld K, = weight^T (K, N) @
// dout^T (N, M). TN: A under op T stored (N, K) column-major, contiguous along N: that is the
// row-major (K, N) matrix weight^T, the transposed copy; B = dout8 as it is, the column-major
// (N, M) matrix dout^T with ld N under op N. m = K, n = M, k = N.
// dweight (N, K) += dout8^T @ inp8. Column-major: dweight^T (K, N), ld K, = inp^T (K, M) @
// dout (M, N). TN: A under op T stored (M, K) column-major: the row-major (K, M) inp^T; B under
// op N stored (M, N) column-major: the row-major (N, M) dout^T. m = K, n = N, k = M.
void matmul_fp8_backward(const MatmulFp8BackwardArgs& args, const Launch& launch) {
    const auto& [dinp, dweight, dbias, dout, dout8, dout8_t, dout_scale, inp, inp_scale, weight_t,
                 weight_scale, M, N, K, scratch] = args;
    require_fp8_shape("matmul_fp8_backward", M, N, K);
    NAPKIN_CUDA_REQUIRE(scratch != nullptr, "matmul_fp8_backward: scratch is required");
    NAPKIN_CUDA_REQUIRE(dweight == nullptr || dout8_t != nullptr,
                        "matmul_fp8_backward: dweight needs dout8_t");
    const MatmulContext ctx = matmul_context(launch, scratch);
    cudaStream_t stream = launch.stream;
    // inp8^T follows the workspace and dout8^T's place.
    auto* inp_t = reinterpret_cast<std::uint8_t*>(scratch) + kMatmulWorkspaceBytes +
                  matmul_fp8_scratch_round(M * N);
    if (dinp != nullptr && M > 0 && K > 0) {
        GemmCall c;
        c.trans_a = true, c.trans_b = false;
        c.m = K, c.n = M, c.k = N;
        c.a = weight_t, c.lda = N;
        c.b = dout8, c.ldb = N;
        c.d = dinp, c.ldd = K;
        c.a_type = CUDA_R_8F_E4M3, c.b_type = CUDA_R_8F_E5M2, c.d_type = CUDA_R_16BF;
        c.a_scale = weight_scale + kFp8ScaleInv, c.b_scale = dout_scale + kFp8ScaleInv;
        c.beta = 1.0f;
        gemm(ctx, c, stream);
    }
    if (dweight != nullptr && N > 0 && K > 0) {
        GemmCall c;
        c.trans_a = true, c.trans_b = false;
        c.m = K, c.n = N, c.k = M;
        transpose_fp8({.out = inp_t, .inp = inp, .R = M, .C = K}, launch);
        c.a = inp_t, c.lda = M;
        c.b = dout8_t, c.ldb = M;
        c.d = dweight, c.ldd = K;
        c.a_type = CUDA_R_8F_E4M3, c.b_type = CUDA_R_8F_E5M2, c.d_type = CUDA_R_16BF;
        c.a_scale = inp_scale + kFp8ScaleInv, c.b_scale = dout_scale + kFp8ScaleInv;
        c.beta = 1.0f;
        gemm(ctx, c, stream);
    }
    bias_sums(dbias, dout, M, N, stream);
}

#define NAPKIN_CUDA_MATMUL_INSTANTIATE(T)                                                 \
    template void matmul_forward<T>(const MatmulForwardArgs<T>&, const Launch&);          \
    template void matmul_gelu_forward<T>(const MatmulGeluForwardArgs<T>&, const Launch&); \
    template void matmul_backward<T>(const MatmulBackwardArgs<T>&, const Launch&);        \
    template void matmul_gelu_backward<T>(const MatmulGeluBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_MATMUL_INSTANTIATE(float)
NAPKIN_CUDA_MATMUL_INSTANTIATE(bf16_t)
NAPKIN_CUDA_MATMUL_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_MATMUL_INSTANTIATE

}  // namespace napkin::cuda
