// lora: low-rank adapters beside a frozen linear layer (Hu et al. 2021):
//   out (M, N) += scale * (inp (M, K) @ A (r, K)^T) @ B (N, r)^T
// A fused projection (qkv, or swiglu's gate|up) carries `parts` separate adapters, as PEFT
// puts one on each of q, k, v: each reads the whole input, and their B matrices split N.
// Adapter parameters r * (parts*K + N). FLOPs: forward 2*M*r*(parts*K + N), input gradient
// the same, adapter gradients the same. Keeps h = inp @ A^T (M, parts*r) for dB; inp is kept
// by its producer.
#pragma once

#include "kernels/cost.h"

namespace napkin {

struct LoraShape {
    std::int64_t M = 0, N = 0, K = 0;
    std::int64_t r = 0;
    int parts = 1;
    DType dt = DType::f32;    // inp, adapters and out
    DType grad = DType::f32;  // adapter gradients
};

inline std::int64_t lora_params(const LoraShape& s) { return s.r * (s.parts * s.K + s.N); }

inline KernelCost lora_forward_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * s.K) + nbytes(s.dt, lora_params(s)) + nbytes(s.dt, s.M * s.N);
    c.bytes_written = nbytes(s.dt, s.M * s.N) + nbytes(s.dt, s.M * s.parts * s.r);
    return c;
}

inline KernelCost lora_backward_input_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * s.N) + nbytes(s.dt, lora_params(s));
    c.bytes_written = nbytes(s.dt, s.M * s.K) + nbytes(s.dt, s.M * s.parts * s.r);
    return c;
}

inline KernelCost lora_backward_weight_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * (s.K + s.N + 2 * s.parts * s.r));
    c.bytes_written = nbytes(s.grad, lora_params(s));
    return c;
}

}  // namespace napkin
