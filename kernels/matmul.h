// matmul: out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)], row-major, fp32 accumulate.
// Weights are stored (out_features, in_features) as nn.Linear does. Backward:
//   dinp (M, K)   = dout (M, N) @ weight (N, K)            2*M*N*K FLOPs
//   dweight (N, K) += dout^T (N, M) @ inp (M, K)           2*M*N*K FLOPs
//   dbias (N)     += sum over M of dout                    M*N FLOPs
// Keeps for backward: inp (owned by the op that produced it, see core/op_plan.h).
// CPU: OpenBLAS sgemm (kernels/cpu/matmul.cpp); 16-bit storage and fp8 codes (fp8-amp, with
// their per-tensor scales) are widened to fp32 in a caller-provided scratch first. CUDA:
// cuBLASLt (kernels/cuda/matmul.cu). Tests: tests/kernels/matmul_test.cpp (fp8:
// tests/kernels/matmul_fp8_test.cpp).
#pragma once

#include <cstddef>

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct bf16_t;  // core/half.h and core/fp8.h (C++20), by pointer only: nvcc includes this too
struct f8e4m3_t;
struct f8e5m2_t;

struct MatmulShape {
    std::int64_t M = 0;  // rows: tokens (B*T)
    std::int64_t N = 0;  // output features
    std::int64_t K = 0;  // input features
    bool bias = false;
    DType in = DType::f32;      // dtype of inp and weight as the GEMM reads them
    DType out = DType::f32;     // dtype of out
    DType weight = DType::f32;  // dtype the weight is stored in (nf4 under QLoRA)
};

inline KernelCost matmul_forward_cost(const MatmulShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.N * s.K + (s.bias ? 1ull * s.M * s.N : 0);
    c.bytes_read = nbytes(s.in, s.M * s.K) + nbytes(s.weight, s.N * s.K) +
                   (s.bias ? nbytes(s.in, s.N) : 0);
    c.bytes_written = nbytes(s.out, s.M * s.N);
    return c;
}

// Gradient with respect to the input only (all that a frozen weight needs).
inline KernelCost matmul_backward_input_cost(const MatmulShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.N * s.K;
    c.bytes_read = nbytes(s.out, s.M * s.N) + nbytes(s.weight, s.N * s.K);
    c.bytes_written = nbytes(s.in, s.M * s.K);
    return c;
}

// Gradient with respect to the weight (and bias), accumulated.
inline KernelCost matmul_backward_weight_cost(const MatmulShape& s, DType grad) {
    KernelCost c;
    c.flops = 2ull * s.M * s.N * s.K + (s.bias ? 1ull * s.M * s.N : 0);
    c.bytes_read = nbytes(s.out, s.M * s.N) + nbytes(s.in, s.M * s.K) + nbytes(grad, s.N * s.K);
    c.bytes_written = nbytes(grad, s.N * s.K) + (s.bias ? 2 * nbytes(grad, s.N) : 0);
    return c;
}

// The MLP's GEMMs with GELU in their epilogues (matmul_gelu_forward, matmul_gelu_backward below),
// as the op plan counts them (core/op_plan.cpp): GELU's FLOPs stay with the activation op (they
// are not model FLOPs, and they are still done), its passes over memory are gone. The fc forward
// (s its shape) writes the pre-activation (M, N) beside GELU's output.
inline KernelCost matmul_gelu_forward_cost(const MatmulShape& s) {
    KernelCost c = matmul_forward_cost(s);
    c.bytes_written += nbytes(s.out, s.M * s.N);
    return c;
}

// The proj's input gradient through GELU (s the proj's shape, its K the fc's N): the GEMM also
// reads the pre-activation (M, K) and, with the fc's bias, sums its (M, K) result into that
// bias's gradient (K), read and written as matmul_backward_weight_cost counts a bias.
inline KernelCost matmul_gelu_backward_input_cost(const MatmulShape& s, bool fc_bias, DType grad) {
    KernelCost c = matmul_backward_input_cost(s);
    c.bytes_read += nbytes(s.in, s.M * s.K);
    if (fc_bias) {
        c.flops += 1ull * s.M * s.K;
        c.bytes_written += 2 * nbytes(grad, s.K);
    }
    return c;
}

// The fp8 GEMMs of fp8-amp, as the kernels below run them (the op plan's costs above count the
// op: its bf16 weight read once): E4M3 inp and weight, an E5M2 output gradient, at 1 byte per
// element; out, dinp, dweight and bias in s.out's dtype (bf16); the scale pairs' 8 bytes each
// are left out. Backward: dinp += dout8 @ weight8 and dweight += dout8^T @ inp8, both read and
// written (accumulated), dbias from the bf16 dout.
inline KernelCost matmul_fp8_forward_cost(const MatmulShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.N * s.K + (s.bias ? 1ull * s.M * s.N : 0);
    c.bytes_read = nbytes(DType::f8e4m3, s.M * s.K) + nbytes(DType::f8e4m3, s.N * s.K) +
                   (s.bias ? nbytes(s.out, s.N) : 0);
    c.bytes_written = nbytes(s.out, s.M * s.N);
    return c;
}

inline KernelCost matmul_fp8_backward_cost(const MatmulShape& s) {
    KernelCost c;
    c.flops = 4ull * s.M * s.N * s.K + (s.bias ? 1ull * s.M * s.N : 0);
    c.bytes_read = nbytes(DType::f8e5m2, s.M * s.N) + nbytes(DType::f8e4m3, s.N * s.K) +
                   nbytes(DType::f8e4m3, s.M * s.K) + nbytes(s.out, s.M * s.K) +
                   nbytes(s.out, s.N * s.K) + (s.bias ? nbytes(s.out, s.M * s.N + s.N) : 0);
    c.bytes_written =
        nbytes(s.out, s.M * s.K) + nbytes(s.out, s.N * s.K) + (s.bias ? nbytes(s.out, s.N) : 0);
    return c;
}

// The argument structs of the calls below (kernels/launch.h). scratch, where a struct has one,
// is the caller's GEMM scratch: the CPU widens 16-bit and fp8 operands into it
// (cpu::matmul_scratch_floats; unused for float), CUDA hands it to cuBLASLt as its workspace
// (null, or kMatmulWorkspaceBytes) and, fp8 backward, keeps its transposes after that.

// out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]; bias may be null. Overwrites out.
template <class T>
struct MatmulForwardArgs {
    T* out = nullptr;           // (M, N)
    const T* inp = nullptr;     // (M, K)
    const T* weight = nullptr;  // (N, K)
    const T* bias = nullptr;    // (N) or null
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
};

// dinp (M, K) += dout @ weight; dweight (N, K) += dout^T @ inp; dbias (N) += column sums of
// dout. dinp, dweight and dbias may each be null (not needed, or frozen).
template <class T>
struct MatmulBackwardArgs {
    T* dinp = nullptr;          // (M, K) or null
    T* dweight = nullptr;       // (N, K) or null
    T* dbias = nullptr;         // (N) or null
    const T* dout = nullptr;    // (M, N)
    const T* inp = nullptr;     // (M, K)
    const T* weight = nullptr;  // (N, K)
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
    // CUDA: dbias from cuBLASLt's BGRADB epilogue on the dweight GEMM instead of a kernel that
    // reads dout once more (kernels/cuda/matmul.cu says how it still accumulates). The sums then
    // come in cuBLASLt's order, rounded into T before the add: the CPU ignores the flag.
    bool bias_grad_epilogue = false;
};

// out (M, N) = gelu(pre_gelu), pre_gelu (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]:
// the fc matmul and GELU fused (CUDA only, below). pre_gelu may be null (GELU epilogue only).
template <class T>
struct MatmulGeluForwardArgs {
    T* out = nullptr;           // (M, N)
    T* pre_gelu = nullptr;      // (M, N) or null
    const T* inp = nullptr;     // (M, K)
    const T* weight = nullptr;  // (N, K)
    const T* bias = nullptr;    // (N) or null
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
};

// The MLP's proj backward with the GELU backward in the input gradient's epilogue (cuBLASLt's
// DGELU, DGELU_BGRAD with the fc's bias), the proj's own gradients as matmul_backward's:
//   dpre (M, K)       = (dout (M, N) @ weight (N, K)) * gelu'(pre_gelu (M, K)), OVERWRITTEN: the
//                       fp32 product times gelu', rounded once into T
//   dpre_bias (K)    += column sums of those fp32 values (the fc's bias gradient)
//   dweight (N, K)   += dout^T @ inp (M, K);  dbias (N) += column sums of dout
// inp is the proj's input, gelu(pre_gelu) as the forward kept it. dpre_bias, dweight and dbias
// may each be null.
template <class T>
struct MatmulGeluBackwardArgs {
    T* dpre = nullptr;            // (M, K)
    T* dpre_bias = nullptr;       // (K) or null
    T* dweight = nullptr;         // (N, K) or null
    T* dbias = nullptr;           // (N) or null
    const T* dout = nullptr;      // (M, N)
    const T* inp = nullptr;       // (M, K)
    const T* weight = nullptr;    // (N, K)
    const T* pre_gelu = nullptr;  // (M, K)
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
};

// fp8 GEMMs (fp8-amp): operands are fp8 codes, each with its scale pair (kernels/quantize.h;
// [kFp8ScaleInv] is scale_inv, the dequantization factor), over bf16 storage.
// out (M, N) bf16 = (inp @ weight^T) * (inp_scale[kFp8ScaleInv] * weight_scale[kFp8ScaleInv])
//                   [+ bias (N)], rounded once. Overwrites out; bias may be null.
struct MatmulFp8ForwardArgs {
    bf16_t* out = nullptr;                // (M, N)
    const f8e4m3_t* inp = nullptr;        // (M, K)
    const float* inp_scale = nullptr;     // (kFp8ScaleFloats)
    const f8e4m3_t* weight = nullptr;     // (N, K)
    const float* weight_scale = nullptr;  // (kFp8ScaleFloats)
    const bf16_t* bias = nullptr;         // (N) or null
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
};

// dinp (M, K) += (dout8 (M, N) @ weight (N, K)) * (dout_scale[kFp8ScaleInv] * weight_scale[kFp8ScaleInv]);
// dweight (N, K) += (dout8^T @ inp (M, K)) * (dout_scale[kFp8ScaleInv] * inp_scale[kFp8ScaleInv]);
// dbias (N) += column sums of dout (M, N), the bf16 gradient that dout8 was cast from (as
// Transformer Engine takes dbias from the high-precision gradient). dinp, dweight and dbias may
// each be null; dout only when dbias is. The weight comes transposed, weight_t (K, N), as the
// dinp GEMM reads it (the backward's cast writes only that: quantize_transpose); dout8_t
// (N, M), dout8 transposed by the same cast, is what CUDA's dweight GEMM reads (required there
// with dweight; the CPU reads dout8 and ignores it).
struct MatmulFp8BackwardArgs {
    bf16_t* dinp = nullptr;               // (M, K) or null
    bf16_t* dweight = nullptr;            // (N, K) or null
    bf16_t* dbias = nullptr;              // (N) or null
    const bf16_t* dout = nullptr;         // (M, N)
    const f8e5m2_t* dout8 = nullptr;      // (M, N)
    const f8e5m2_t* dout8_t = nullptr;    // (N, M) or null
    const float* dout_scale = nullptr;    // (kFp8ScaleFloats)
    const f8e4m3_t* inp = nullptr;        // (M, K)
    const float* inp_scale = nullptr;     // (kFp8ScaleFloats)
    const f8e4m3_t* weight_t = nullptr;   // (K, N)
    const float* weight_scale = nullptr;  // (kFp8ScaleFloats)
    std::int64_t M = 0, N = 0, K = 0;
    float* scratch = nullptr;
};

namespace cpu {

// Floats of scratch the 16-bit and fp8 paths need (0 for float): inp, weight and out widened.
inline std::int64_t matmul_scratch_floats(std::int64_t M, std::int64_t N, std::int64_t K) {
    return M * K + N * K + M * N;
}

// CPU kernels (kernels/cpu/matmul.cpp, tested in tests/kernels/matmul_test.cpp), on float, bf16_t
// and f16_t storage; OpenBLAS sgemm on fp32 operands (16-bit ones widened into scratch first).
template <class T>
void matmul_forward(const MatmulForwardArgs<T>& a);
template <class T>
void matmul_backward(const MatmulBackwardArgs<T>& a);

// The twins of CUDA's fused GELU epilogues, the spec they round to: out = gelu of the fp32
// product (+ bias) rounded once into T, pre_gelu that fp32 value rounded, where matmul_forward
// then gelu_forward round the product first; and dpre as MatmulGeluBackwardArgs says. For float
// storage the same bits as the unfused pairs.
template <class T>
void matmul_gelu_forward(const MatmulGeluForwardArgs<T>& a);
template <class T>
void matmul_gelu_backward(const MatmulGeluBackwardArgs<T>& a);

// The fp8 GEMMs: the codes are widened exactly into fp32 scratch (matmul_scratch_floats, as the
// 16-bit paths), multiplied by sgemm (products of fp8 values are exact in fp32, the sums
// accumulate in fp32), and the product is scaled by the two scale_inv multiplied together in
// fp32: cuBLASLt's D = scale_a * scale_b * (A B) arithmetic.
void matmul_fp8_forward(const MatmulFp8ForwardArgs& a);
void matmul_fp8_backward(const MatmulFp8BackwardArgs& a);

// Measures this machine's fp32 GEMM throughput (best of `reps` n x n x n sgemm calls, FLOP/s):
// the CPU "peak" that training MFU is quoted against.
double sgemm_peak_flops(int n = 512, int reps = 5);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/matmul.cu, cuBLASLt; tested against the CPU in
// tests/kernels_cuda/matmul_test.cpp), on the same storage types and with the same semantics as
// the CPU's above; fp32 accumulate throughout. Pointers are device memory, the work is queued on
// launch.stream with launch.blas. The workspace is the args' scratch (null: none, fewer
// algorithms; else kMatmulWorkspaceBytes, what cuBLASLt's Hopper kernels want), which the
// caller allocates on the device (through the accounting allocator as a temporary, so it shows
// in the memory breakdown).
inline constexpr std::size_t kMatmulWorkspaceBytes = 32ull << 20;

cublasLtContext* matmul_create_handle();                    // throws CudaError
void matmul_destroy_handle(cublasLtContext* handle) noexcept;

// The bias rides cuBLASLt's BIAS epilogue (a separate kernel where cuBLASLt has no algorithm).
template <class T>
void matmul_forward(const MatmulForwardArgs<T>& a, const Launch& launch);

// The fc matmul and GELU fused in cuBLASLt's GELU_AUX_BIAS epilogue (pre_gelu is the AUX output,
// kept for the backward), the CPU twin's rounding. Where cuBLASLt has no fused algorithm (AUX
// needs N % 8 == 0), a plain GEMM and GELU: matmul_forward then gelu_forward's rounding.
template <class T>
void matmul_gelu_forward(const MatmulGeluForwardArgs<T>& a, const Launch& launch);

// DGELU(_BGRAD) on the input gradient's GEMM (AUX, the pre-activation, needs K % 8 == 0; the
// fc's bias gradient lands in a T scratch at the end of the workspace and is added by a kernel,
// since an epilogue's bias gradient overwrites), then the weight gradient as matmul_backward's.
// Where cuBLASLt declines: the GEMM, then dpre = gelu' * dpre and the column sums as kernels,
// the rounding of matmul_backward then gelu_backward.
template <class T>
void matmul_gelu_backward(const MatmulGeluBackwardArgs<T>& a, const Launch& launch);

// Accumulation is cuBLASLt's beta = 1 (one rounding of the fp32 result into T, as the CPU's
// 16-bit path rounds once).
template <class T>
void matmul_backward(const MatmulBackwardArgs<T>& a, const Launch& launch);

// fp8 GEMMs (fp8-amp; the CPU's above are the spec): cuBLASLt's fp8 kernels, sm_89 and later,
// with the operands' scale_inv as A/B_SCALE_POINTER (device fp32), fp32 compute, bf16 D, the
// bias by the BIAS epilogue, accumulation by beta = 1. cuBLASLt documents them for the "TN" form
// only (A transposed, B not: both operands contiguous along k) and for dimensions and leading
// dimensions that are multiples of 16 bytes: the forward is TN as it stands; the backward
// contracts over N (dinp: weight8^T and dout8) and over M (dweight: inp8^T and dout8^T). The
// casts before it write weight8^T and dout8^T (quantize_transpose); inp8, cast in the forward,
// is transposed here (transpose_fp8; exact: a per-tensor scale survives a transpose). The
// scratch after the workspace: round(M N) bytes where the caller may cast dout8^T
// (matmul_fp8_dout_t), then round(M K) for inp8^T: matmul_fp8_backward_scratch_bytes in all.
// M, N and K must be multiples of kFp8GemmMultiple.
inline constexpr std::int64_t kFp8GemmMultiple = 16;
inline std::size_t matmul_fp8_scratch_round(std::int64_t bytes) {
    return (static_cast<std::size_t>(bytes) + 255) / 256 * 256;
}
inline std::size_t matmul_fp8_backward_scratch_bytes(std::int64_t M, std::int64_t N,
                                                     std::int64_t K) {
    return matmul_fp8_scratch_round(M * N) + matmul_fp8_scratch_round(M * K);  // dout^T, inp^T
}
// Where in the scratch (kMatmulWorkspaceBytes + matmul_fp8_backward_scratch_bytes) dout8^T goes.
inline f8e5m2_t* matmul_fp8_dout_t(float* scratch) {
    return reinterpret_cast<f8e5m2_t*>(reinterpret_cast<unsigned char*>(scratch) +
                                       kMatmulWorkspaceBytes);
}

void matmul_fp8_forward(const MatmulFp8ForwardArgs& a, const Launch& launch);
// scratch: kMatmulWorkspaceBytes of workspace, then matmul_fp8_backward_scratch_bytes
void matmul_fp8_backward(const MatmulFp8BackwardArgs& a, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
