// dropout on the CPU: the counter-based keep bits of kernels/dropout.h, one pass per direction.
#include "kernels/dropout.h"
#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

template <class T>
void dropout_forward(const DropoutForwardArgs<T>& args) {
    const auto& [out, mask, inp, n, p, seed] = args;
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
void dropout_backward(const DropoutBackwardArgs<T>& args) {
    const auto& [dinp, dout, mask, n, p] = args;
    NAPKIN_ASSERT(p >= 0.0f && p < 1.0f, "dropout_backward: p " << p);
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        dinp[i] = mask[i] != 0 ? from_float<T>(to_float(dout[i]) * scale) : from_float<T>(0.0f);
}

#define NAPKIN_DROPOUT_INSTANTIATE(T)                               \
    template void dropout_forward<T>(const DropoutForwardArgs<T>&); \
    template void dropout_backward<T>(const DropoutBackwardArgs<T>&);
NAPKIN_DROPOUT_INSTANTIATE(float)
NAPKIN_DROPOUT_INSTANTIATE(bf16_t)
NAPKIN_DROPOUT_INSTANTIATE(f16_t)
#undef NAPKIN_DROPOUT_INSTANTIATE

}  // namespace napkin::cpu
