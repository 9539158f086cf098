// dropout on the CPU: the counter-based keep bits of kernels/dropout.h, one pass per direction.
#include "kernels/dropout.h"
#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

template <class T>
void dropout_forward(T* out, std::uint8_t* mask, const T* inp, std::int64_t n, float p,
                     std::uint64_t seed) {
    NAPKIN_ASSERT(p >= 0.0f && p < 1.0f, "dropout_forward: p " << p);
    const std::uint32_t threshold = dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
        const bool keep = dropout_keep(seed, static_cast<std::uint64_t>(i), threshold);
        mask[i] = keep ? 1 : 0;
        out[i] = keep ? from_float<T>(to_float(inp[i]) * scale) : from_float<T>(0.0f);
    }
}

template <class T>
void dropout_backward(T* dinp, const T* dout, const std::uint8_t* mask, std::int64_t n, float p) {
    NAPKIN_ASSERT(p >= 0.0f && p < 1.0f, "dropout_backward: p " << p);
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        dinp[i] = mask[i] != 0 ? from_float<T>(to_float(dout[i]) * scale) : from_float<T>(0.0f);
}

#define NAPKIN_DROPOUT_INSTANTIATE(T)                                                  \
    template void dropout_forward<T>(T*, std::uint8_t*, const T*, std::int64_t, float, \
                                     std::uint64_t);                                   \
    template void dropout_backward<T>(T*, const T*, const std::uint8_t*, std::int64_t, float);
NAPKIN_DROPOUT_INSTANTIATE(float)
NAPKIN_DROPOUT_INSTANTIATE(bf16_t)
NAPKIN_DROPOUT_INSTANTIATE(f16_t)
#undef NAPKIN_DROPOUT_INSTANTIATE

}  // namespace napkin::cpu
