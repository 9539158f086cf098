// Rotary position embedding on the CPU (declared in kernels/rope.h, Hugging Face Llama's
// rotate_half convention). One OpenMP iteration per token: each pair's angle is computed once
// (in double) and applied to every q and k head of that token.
#include "kernels/rope.h"

#include <cmath>

#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 15;  // elements below which threads cost more than they save

// Rotates the q and k heads of qkv (B, T, (NH + 2*KVH) * HD) in place by sign * angle.
template <class Elem>
void rope_rotate(Elem* qkv, std::int64_t B, std::int64_t T, int NH, int KVH, std::int64_t HD,
                 float theta, std::int64_t pos_offset, double sign, const char* name) {
    NAPKIN_ASSERT(HD > 0 && HD % 2 == 0,
                  name << ": head dim " << HD << " must be even and positive");
    NAPKIN_ASSERT(B >= 0 && T >= 0 && NH >= 0 && KVH >= 0,
                  name << ": B " << B << ", T " << T << ", NH " << NH << ", KVH " << KVH);
    NAPKIN_ASSERT(theta > 0.0f, name << ": theta " << theta);
    const std::int64_t half = HD / 2;
    const std::int64_t rotated = NH + KVH;  // q heads then k heads
    const std::int64_t row = (NH + 2 * static_cast<std::int64_t>(KVH)) * HD;
    const double log_theta = std::log(static_cast<double>(theta));
#pragma omp parallel for if (B * T * rotated * HD > kParallelMin)
    for (std::int64_t bt = 0; bt < B * T; ++bt) {
        const double pos = static_cast<double>(bt % T + pos_offset);
        Elem* x = qkv + bt * row;  // (NH + 2*KVH, HD)
        for (std::int64_t i = 0; i < half; ++i) {
            const double inv_freq =
                std::exp(-log_theta * static_cast<double>(2 * i) / static_cast<double>(HD));
            const double angle = sign * pos * inv_freq;
            const float c = static_cast<float>(std::cos(angle));
            const float s = static_cast<float>(std::sin(angle));
            for (std::int64_t h = 0; h < rotated; ++h) {
                Elem* head = x + h * HD;  // (HD)
                const float x1 = to_float(head[i]);
                const float x2 = to_float(head[i + half]);
                head[i] = from_float<Elem>(x1 * c - x2 * s);
                head[i + half] = from_float<Elem>(x2 * c + x1 * s);
            }
        }
    }
}

}  // namespace

template <class Elem>
void rope_forward(const RopeArgs<Elem>& args) {
    const auto& [qkv, B, T, NH, KVH, HD, theta, pos_offset] = args;
    rope_rotate(qkv, B, T, NH, KVH, HD, theta, pos_offset, 1.0, "rope_forward");
}

template <class Elem>
void rope_backward(const RopeArgs<Elem>& args) {
    const auto& [dqkv, B, T, NH, KVH, HD, theta, pos_offset] = args;  // qkv: the gradient
    rope_rotate(dqkv, B, T, NH, KVH, HD, theta, pos_offset, -1.0, "rope_backward");
}

#define NAPKIN_ROPE_INSTANTIATE(E)                     \
    template void rope_forward<E>(const RopeArgs<E>&); \
    template void rope_backward<E>(const RopeArgs<E>&);
NAPKIN_ROPE_INSTANTIATE(float)
NAPKIN_ROPE_INSTANTIATE(bf16_t)
NAPKIN_ROPE_INSTANTIATE(f16_t)
#undef NAPKIN_ROPE_INSTANTIATE

}  // namespace napkin::cpu
