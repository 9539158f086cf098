// embedding: out (B, T, C) = wte[tokens (B, T)] (+ wpe[t] with learned positions).
// Forward is a gather: 1 FLOP per element for the position add, none without it. Backward
// scatter-adds dout into the rows of dwte (and dwpe): 1 FLOP per element per table.
#pragma once

#include "kernels/cost.h"

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

}  // namespace napkin
