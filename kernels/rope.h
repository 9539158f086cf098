// rope: rotary position embedding applied in place to q (B, T, NH, HD) and k (B, T, KVH, HD)
// inside the packed qkv buffer. Each (even, odd) pair is rotated: 6 FLOPs per pair, 3 per
// element; backward rotates by the negative angle (same count). Keeps nothing: the angles
// are recomputed from positions.
#pragma once

#include "kernels/cost.h"

namespace napkin {

struct RopeShape {
    std::int64_t B = 0, T = 0;
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
    DType dt = DType::f32;
};

inline KernelCost rope_forward_cost(const RopeShape& s) {
    const std::int64_t n = s.B * s.T * (s.NH + s.KVH) * s.HD;
    return {3ull * n, nbytes(s.dt, n), nbytes(s.dt, n), 0};
}

inline KernelCost rope_backward_cost(const RopeShape& s) { return rope_forward_cost(s); }

}  // namespace napkin
