// The one cuBLASLt call behind every GEMM of the CUDA backend (kernels/cuda/matmul.cu defines
// it; kernels/cuda/cross_entropy.cu reuses it for the head). Not a public header.
//
// Row-major and cuBLAS's column-major: a row-major matrix X (R, C) with leading dimension C is,
// byte for byte, the column-major matrix X^T (C, R) with leading dimension C. So every row-major
// product Y = A @ B is computed as the column-major product Y^T = B^T @ A^T, with the operands
// swapped and each one's op chosen from how it is stored. The three products napkin needs, as
// the comments beside gemm_nt / gemm_nn / gemm_tn in matmul.cu derive one by one:
//   nt: out (M, N)  = inp (M, K) @ weight (N, K)^T     forward, logits
//   nn: dinp (M, K) = dout (M, N) @ weight (N, K)      input gradient, dx of the head
//   tn: dw (N, K)   = dout (M, N)^T @ inp (M, K)       weight gradient
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/matmul.h"

namespace napkin::cuda {

// cuBLASLt state of one call: the launch's handle and tf32 choice, and the workspace, the op's
// scratch (kernels/matmul.h: null, or kMatmulWorkspaceBytes of device memory).
struct MatmulContext {
    cublasLtContext* handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    bool tf32 = false;
};
inline MatmulContext matmul_context(const Launch& launch, void* workspace) {
    MatmulContext c;
    c.handle = launch.blas;
    c.workspace = workspace;
    c.workspace_bytes = workspace != nullptr ? kMatmulWorkspaceBytes : 0;
    c.tf32 = launch.tf32;
    return c;
}

// One column-major cuBLASLt matmul D (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * D,
// fp32 accumulate (TF32 tensor cores for all-fp32 operands when ctx.tf32). A (lda) is stored
// (k, m) when trans_a, else (m, k); B likewise (k, n) unless trans_b ((n, k)).
struct GemmCall {
    bool trans_a = false, trans_b = false;
    std::int64_t m = 0, n = 0, k = 0;
    const void* a = nullptr;
    std::int64_t lda = 0;
    const void* b = nullptr;
    std::int64_t ldb = 0;
    void* d = nullptr;
    std::int64_t ldd = 0;
    cudaDataType_t a_type = CUDA_R_32F;
    cudaDataType_t b_type = CUDA_R_32F;
    cudaDataType_t d_type = CUDA_R_32F;  // C and D (C is D: accumulation with beta = 1)
    // fp8 A and B: device pointers to the fp32 factors cuBLASLt multiplies the product by
    // (A/B_SCALE_POINTER: the operands' scale_inv, kernels/quantize.h); null otherwise.
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    float alpha = 1.0f, beta = 0.0f;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;  // (m), with the BIAS epilogues
    void* aux = nullptr;         // (m, n) with leading dimension aux_ld, with the GELU_AUX ones
    std::int64_t aux_ld = 0;
};

// Runs the call on `stream`. Returns false, having queued nothing, when cuBLASLt offers no
// algorithm and `may_decline` (the caller then takes an unfused path); otherwise throws on any
// failure.
bool gemm(const MatmulContext& ctx, const GemmCall& call, cudaStream_t stream,
          bool may_decline = false);

template <class T>
constexpr cudaDataType_t cuda_data_type() {
    return CUDA_R_32F;  // float
}
template <>
constexpr cudaDataType_t cuda_data_type<bf16_t>() {
    return CUDA_R_16BF;
}
template <>
constexpr cudaDataType_t cuda_data_type<f16_t>() {
    return CUDA_R_16F;
}
template <>
constexpr cudaDataType_t cuda_data_type<f8e4m3_t>() {
    return CUDA_R_8F_E4M3;
}
template <>
constexpr cudaDataType_t cuda_data_type<f8e5m2_t>() {
    return CUDA_R_8F_E5M2;
}

// The three row-major products (derivations in matmul.cu), fp32 accumulate, D = C accumulated
// with `beta`. Types: inputs `ab` (both A and B), output `d`.
// out (M, N) = inp (M, K) @ weight (N, K)^T
GemmCall gemm_nt(void* out, const void* inp, const void* weight, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta);
// dinp (M, K) = dout (M, N) @ weight (N, K)
GemmCall gemm_nn(void* dinp, const void* dout, const void* weight, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta);
// dweight (N, K) = dout (M, N)^T @ inp (M, K)
GemmCall gemm_tn(void* dweight, const void* dout, const void* inp, std::int64_t M, std::int64_t N,
                 std::int64_t K, cudaDataType_t ab, cudaDataType_t d, float beta);

}  // namespace napkin::cuda
