// cross_entropy: the loss over the head's logits, computed in chunks of rows so that the full
// fp32 logits (B*T, Vp) never exist at once (the seeds' chunked / cut cross-entropy).
// For each chunk of R rows: logits (R, Vp) fp32 = head matmul; softmax over the V real
// columns, loss = logsumexp - logit[target], dlogits = (softmax - onehot) / (B*T); the head's
// input and weight gradients for the chunk are taken right away, so nothing is kept.
// FLOPs per logit: 5 (max, subtract, exp, sum, scale) forward + gradient together.
#pragma once

#include <cstddef>

#include "kernels/cost.h"
#include "kernels/matmul.h"

namespace napkin {

struct CrossEntropyShape {
    std::int64_t M = 0;      // rows: B*T
    std::int64_t V = 0;      // real vocabulary
    std::int64_t Vp = 0;     // padded vocabulary (columns of the logits)
    std::int64_t chunk = 0;  // rows per chunk
};

inline KernelCost cross_entropy_forward_cost(const CrossEntropyShape& s) {
    KernelCost c;
    c.flops = 5ull * s.M * s.V;
    c.bytes_read = nbytes(DType::f32, s.M * s.Vp) + nbytes(DType::i8, 4 * s.M);
    c.bytes_written = nbytes(DType::f32, s.M * s.Vp) + nbytes(DType::f32, s.M);
    c.workspace_bytes = nbytes(DType::f32, s.chunk * s.Vp);
    return c;
}

// The CUDA op's launches for one chunk of R rows at 16-bit storage (2-byte x, w, dx, dlogits;
// fp32 logits and dw's fp32 sum dw32), each tensor read or written once per launch
// (docs/CUDA.md, "The LM head and the loss", and bench/head_ce_bench's account):
//   logits (R, Vp) fp32 = x @ w^T          2 R Vp C FLOPs; x, w read; logits written
//   row kernel                             5 R V; the logits read `row_reads` times over Vp
//                                          columns, dlogits written; targets read, losses written
//   dx (R, C) = dlogits @ w                2 R Vp C; dlogits, w read; dx written
//   dw32 (Vp, C) (+)= dlogits^T @ x        2 R Vp C; dlogits, x read, dw32 read unless `first`
//                                          (beta 0), dw32 written
// and once per call dw (Vp, C) += dw32: Vp C FLOPs; dw, dw32 read, dw written.
struct HeadCrossEntropyLaunchCosts {
    KernelCost logits, rows, dx, dw;
};
inline HeadCrossEntropyLaunchCosts head_cross_entropy_chunk_costs(std::int64_t R, std::int64_t V,
                                                                  std::int64_t Vp, std::int64_t C,
                                                                  bool first, int row_reads) {
    const std::uint64_t gemm_flops = 2ull * R * Vp * C;
    HeadCrossEntropyLaunchCosts c;
    c.logits = {gemm_flops, nbytes(DType::bf16, R * C) + nbytes(DType::bf16, Vp * C),
                nbytes(DType::f32, R * Vp), 0};
    c.rows = {5ull * R * V,
              static_cast<std::uint64_t>(row_reads) * nbytes(DType::f32, R * Vp) +
                  nbytes(DType::i8, 4 * R),
              nbytes(DType::bf16, R * Vp) + nbytes(DType::f32, R), 0};
    c.dx = {gemm_flops, nbytes(DType::bf16, R * Vp) + nbytes(DType::bf16, Vp * C),
            nbytes(DType::bf16, R * C), 0};
    c.dw = {gemm_flops,
            nbytes(DType::bf16, R * Vp) + nbytes(DType::bf16, R * C) +
                (first ? 0 : nbytes(DType::f32, Vp * C)),
            nbytes(DType::f32, Vp * C), 0};
    return c;
}
inline KernelCost head_cross_entropy_accumulate_cost(std::int64_t Vp, std::int64_t C) {
    return {static_cast<std::uint64_t>(Vp * C),
            nbytes(DType::bf16, Vp * C) + nbytes(DType::f32, Vp * C), nbytes(DType::bf16, Vp * C),
            0};
}

// The head and the loss, fused and chunked, forward and backward in one pass:
//   for each chunk of R rows: logits (R, Vp) fp32 = x (R, C) @ w (Vp, C)^T
//     losses[m] = logsumexp(logits[m, :V]) - logits[m, targets[m]]     (columns >= V: padding)
//     dlogits   = (softmax(logits[m, :V]) - onehot(targets[m])) * dloss  (padding columns: 0)
//     dx (R, C) = dlogits @ w            (overwritten: the head's input gradient)
//     dw (Vp, C) += dlogits^T @ x        (skipped when dw is null: a frozen head)
template <class T>
struct HeadCrossEntropyArgs {
    float* losses = nullptr;                // (M)
    T* dx = nullptr;                        // (M, C)
    T* dw = nullptr;                        // (Vp, C) or null
    const T* x = nullptr;                   // (M, C)
    const T* w = nullptr;                   // (Vp, C)
    const std::int32_t* targets = nullptr;  // (M)
    std::int64_t M = 0, C = 0, V = 0, Vp = 0, chunk = 0;
    float dloss = 0.0f;  // dL/dloss of each row (1 / M for the mean)
    // The backend's head_cross_entropy_scratch (CPU floats, CUDA bytes below).
    float* scratch = nullptr;
    // CUDA: the GEMM scratch as kernels/matmul.h's, the cuBLASLt workspace (null: none); the CPU
    // widens into its own scratch above.
    float* gemm_scratch = nullptr;
};

namespace cpu {

// Floats of scratch head_cross_entropy needs: the logits chunk, plus (16-bit storage) the
// head weight and its gradient widened to fp32 and a widened chunk of x and dx.
inline std::int64_t head_cross_entropy_scratch_floats(std::int64_t chunk, std::int64_t C,
                                                      std::int64_t Vp, bool widen) {
    const std::int64_t logits = chunk * Vp;
    return widen ? logits + 2 * Vp * C + 2 * chunk * C : logits;
}

// targets must lie in [0, V) (checked). Returns the mean of losses over the M rows.
template <class T>
float head_cross_entropy(const HeadCrossEntropyArgs<T>& args);

}  // namespace cpu

namespace cuda {

// The CUDA twin (kernels/cuda/cross_entropy.cu, tested against the CPU in
// tests/kernels_cuda/cross_entropy_test.cpp): the same chunked head + loss, forward and backward
// in one pass, on device pointers queued on launch.stream. Per chunk: the logits GEMM (cuBLASLt,
// fp32 output), one block per row for the loss and dlogits (two passes over the row: max and
// sum of exponentials together, online, then the gradient), then the dx and dw GEMMs; the
// account of their bytes: docs/CUDA.md, "The LM head and the loss".
// Differences from the CPU, each for the GPU's sake:
//  - it returns nothing: losses (M) holds the per-row losses on the device; their mean is the
//    caller's (a copy, or a reduction), so no step waits on the host here;
//  - 16-bit storage: the GEMMs read dlogits rounded to T (cuBLASLt has no fp32 x bf16 product),
//    and dw is summed over the chunks in an fp32 buffer and rounded into dw once, as the CPU does;
//  - a target outside [0, V) cannot throw from a kernel: its row's loss is NaN and its dlogits
//    are 0 (the CPU throws UsageError; callers validate tokens when loading them).
// scratch: head_cross_entropy_scratch_bytes(...) bytes of device memory, 256-byte aligned: the
// fp32 logits chunk and, for 16-bit storage, dlogits in T and (with_dw) dw's fp32 sum (which
// the first chunk's GEMM overwrites), each starting on a 256-byte boundary. Inline: the estimator
// predicts the CUDA engine's scratch with it, to the byte.
inline std::size_t head_cross_entropy_scratch_align(std::size_t bytes) {
    return (bytes + 255) / 256 * 256;
}
inline std::size_t head_cross_entropy_scratch_bytes(std::int64_t chunk, std::int64_t C,
                                                    std::int64_t Vp, DType dt, bool with_dw) {
    const auto part = [](std::int64_t elements, std::size_t bytes_each) {
        return head_cross_entropy_scratch_align(static_cast<std::size_t>(elements) * bytes_each);
    };
    std::size_t bytes = part(chunk * Vp, sizeof(float));  // logits
    if (dt != DType::f32) {
        bytes += part(chunk * Vp, 2);                       // dlogits in T
        if (with_dw) bytes += part(Vp * C, sizeof(float));  // dw in fp32
    }
    return bytes;
}

template <class T>
void head_cross_entropy(const HeadCrossEntropyArgs<T>& args, const Launch& launch);

namespace detail {

// For bench/head_ce_bench's before/after only, not a user choice: the row kernel the op runs
// (two_pass: max and sum of exponentials in one online-softmax pass over 16-byte loads, then the
// gradient), the one it replaced (three_pass: max, sum, gradient, scalar loads; same results), or
// none (the GEMMs alone, on whatever dlogits the scratch holds: losses and dx are then garbage).
enum class HeadCrossEntropyRows { two_pass, three_pass, none };
template <class T>
void head_cross_entropy(const HeadCrossEntropyArgs<T>& args, const Launch& launch,
                        HeadCrossEntropyRows rows);

}  // namespace detail

}  // namespace cuda

}  // namespace napkin
