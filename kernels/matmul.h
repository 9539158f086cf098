// matmul: out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)], row-major, fp32 accumulate.
// Weights are stored (out_features, in_features) as nn.Linear does. Backward:
//   dinp (M, K)   = dout (M, N) @ weight (N, K)            2*M*N*K FLOPs
//   dweight (N, K) += dout^T (N, M) @ inp (M, K)           2*M*N*K FLOPs
//   dbias (N)     += sum over M of dout                    M*N FLOPs
// Keeps for backward: inp (owned by the op that produced it, see core/op_plan.h).
// CPU: OpenBLAS sgemm (kernels/cpu/matmul.cpp); 16-bit storage is widened to fp32 in a
// caller-provided scratch first. CUDA (cuBLASLt) arrives with the CUDA backend.
#pragma once

#include <cstddef>

#include "kernels/cost.h"

struct CUstream_st;      // cudaStream_t and cublasLtHandle_t, without the CUDA headers
struct cublasLtContext;  // (op headers compile in any build)

namespace napkin {

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

namespace cpu {

// Floats of scratch the 16-bit paths need (0 for float): inp, weight and out widened.
inline std::int64_t matmul_scratch_floats(std::int64_t M, std::int64_t N, std::int64_t K) { return M * K + N * K + M * N; }

// out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]; bias may be null. Overwrites out.
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t M, std::int64_t N,
                    std::int64_t K, float* scratch);

// dinp (M, K) += dout @ weight; dweight (N, K) += dout^T @ inp; dbias (N) += column sums of
// dout. dinp, dweight and dbias may each be null (not needed, or frozen).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     std::int64_t M, std::int64_t N, std::int64_t K, float* scratch);

// Measures this machine's fp32 GEMM throughput (best of `reps` n x n x n sgemm calls, FLOP/s):
// the CPU "peak" that training MFU is quoted against.
double sgemm_peak_flops(int n = 512, int reps = 5);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/matmul.cu, cuBLASLt; tested against the CPU in
// tests/kernels_cuda/matmul_test.cpp), on the same storage types and with the same semantics as
// the CPU's above; fp32 accumulate throughout. Pointers are device memory, the work is queued on
// `stream` (nullptr: the legacy default stream).

// cuBLASLt state the caller owns: the handle, and a workspace the caller allocates on the device
// (through the accounting allocator as a temporary, so it shows in the memory breakdown), of
// workspace_bytes (kMatmulWorkspaceBytes is what cuBLASLt's Hopper kernels want; 0 works, with
// fewer algorithms). tf32: fp32 GEMMs on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32, 10-bit
// mantissa inputs); off, fp32 GEMMs are exact fp32 (CUBLAS_COMPUTE_32F).
struct MatmulContext {
    cublasLtContext* handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    bool tf32 = false;
};
inline constexpr std::size_t kMatmulWorkspaceBytes = 32ull << 20;

cublasLtContext* matmul_create_handle();                    // throws CudaError
void matmul_destroy_handle(cublasLtContext* handle) noexcept;

// out (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]; bias may be null. Overwrites out.
// The bias rides cuBLASLt's BIAS epilogue (a separate kernel where cuBLASLt has no algorithm).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t M,
                    std::int64_t N, std::int64_t K, const MatmulContext& ctx, CUstream_st* stream);

// out (M, N) = gelu(pre_gelu), pre_gelu (M, N) = inp (M, K) @ weight (N, K)^T [+ bias (N)]:
// the fc matmul and GELU fused in cuBLASLt's GELU_AUX_BIAS epilogue (pre_gelu is the AUX output,
// kept for gelu_backward). pre_gelu may be null (GELU epilogue only). Where cuBLASLt has no
// fused algorithm (AUX needs N % 8 == 0), a plain GEMM and kernels/cuda/activation.cu's GELU.
template <class T>
void matmul_gelu_forward(T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias,
                         std::int64_t M, std::int64_t N, std::int64_t K, const MatmulContext& ctx,
                         CUstream_st* stream);

// dinp (M, K) += dout (M, N) @ weight (N, K); dweight (N, K) += dout^T @ inp (M, K);
// dbias (N) += column sums of dout. Each may be null. Accumulation is cuBLASLt's beta = 1
// (one rounding of the fp32 result into T, as the CPU's 16-bit path rounds once).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     std::int64_t M, std::int64_t N, std::int64_t K, const MatmulContext& ctx,
                     CUstream_st* stream);

}  // namespace cuda

}  // namespace napkin
