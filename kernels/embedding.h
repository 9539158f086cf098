// embedding: out (B, T, C) = wte[tokens (B, T)] (+ wpe[t] with learned positions).
// Forward is a gather: 1 FLOP per element for the position add, none without it. Backward
// scatter-adds dout into the rows of dwte (and dwpe): 1 FLOP per element per table.
#pragma once

#include "kernels/cost.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (op headers compile in any build)

namespace napkin {

struct EmbeddingShape {
    std::int64_t B = 0, T = 0, C = 0;
    bool learned_positions = true;
    DType dt = DType::f32;    // tables and out
    DType grad = DType::f32;  // parameter gradients
};

inline KernelCost embedding_forward_cost(const EmbeddingShape& s) {
    const std::int64_t n = s.B * s.T * s.C;
    const int tables = s.learned_positions ? 2 : 1;
    return {s.learned_positions ? static_cast<std::uint64_t>(n) : 0,
            nbytes(DType::i8, 4 * s.B * s.T) + tables * nbytes(s.dt, n), nbytes(s.dt, n), 0};
}

inline KernelCost embedding_backward_cost(const EmbeddingShape& s) {
    const std::int64_t n = s.B * s.T * s.C;
    const int tables = s.learned_positions ? 2 : 1;
    return {static_cast<std::uint64_t>(tables * n), nbytes(s.dt, n) + tables * nbytes(s.grad, n),
            tables * nbytes(s.grad, n), 0};
}

namespace cpu {

// CPU kernels (kernels/cpu/embedding.cpp, tested in tests/kernels/embedding_test.cpp),
// templated on the storage type Elem (float, bf16_t, f16_t from core/half.h; not T, which is
// the sequence length here), arithmetic in fp32. Preconditions the kernels cannot check (they
// are not given Vp or ctx): every token in [0, Vp), and T <= ctx.

// out (B, T, C) = wte (Vp, C)[tokens (B, T)] [+ wpe (ctx, C)[t]]; wpe null without learned
// positions (rotary models).
template <class Elem>
void embedding_forward(Elem* out, const std::int32_t* tokens, const Elem* wte, const Elem* wpe,
                       std::int64_t B, std::int64_t T, std::int64_t C);

// Scatter-add, ACCUMULATING (callers zero): dwte (Vp, C) row tokens[b, t] += dout (B, T, C) row
// (b, t); dwpe (ctx, C) row t += sum over b of dout (b, t) (dwpe may be null). Deterministic:
// each output row is summed in a fixed order whatever the thread count. float: threads own
// column slices of every row. 16-bit: a token's row is owned by its first position, which sums
// all of that token's positions in fp32 and rounds once (O((B*T)^2) integer compares, small
// beside a training step's matmuls at CPU sizes).
template <class Elem>
void embedding_backward(Elem* dwte, Elem* dwpe, const Elem* dout, const std::int32_t* tokens,
                        std::int64_t B, std::int64_t T, std::int64_t C);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/embedding.cu, tested against the CPU in
// tests/kernels_cuda/embedding_test.cpp), same storage types and semantics as the CPU's above.
// Device pointers (tokens too), queued on `stream`. A token outside [0, Vp) is not detected.
// Backward is deterministic without atomics, as on the CPU: the first position of each token
// owns the token's dwte row and sums all of its positions in fp32 (in position order) before
// one addition into Elem; dwpe rows are summed over b by one block each.

template <class Elem>
void embedding_forward(Elem* out, const std::int32_t* tokens, const Elem* wte, const Elem* wpe,
                       std::int64_t B, std::int64_t T, std::int64_t C, CUstream_st* stream);
// out (B, T, C), tokens (B, T), wte (Vp, C), wpe (ctx, C) or null

template <class Elem>
void embedding_backward(Elem* dwte, Elem* dwpe, const Elem* dout, const std::int32_t* tokens,
                        std::int64_t B, std::int64_t T, std::int64_t C, CUstream_st* stream);
// dwte (Vp, C), dwpe (ctx, C) or null, dout (B, T, C), tokens (B, T)

}  // namespace cuda

}  // namespace napkin
