// quantize / dequantize on the CPU: current scaling is one pass for the amax (a max-reduction,
// the same in any order and with any thread count) and one for the cast; delayed scaling one
// pass doing both; the history roll per slot. The rules are in kernels/quantize.h.
#include "kernels/quantize.h"

#include <cmath>

#include "core/fp8.h"
#include "core/half.h"

namespace napkin::cpu {

namespace {

// The scale pair's layout (kernels/quantize.h) for scale s.
void write_pair(float* pair, float s) {
    for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
        pair[i] = 0.0f;
    pair[0] = s;
    pair[kFp8ScaleInv] = 1.0f / s;
}

}  // namespace

template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args) {
    const auto& [out, scale, inp, n, delayed, amax_out] = args;
    float amax = 0.0f;
    if (delayed == nullptr) {
#pragma omp parallel for reduction(max : amax) if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i) {
            const float a = std::fabs(to_float(inp[i]));
            if (a > amax) amax = a;  // false for NaN: NaN never sets the scale
        }
        const float s = fp8_scale(amax, Q::kMax);
        write_pair(scale, s);
#pragma omp parallel for if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i)
            out[i] = Q(to_float(inp[i]) * s);
    } else {
        for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
            scale[i] = delayed[i];
        const float s = delayed[0];
#pragma omp parallel for reduction(max : amax) if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i) {
            const float x = to_float(inp[i]);
            const float a = std::fabs(x);
            if (a > amax) amax = a;
            out[i] = Q(x * s);
        }
    }
    if (amax_out != nullptr && amax > *amax_out) *amax_out = amax;
}

void amax_history_roll(const AmaxHistoryRollArgs& args) {
    const auto& [history, scales, slots, e4m3_slots, H] = args;
    for (std::int64_t r = 0; r < slots; ++r) {
        float* h = history + r * H;
        float m = 0.0f;
        for (std::int64_t j = 0; j < H; ++j)
            if (h[j] > m) m = h[j];
        const float max_finite = r < e4m3_slots ? f8e4m3_t::kMax : f8e5m2_t::kMax;
        write_pair(scales + r * kFp8ScaleFloats, fp8_scale(m, max_finite));
        for (std::int64_t j = H - 1; j > 0; --j)
            h[j] = h[j - 1];
        h[0] = 0.0f;
    }
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
