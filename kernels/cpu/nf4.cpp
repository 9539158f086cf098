// nf4 on the CPU: quantization of host fp32 weights (once, at load) and dequantization into
// the storage type (every GEMM of a frozen QLoRA weight). Formats and rules: kernels/nf4.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "kernels/nf4.h"

namespace napkin::cpu {

namespace {

// max(m, a) that keeps a NaN once seen.
float max_nan(float m, float a) {
    return std::isnan(m) || std::isnan(a) ? a + m : std::max(m, a);
}

// Index of the level nearest to v in [-1, 1]: the levels are ascending, so compare against the
// midpoints between neighbours (a tie goes to the upper level).
std::uint8_t nearest_level(float v) {
    std::uint8_t code = 0;
    for (std::uint8_t i = 1; i < 16; ++i) {
        if (v >= 0.5f * (kNf4Levels[i - 1] + kNf4Levels[i])) code = i;
    }
    return code;
}

}  // namespace

void nf4_quantize(std::uint8_t* codes, std::uint8_t* state, const float* inp, std::int64_t n) {
    const std::int64_t blocks = nf4_blocks(n), groups = nf4_step_count(n);
    std::vector<float> absmax(static_cast<std::size_t>(blocks), 0.0f);
    for (std::int64_t b = 0; b < blocks; ++b) {
        float m = 0.0f;
        for (std::int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
            m = max_nan(m, std::fabs(inp[i]));
        }
        absmax[static_cast<std::size_t>(b)] = m;
    }
    auto* steps = reinterpret_cast<float*>(state);  // aligned: the state's first bytes
    std::uint8_t* absmax_codes = state + 4 * groups;
    std::vector<float> block_scale(static_cast<std::size_t>(blocks), 0.0f);
    for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t b0 = g * kNf4ScaleBlock, b1 = std::min(blocks, b0 + kNf4ScaleBlock);
        float top = 0.0f;
        for (std::int64_t b = b0; b < b1; ++b)
            top = max_nan(top, absmax[static_cast<std::size_t>(b)]);
        const bool finite = std::isfinite(top);
        const float step = finite ? top / 255.0f : std::numeric_limits<float>::quiet_NaN();
        std::memcpy(steps + g, &step, sizeof step);
        for (std::int64_t b = b0; b < b1; ++b) {
            std::uint8_t code = 0;
            if (finite && step > 0.0f) {
                const float q = std::ceil(absmax[static_cast<std::size_t>(b)] / step);
                code = static_cast<std::uint8_t>(std::min(q, 255.0f));
            }
            absmax_codes[b] = code;
            block_scale[static_cast<std::size_t>(b)] = static_cast<float>(code) * step;
        }
    }
    std::memset(codes, 0, nf4_code_bytes(n));
    for (std::int64_t i = 0; i < n; ++i) {
        const float s = block_scale[static_cast<std::size_t>(i / kNf4Block)];
        // A zero or non-finite scale: the level 0 code (the step carries the NaN).
        const float v = s > 0.0f && std::isfinite(s) ? std::clamp(inp[i] / s, -1.0f, 1.0f) : 0.0f;
        const std::uint8_t code = nearest_level(v);
        codes[i / 2] |= static_cast<std::uint8_t>(i % 2 == 0 ? code : code << 4);
    }
}

template <class T>
void nf4_dequantize(const Nf4DequantizeArgs<T>& args) {
    const auto& [out, codes, state, n] = args;
    const std::int64_t groups = nf4_step_count(n);
    const std::uint8_t* absmax_codes = state + 4 * groups;
#pragma omp parallel for if (n > 65536)
    for (std::int64_t b = 0; b < nf4_blocks(n); ++b) {
        float step;
        std::memcpy(&step, state + 4 * (b / kNf4ScaleBlock), sizeof step);
        const float scale = static_cast<float>(absmax_codes[b]) * step;
        for (std::int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
            const std::uint8_t code = (codes[i / 2] >> (i % 2 == 0 ? 0 : 4)) & 0xF;
            out[i] = from_float<T>(kNf4Levels[code] * scale);
        }
    }
}

template void nf4_dequantize<float>(const Nf4DequantizeArgs<float>&);
template void nf4_dequantize<bf16_t>(const Nf4DequantizeArgs<bf16_t>&);
template void nf4_dequantize<f16_t>(const Nf4DequantizeArgs<f16_t>&);

}  // namespace napkin::cpu
