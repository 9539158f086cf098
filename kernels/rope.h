// rope: rotary position embedding applied in place to q (B, T, NH, HD) and k (B, T, KVH, HD)
// inside the packed qkv buffer. Each pair (i, i + HD/2) is rotated (rotate-half): 6 FLOPs per pair, 3 per
// element; backward rotates by the negative angle (same count). Keeps nothing: the angles
// are recomputed from positions.
#pragma once

#include "kernels/cost.h"
#include "kernels/launch.h"

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

// Convention: Hugging Face Llama's rotate_half. Within each head of HD (even) elements, element
// i pairs with element i + HD/2 (not the interleaved (2i, 2i+1) pairs of GPT-J / Meta's
// original code; the FLOP count is the same), and for i in [0, HD/2), at position
// pos = t + pos_offset with angle a = pos * theta^(-2i/HD):
//   x'[i]        = x[i] cos a - x[i + HD/2] sin a
//   x'[i + HD/2] = x[i + HD/2] cos a + x[i] sin a
// Angles are computed in double (exact enough for any position), the rotation in fp32.
// Layout: qkv (B, T, (NH + 2*KVH) * HD) holds per token the NH query heads, the KVH key heads
// and the KVH value heads; q and k are rotated in place, v is untouched.
// Forward: q and k of qkv rotated in place. Backward: the same call on dqkv, the gradient of q
// and k rotated in place by the negative angle (the transpose of the forward rotation); unlike
// the other backward kernels this transforms, it does not accumulate. v is untouched.
template <class Elem>
struct RopeArgs {
    Elem* qkv = nullptr;  // (B, T, (NH + 2*KVH) * HD): qkv forward, dqkv backward
    std::int64_t B = 0, T = 0;
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
    float theta = 10000.0f;
    std::int64_t pos_offset = 0;
};

namespace cpu {

// CPU kernels (kernels/cpu/rope.cpp, tested in tests/kernels/rope_test.cpp), templated on the
// storage type Elem (float, bf16_t, f16_t from core/half.h; not T, which is the sequence length
// here).
template <class Elem>
void rope_forward(const RopeArgs<Elem>& args);
template <class Elem>
void rope_backward(const RopeArgs<Elem>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/rope.cu, tested against the CPU in tests/kernels_cuda/rope_test.cpp),
// same convention and storage types as the CPU's above; angles in double as there. Device
// pointers, queued on launch.stream.
template <class Elem>
void rope_forward(const RopeArgs<Elem>& args, const Launch& launch);
template <class Elem>
void rope_backward(const RopeArgs<Elem>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
