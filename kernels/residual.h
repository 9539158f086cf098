// residual: out (N, C) = a (N, C) + b (N, C). 1 FLOP per element forward; backward adds the
// incoming gradient into both branches' gradients (1 FLOP per element). Keeps nothing itself;
// its output is kept when the next norm needs it (core/op_plan.h).
#pragma once

#include "kernels/cost.h"

namespace napkin {

struct ResidualShape {
    std::int64_t N = 0;
    std::int64_t C = 0;
    DType dt = DType::f32;
};

inline KernelCost residual_forward_cost(const ResidualShape& s) {
    return {static_cast<std::uint64_t>(s.N * s.C), 2 * nbytes(s.dt, s.N * s.C), nbytes(s.dt, s.N * s.C), 0};
}

inline KernelCost residual_backward_cost(const ResidualShape& s) {
    return {static_cast<std::uint64_t>(s.N * s.C), 2 * nbytes(s.dt, s.N * s.C), nbytes(s.dt, s.N * s.C), 0};
}

}  // namespace napkin
