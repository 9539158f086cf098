// quantize / dequantize on the CPU: current scaling is one pass for the amax (a max-reduction,
// the same in any order and with any thread count) and one for the cast; delayed scaling one
// pass doing both; the history roll per slot. The rules are in kernels/quantize.h.
#include "kernels/quantize.h"

#include <cmath>
#include <cstdint>

#include "core/check.h"
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

// quantize's arithmetic, element (r, c) written to out[r C + c] and out_t[c R + r].
template <class Q, class T>
void quantize_transpose(const QuantizeTransposeArgs<Q, T>& args) {
    const auto& [out, out_t, scale, inp, R, C, delayed, amax_out] = args;
    NAPKIN_ASSERT(R * C == 0 || out != nullptr || out_t != nullptr,
                  "quantize_transpose: no output");
    const std::int64_t n = R * C;
    float amax = 0.0f;
    float s = 0.0f;
    if (delayed == nullptr) {
#pragma omp parallel for reduction(max : amax) if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i) {
            const float a = std::fabs(to_float(inp[i]));
            if (a > amax) amax = a;  // false for NaN
        }
        s = fp8_scale(amax, Q::kMax);
        write_pair(scale, s);
    } else {
        for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
            scale[i] = delayed[i];
        s = delayed[0];
    }
    const bool take_amax = delayed != nullptr;
#pragma omp parallel for reduction(max : amax) if (n > 65536)
    for (std::int64_t r = 0; r < R; ++r) {
        for (std::int64_t c = 0; c < C; ++c) {
            const float x = to_float(inp[r * C + c]);
            if (take_amax && std::fabs(x) > amax) amax = std::fabs(x);
            const Q q(x * s);
            if (out != nullptr) out[r * C + c] = q;
            if (out_t != nullptr) out_t[c * R + r] = q;
        }
    }
    if (amax_out != nullptr && amax > *amax_out) *amax_out = amax;
}

void transpose_fp8(const TransposeFp8Args& args) {
    const auto& [out, inp, R, C] = args;
    auto* o = static_cast<std::uint8_t*>(out);
    const auto* in = static_cast<const std::uint8_t*>(inp);
#pragma omp parallel for if (R * C > 65536)
    for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t r = 0; r < R; ++r)
            o[c * R + r] = in[r * C + c];
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

#define NAPKIN_INSTANTIATE_QUANTIZE(Q, T)                                       \
    template void quantize<Q, T>(const QuantizeArgs<Q, T>&);                    \
    template void quantize_transpose<Q, T>(const QuantizeTransposeArgs<Q, T>&); \
    template void dequantize<T, Q>(const DequantizeArgs<T, Q>&);
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, float)
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, bf16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e4m3_t, f16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, float)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, bf16_t)
NAPKIN_INSTANTIATE_QUANTIZE(f8e5m2_t, f16_t)

}  // namespace napkin::cpu
