// lora on the GPU (declared in kernels/lora.h; the CPU twin, the spec, is kernels/cpu/lora.cpp):
// each product of the CPU's one cuBLASLt call through gemm() (kernels/cuda/gemm.cuh), with the
// same leading dimensions, so that a part's rows of out (or dout) and its columns of h are used
// in place, strided by part. Storage type in, storage type out, fp32 accumulate: every result is
// rounded into T once, where the header's "Rounding" paragraph says, and the accumulations
// (out +=, the gradients +=) are beta = 1, one rounding of the fp32 alpha * product + C, which is
// what the CPU's 16-bit path computes in fp32 before it narrows. No scratch beyond the
// cuBLASLt workspace: h and dh are the caller's buffers and every intermediate is one of them.
#include <cublasLt.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/lora.h"

namespace napkin::cuda {

namespace {

// c (m, n; ldc) = alpha * op(a) (m, k) @ op(b) (k, n) + beta * c, every matrix row-major with a
// leading dimension, as kernels/cpu/lora.cpp's sgemm calls: op(a) is a (m, k; lda), or a stored
// (k, m; lda) transposed when trans_a; op(b) is b (k, n; ldb), or b stored (n, k; ldb)
// transposed when trans_b. The CPU's gemm_nt is (false, true), gemm_nn (false, false), gemm_tn
// (true, false).
//
// Column-major (gemm.cuh): the bytes of a row-major X (R, C; ld) are the column-major X^T (C, R;
// ld), so c's bytes are c^T (n, m; ldc), and c^T = op(b)^T @ op(a)^T. Untransposed, b's bytes
// are b^T = op(b)^T as they lie (op N); transposed, they are b^T where op(b)^T = b is wanted
// (op T). Likewise a. So cuBLASLt's A is b with op trans_b, its B is a with op trans_a, and
// m, n swap: D (n, m; ldc) = op(b)^T (n, k) @ op(a)^T (k, m). D is the device type of
// cuda_common.cuh (napkin's bf16_t and f16_t are incomplete here: offsets are taken on D).
template <class D>
void product(const MatmulContext& ctx, cudaStream_t stream, cudaDataType_t type, bool trans_a,
             bool trans_b, D* c, std::int64_t ldc, const D* a, std::int64_t lda, const D* b,
             std::int64_t ldb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
             float beta) {
    GemmCall g;
    g.trans_a = trans_b;
    g.trans_b = trans_a;
    g.m = n, g.n = m, g.k = k;
    g.a = b, g.lda = ldb;
    g.b = a, g.ldb = lda;
    g.d = c, g.ldd = ldc;
    g.a_type = type, g.b_type = type, g.d_type = type;
    g.alpha = alpha, g.beta = beta;
    gemm(ctx, g, stream);
}

// The shape's parts as the CPU reads them: each part's rows within N (kernels/lora.h).
void check_shape(const LoraShape& s, const char* op) {
    NAPKIN_CUDA_REQUIRE(s.M >= 0 && s.N >= 0 && s.K >= 0 && s.r >= 0 && s.parts >= 1,
                        op << ": M " << s.M << ", N " << s.N << ", K " << s.K << ", r " << s.r
                           << ", parts " << s.parts);
    for (int p = 0; p < s.parts; ++p) {
        const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
        NAPKIN_CUDA_REQUIRE(rows >= 0 && off + rows <= s.N,
                            op << ": part " << p << " has rows " << off << ".." << off + rows
                               << " of N " << s.N << " (n_first " << s.n_first << ")");
    }
}

}  // namespace

template <class T>
void lora_forward(const LoraForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, h, inp, a, b, s, scale, scratch] = args;
    const MatmulContext ctx = matmul_context(launch, scratch);
    cudaStream_t stream = launch.stream;
    check_shape(s, "lora_forward");
    const std::int64_t M = s.M, N = s.N, K = s.K, r = s.r, PR = s.parts * s.r;
    constexpr cudaDataType_t type = cuda_data_type<T>();
    auto *out_d = dev(out), *h_d = dev(h);
    const auto *x = dev(inp), *a_d = dev(a), *b_d = dev(b);
    // h (M, PR) = T(inp (M, K) @ a (PR, K)^T); with K = 0 the empty sum, as sgemm writes it.
    if (K > 0)
        product(ctx, stream, type, false, true, h_d, PR, x, K, a_d, K, M, PR, K, 1.0f, 0.0f);
    else if (M * PR > 0)
        NAPKIN_CUDA_CHECK(cudaMemsetAsync(h, 0, static_cast<std::size_t>(M * PR) * sizeof(*h_d),
                                          stream));  // +0 in every storage type
    // out_p (M, rows; ld N) = T(out_p + scale * h_p (M, r; ld PR) @ b_p (rows, r)^T), reading h
    // as stored.
    for (int p = 0; p < s.parts; ++p) {
        const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
        product(ctx, stream, type, false, true, out_d + off, N, h_d + p * r, PR, b_d + off * r, r,
                M, rows, r, scale, 1.0f);
    }
}

template <class T>
void lora_backward(const LoraBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, da, db, dh, dout, inp, h, a, b, s, scale, scratch] = args;
    const MatmulContext ctx = matmul_context(launch, scratch);
    cudaStream_t stream = launch.stream;
    check_shape(s, "lora_backward");
    const std::int64_t M = s.M, N = s.N, K = s.K, r = s.r, PR = s.parts * s.r;
    constexpr cudaDataType_t type = cuda_data_type<T>();
    auto *dh_d = dev(dh), *db_d = dev(db);
    const auto *g = dev(dout), *h_d = dev(h), *b_d = dev(b);
    // A part with no rows contributes the empty sum to its columns of dh: zero the whole buffer
    // first (the other parts overwrite theirs), as there is no strided set.
    bool empty_part = false;
    for (int p = 0; p < s.parts; ++p)
        empty_part |= lora_part_rows(s, p) == 0;
    if (empty_part && M * PR > 0)
        NAPKIN_CUDA_CHECK(
            cudaMemsetAsync(dh, 0, static_cast<std::size_t>(M * PR) * sizeof(*dh_d), stream));
    for (int p = 0; p < s.parts; ++p) {
        const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
        if (rows == 0) continue;
        // dh_p (M, r; ld PR) = T(scale * dout_p (M, rows; ld N) @ b_p (rows, r))
        product(ctx, stream, type, false, false, dh_d + p * r, PR, g + off, N, b_d + off * r, r, M,
                r, rows, scale, 0.0f);
        // db_p (rows, r) = T(db_p + scale * dout_p^T @ h_p (M, r; ld PR))
        product(ctx, stream, type, true, false, db_d + off * r, r, g + off, N, h_d + p * r, PR,
                rows, r, M, scale, 1.0f);
    }
    // da (PR, K) = T(da + dh^T @ inp (M, K)), reading dh as stored
    product(ctx, stream, type, true, false, dev(da), K, dev(dh), PR, dev(inp), K, PR, K, M, 1.0f,
            1.0f);
    // dinp (M, K) = T(dinp + dh @ a (PR, K))
    if (dinp != nullptr)
        product(ctx, stream, type, false, false, dev(dinp), K, dev(dh), PR, dev(a), K, M, K, PR,
                1.0f, 1.0f);
}

#define NAPKIN_CUDA_LORA_INSTANTIATE(T)                                      \
    template void lora_forward<T>(const LoraForwardArgs<T>&, const Launch&); \
    template void lora_backward<T>(const LoraBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_LORA_INSTANTIATE(float)
NAPKIN_CUDA_LORA_INSTANTIATE(bf16_t)
NAPKIN_CUDA_LORA_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_LORA_INSTANTIATE

}  // namespace napkin::cuda
