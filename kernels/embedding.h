// embedding: out (B, T, C) = wte[tokens (B, T)] (+ wpe[t] with learned positions).
// Forward is a gather: 1 FLOP per element for the position add, none without it. Backward
// scatter-adds dout into the rows of dwte (and dwpe): 1 FLOP per element per table.
#pragma once

#include "kernels/cost.h"
#include "kernels/launch.h"

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

// out (B, T, C) = wte (Vp, C)[tokens (B, T)] [+ wpe (ctx, C)[t]]; wpe null without learned
// positions (rotary models). Preconditions the kernels cannot check (they are not given Vp or
// ctx): every token in [0, Vp), and T <= ctx.
template <class Elem>
struct EmbeddingForwardArgs {
    Elem* out = nullptr;                   // (B, T, C)
    const std::int32_t* tokens = nullptr;  // (B, T)
    const Elem* wte = nullptr;             // (Vp, C)
    const Elem* wpe = nullptr;             // (ctx, C) or null
    std::int64_t B = 0, T = 0, C = 0;
};

// Scatter-add, ACCUMULATING (callers zero): dwte (Vp, C) row tokens[b, t] += dout (B, T, C) row
// (b, t); dwpe (ctx, C) row t += sum over b of dout (b, t) (dwpe may be null).
template <class Elem>
struct EmbeddingBackwardArgs {
    Elem* dwte = nullptr;                  // (Vp, C)
    Elem* dwpe = nullptr;                  // (ctx, C) or null
    const Elem* dout = nullptr;            // (B, T, C)
    const std::int32_t* tokens = nullptr;  // (B, T)
    std::int64_t B = 0, T = 0, C = 0;
};

namespace cpu {

// CPU kernels (kernels/cpu/embedding.cpp, tested in tests/kernels/embedding_test.cpp),
// templated on the storage type Elem (float, bf16_t, f16_t from core/half.h; not T, which is
// the sequence length here), arithmetic in fp32.
template <class Elem>
void embedding_forward(const EmbeddingForwardArgs<Elem>& args);

// Deterministic: each output row is summed in a fixed order whatever the thread count. float:
// threads own column slices of every row. 16-bit: a token's row is owned by its first position,
// which sums all of that token's positions in fp32 and rounds once (O((B*T)^2) integer
// compares, small beside a training step's matmuls at CPU sizes).
template <class Elem>
void embedding_backward(const EmbeddingBackwardArgs<Elem>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/embedding.cu, tested against the CPU in
// tests/kernels_cuda/embedding_test.cpp), same storage types and semantics as the CPU's above.
// Device pointers (tokens too), queued on launch.stream. A token outside [0, Vp) is not
// detected. Backward is deterministic without atomics, as on the CPU: the first position of
// each token owns the token's dwte row and sums all of its positions in fp32 (in position order)
// before one addition into Elem; dwpe rows are summed over b by one block each.
template <class Elem>
void embedding_forward(const EmbeddingForwardArgs<Elem>& args, const Launch& launch);
template <class Elem>
void embedding_backward(const EmbeddingBackwardArgs<Elem>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
