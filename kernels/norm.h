// norm: LayerNorm or RMSNorm over the last dimension, statistics in fp32.
//   inp (N, C) -> out (N, C); layernorm keeps mean (N) and rstd (N), rmsnorm keeps rstd (N).
//   residual_layernorm_forward: x = a + b fused with the layernorm of x (below).
// FLOPs per element: layernorm forward 7 (mean 1, variance 2, normalize 2, affine 2),
// backward 14; rmsnorm forward 4, backward 9 (approximate counts, not tensor-core work).
// Backward reads inp, which is the producing op's kept output (core/op_plan.h).
#pragma once

#include <cstddef>

#include "core/model_config.h"
#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct NormShape {
    std::int64_t N = 0;  // rows: B*T
    std::int64_t C = 0;
    NormKind kind = NormKind::layernorm;
    bool bias = true;
    DType in = DType::f32;  // inp and weight
    DType out = DType::f32;
};

inline std::int64_t norm_stats_per_row(NormKind k) {
    return k == NormKind::layernorm ? 2 : 1;
}

inline KernelCost norm_forward_cost(const NormShape& s) {
    KernelCost c;
    const std::uint64_t per_elem = s.kind == NormKind::layernorm ? 7 : 4;
    c.flops = per_elem * s.N * s.C;
    c.bytes_read = nbytes(s.in, s.N * s.C) + nbytes(s.in, s.C) * (s.bias ? 2 : 1);
    c.bytes_written =
        nbytes(s.out, s.N * s.C) + nbytes(DType::f32, s.N * norm_stats_per_row(s.kind));
    return c;
}

inline KernelCost norm_backward_cost(const NormShape& s) {
    KernelCost c;
    const std::uint64_t per_elem = s.kind == NormKind::layernorm ? 14 : 9;
    c.flops = per_elem * s.N * s.C;
    c.bytes_read = nbytes(s.in, s.N * s.C) + nbytes(s.out, s.N * s.C) +
                   nbytes(DType::f32, s.N * norm_stats_per_row(s.kind)) + nbytes(s.in, s.C);
    c.bytes_written = nbytes(s.in, s.N * s.C) + nbytes(DType::f32, s.C) * (s.bias ? 2 : 1);
    return c;
}

// The argument structs of the calls below (kernels/launch.h). Backward ACCUMULATES (+=) into dinp
// and the parameter gradients (callers zero them); parameter gradients are summed over the N
// rows in fp32 and added into T once per call.

// out (N, C) = (inp (N, C) - mean) * rstd * weight (C) [+ bias (C)]; bias may be null.
// Writes mean (N) and rstd (N) = 1 / sqrt(var + eps) (biased variance), kept for backward.
template <class T>
struct LayernormForwardArgs {
    T* out = nullptr;           // (N, C)
    float* mean = nullptr;      // (N)
    float* rstd = nullptr;      // (N)
    const T* inp = nullptr;     // (N, C)
    const T* weight = nullptr;  // (C)
    const T* bias = nullptr;    // (C) or null
    std::int64_t N = 0, C = 0;
    float eps = 1e-5f;
};

// dinp (N, C) += dL/dinp; dweight (C) += sum over rows of dout * xhat; dbias (C) += sum of dout.
// xhat is recomputed from inp, mean and rstd. dweight and dbias may be null (frozen).
// scratch (CUDA only; null: none): device memory of scratch_bytes, free for the call's duration,
// for the parameter gradients' per-block or per-chunk sums (below); the engine lends its GEMM
// scratch.
template <class T>
struct LayernormBackwardArgs {
    T* dinp = nullptr;            // (N, C)
    T* dweight = nullptr;         // (C) or null
    T* dbias = nullptr;           // (C) or null
    const T* dout = nullptr;      // (N, C)
    const T* inp = nullptr;       // (N, C)
    const T* weight = nullptr;    // (C)
    const float* mean = nullptr;  // (N)
    const float* rstd = nullptr;  // (N)
    std::int64_t N = 0, C = 0;
    float* scratch = nullptr;
    std::size_t scratch_bytes = 0;
};

// out (N, C) = inp (N, C) * rstd * weight (C); writes rstd (N) = 1 / sqrt(mean(inp^2) + eps).
template <class T>
struct RmsnormForwardArgs {
    T* out = nullptr;           // (N, C)
    float* rstd = nullptr;      // (N)
    const T* inp = nullptr;     // (N, C)
    const T* weight = nullptr;  // (C)
    std::int64_t N = 0, C = 0;
    float eps = 1e-5f;
};

// dinp (N, C) += rstd * (dout * weight - xhat * mean(dout * weight * xhat)), xhat = inp * rstd;
// dweight (C) += sum over rows of dout * xhat (may be null: frozen). scratch as layernorm's.
template <class T>
struct RmsnormBackwardArgs {
    T* dinp = nullptr;            // (N, C)
    T* dweight = nullptr;         // (C) or null
    const T* dout = nullptr;      // (N, C)
    const T* inp = nullptr;       // (N, C)
    const T* weight = nullptr;    // (C)
    const float* rstd = nullptr;  // (N)
    std::int64_t N = 0, C = 0;
    float* scratch = nullptr;
    std::size_t scratch_bytes = 0;
};

// The residual add fused with the layernorm that reads its sum (a block's attn.res and ln_2):
// x = a + b, rounded into T and written (the residual stream, kept), and out = layernorm(x) from
// the rounded x, in one pass over each row: bit for bit residual_forward then
// layernorm_forward, with one read of x fewer. mean, rstd as layernorm_forward's.
template <class T>
struct ResidualLayernormForwardArgs {
    T* out = nullptr;           // (N, C)
    float* mean = nullptr;      // (N)
    float* rstd = nullptr;      // (N)
    T* x = nullptr;             // (N, C) a + b
    const T* a = nullptr;       // (N, C)
    const T* b = nullptr;       // (N, C)
    const T* weight = nullptr;  // (C)
    const T* bias = nullptr;    // (C) or null
    std::int64_t N = 0, C = 0;
    float eps = 1e-5f;
};

// What the fused kernel does for s (a layernorm): the add's FLOP per element and the norm's 7; a
// and b read, x and out written, the norm's parameters read and statistics written once.
inline KernelCost residual_layernorm_forward_cost(const NormShape& s) {
    KernelCost c = norm_forward_cost(s);
    c.flops += static_cast<std::uint64_t>(s.N * s.C);
    c.bytes_read += nbytes(s.in, s.N * s.C);
    c.bytes_written += nbytes(s.in, s.N * s.C);
    return c;
}

namespace cpu {

// CPU kernels (kernels/cpu/norm.cpp, tested in tests/kernels/norm_test.cpp), templated on the
// storage type T (float, bf16_t, f16_t from core/half.h); all arithmetic and row statistics in
// fp32. No scratch.
template <class T>
void layernorm_forward(const LayernormForwardArgs<T>& args);
template <class T>
void layernorm_backward(const LayernormBackwardArgs<T>& args);
template <class T>
void rmsnorm_forward(const RmsnormForwardArgs<T>& args);
template <class T>
void rmsnorm_backward(const RmsnormBackwardArgs<T>& args);
template <class T>
void residual_layernorm_forward(const ResidualLayernormForwardArgs<T>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/norm.cu, tested against the CPU in tests/kernels_cuda/norm_test.cpp),
// same storage types and semantics as the CPU's above: statistics in fp32, backward ACCUMULATES
// into dinp, dweight and dbias (each parameter gradient summed over rows in fp32 in a fixed
// order and added once: deterministic, no atomics). Device pointers, queued on launch.stream.
//
// The backward in one pass (GPT-2's rows): where a row fits one warp's registers (C a whole
// number of 16-byte vectors, C sizeof(T) <= kNormWarpRowBytes: C <= 2048 in bf16/fp16, 1024 in
// fp32), the pointers are 16-byte aligned and scratch holds norm_backward_scratch_bytes(N, C),
// inp and dout are read once: blocks of R = norm_backward_rows_per_block(N) rows, a warp per row
// computing dinp from registers and adding dout * xhat and dout into its own fp32 column sums in
// shared memory; each block writes its warps' sums, added in warp order, once into the scratch
// (dweight's [blocks][C], then dbias's [blocks][C]), and a second kernel adds the blocks'
// partials per column in block order into the gradients. R comes from N alone (at most
// kNormBackwardBlocks blocks, at least kNormBackwardMinRows rows each), so the scratch is known
// without the device: 2 ceil(N / R) C floats, at most kNormBackwardBlocks 2 C floats (8 MiB at
// C = 2048), which the engine's GEMM scratch (32 MiB on CUDA, core/buffer_plan.cpp) always holds.
//
// Otherwise (C too wide or not whole vectors, pointers off 16 bytes, too little or no scratch)
// two passes, the second reading inp and dout again: the input gradient (warp or block per row),
// then the parameter gradients' column sums over N rows. With scratch, blocks of 32 columns x
// kNormRowsPerChunk rows (more rows a chunk where the scratch holds fewer chunks) each sum their
// chunk into the scratch, and a second kernel adds the chunks' sums per column in chunk order.
// Without scratch, or with room for fewer than two chunks, one block per 32 columns walking every
// row. Every path sums in a fixed order: the same bits run to run; the orders differ from each
// other in fp32 rounding.
inline constexpr std::int64_t kNormWarpRowBytes = 4096;  // 32 lanes x 8 vectors x 16 bytes
inline constexpr std::int64_t kNormBackwardBlocks = 512;
inline constexpr std::int64_t kNormBackwardMinRows = 16;
inline constexpr std::int64_t kNormRowsPerChunk = 64;

// R: ceil(N / kNormBackwardBlocks) rounded up to a multiple of 8 (one row per warp of a full
// block), at least kNormBackwardMinRows. GPT-2 at B T = 64 1024: 128 rows, 512 blocks.
inline std::int64_t norm_backward_rows_per_block(std::int64_t N) {
    const std::int64_t r = (N + kNormBackwardBlocks - 1) / kNormBackwardBlocks;
    const std::int64_t rows = (r + 7) / 8 * 8;
    return rows < kNormBackwardMinRows ? kNormBackwardMinRows : rows;
}

// The one-pass backward's partials: 2 ceil(N / R) C floats (dweight's and dbias's).
inline std::size_t norm_backward_scratch_bytes(std::int64_t N, std::int64_t C) {
    const std::int64_t rows = norm_backward_rows_per_block(N);
    const std::int64_t blocks = (N + rows - 1) / rows;
    return static_cast<std::size_t>(2 * blocks * C) * sizeof(float);
}

template <class T>
void layernorm_forward(const LayernormForwardArgs<T>& args, const Launch& launch);
template <class T>
void layernorm_backward(const LayernormBackwardArgs<T>& args, const Launch& launch);
template <class T>
void rmsnorm_forward(const RmsnormForwardArgs<T>& args, const Launch& launch);
template <class T>
void rmsnorm_backward(const RmsnormBackwardArgs<T>& args, const Launch& launch);
// The two-pass backward alone, whatever the shape: what the two above fall back to where the
// one-pass kernel does not apply (the same arguments, results within fp32 rounding of theirs);
// for the tests of that path and membound_bench's baseline.
template <class T>
void layernorm_backward_two_pass(const LayernormBackwardArgs<T>& args, const Launch& launch);
template <class T>
void rmsnorm_backward_two_pass(const RmsnormBackwardArgs<T>& args, const Launch& launch);
// One block per row, as layernorm_forward, its first pass writing x: the sums and block
// reductions of the two kernels, so the same bits.
template <class T>
void residual_layernorm_forward(const ResidualLayernormForwardArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
