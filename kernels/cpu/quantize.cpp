// quantize / dequantize on the CPU: one pass for the amax (a max-reduction, the same in any
// order and with any thread count), one for the cast; the rule is in kernels/quantize.h.
#include "kernels/quantize.h"

#include <cmath>

#include "core/fp8.h"
#include "core/half.h"

namespace napkin::cpu {

template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args) {
    const auto& [out, scale, inp, n] = args;
    float amax = 0.0f;
#pragma omp parallel for reduction(max : amax) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(to_float(inp[i]));
        if (a > amax) amax = a;  // false for NaN: NaN never sets the scale
    }
    const float s = fp8_scale(amax, Q::kMax);
    for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
        scale[i] = 0.0f;
    scale[0] = s;
    scale[kFp8ScaleInv] = 1.0f / s;
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = Q(to_float(inp[i]) * s);
}

template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args) {
    const auto& [out, inp, scale, n] = args;
    const float s = scale[kFp8ScaleInv];
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = from_float<T>(static_cast<float>(inp[i]) * s);
}

#define NAPKIN_INSTANTIATE_QUANTIZE(Q, T)                    \
    template void quantize<Q, T>(const QuantizeArgs<Q, T>&); \
    template void dequantize<T, Q>(const DequantizeArgs<T, Q>&);
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, float)
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, bf16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, f16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, float)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, bf16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, f16_t)

}  // namespace napkin::cpu
