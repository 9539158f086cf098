// nf4 against an independent reading of kernels/nf4.h: the block absmax, the 8-bit absmax codes
// rounded up against their group's step, each element's nearest level by search; dequantized
// values bit for bit, every element within half a level gap of its input, NaN and infinity
// poisoning their group, and the storage's size.
#include "kernels/nf4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

// The dequantized values as the header defines them, computed without the kernel: `want`, and
// in `alt` the other neighbouring level where x / scale lies within float rounding of the
// midpoint between two levels (the kernel compares against the midpoint, this reference the
// distances: either answer is nearest there).
struct Reference {
    std::vector<float> want, alt;
};
Reference reference(const std::vector<float>& x) {
    const auto n = static_cast<std::int64_t>(x.size());
    const std::int64_t blocks = nf4_blocks(n);
    std::vector<float> absmax(static_cast<std::size_t>(blocks), 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
        float& m = absmax[static_cast<std::size_t>(i / kNf4Block)];
        m = std::isnan(x[static_cast<std::size_t>(i)]) || std::isnan(m)
                ? std::numeric_limits<float>::quiet_NaN()
                : std::max(m, std::fabs(x[static_cast<std::size_t>(i)]));
    }
    Reference out{std::vector<float>(x.size()), std::vector<float>(x.size())};
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t g = b / kNf4ScaleBlock;
        float top = 0.0f;
        bool bad = false;
        for (std::int64_t k = g * kNf4ScaleBlock; k < std::min(blocks, (g + 1) * kNf4ScaleBlock);
             ++k) {
            const float a = absmax[static_cast<std::size_t>(k)];
            bad |= !std::isfinite(a);
            if (std::isfinite(a)) top = std::max(top, a);
        }
        const float step = top / 255.0f;
        const float code =
            step > 0.0f ? std::min(255.0f, std::ceil(absmax[static_cast<std::size_t>(b)] / step))
                        : 0.0f;
        const float scale = bad ? std::numeric_limits<float>::quiet_NaN() : code * step;
        for (std::int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
            const float v = scale > 0.0f
                                ? std::clamp(x[static_cast<std::size_t>(i)] / scale, -1.0f, 1.0f)
                                : 0.0f;
            int best = 0;
            for (int l = 1; l < 16; ++l) {
                if (std::fabs(v - kNf4Levels[l]) <= std::fabs(v - kNf4Levels[best])) best = l;
            }
            int alt = best;
            for (const int l : {best - 1, best + 1}) {
                if (l < 0 || l > 15) continue;
                const double gap = std::fabs(static_cast<double>(v) - kNf4Levels[l]) -
                                   std::fabs(static_cast<double>(v) - kNf4Levels[best]);
                if (gap < 1e-6) alt = l;
            }
            out.want[static_cast<std::size_t>(i)] = kNf4Levels[best] * scale;
            out.alt[static_cast<std::size_t>(i)] = kNf4Levels[alt] * scale;
        }
    }
    return out;
}

struct Quantized {
    std::vector<std::uint8_t> codes, state;
};

Quantized quantize(const std::vector<float>& x) {
    const auto n = static_cast<std::int64_t>(x.size());
    Quantized q{std::vector<std::uint8_t>(nf4_code_bytes(n), 0xAB),
                std::vector<std::uint8_t>(nf4_state_bytes(n) + 3, 0xCD)};
    cpu::nf4_quantize(q.codes.data(), q.state.data(), x.data(), n);
    return q;
}

template <class T>
std::vector<float> dequantize(const Quantized& q, std::int64_t n) {
    std::vector<T> out = test::nan_filled<T>(n);
    cpu::nf4_dequantize<T>({out.data(), q.codes.data(), q.state.data(), n});
    std::vector<float> f(out.size());
    for (std::size_t i = 0; i < out.size(); ++i)
        f[i] = to_float(out[i]);
    return f;
}

TEST(Nf4, DequantizesAsTheFormatSaysForEveryStorageType) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    for (const std::int64_t n : {1, 2, 63, 64, 65, 1000, 2 * 16384 + 7}) {
        SCOPED_TRACE(testing::Message() << "n " << n);
        std::vector<float> x(static_cast<std::size_t>(n));
        // Blocks of very different magnitudes, so the 8-bit absmax codes span their range.
        std::normal_distribution<float> d(0.0f, 1.0f);
        for (std::int64_t i = 0; i < n; ++i)
            x[static_cast<std::size_t>(i)] =
                d(rng) * std::exp2(static_cast<float>((i / kNf4Block) % 7) - 3.0f);
        const Quantized q = quantize(x);
        const Reference ref = reference(x);
        const std::vector<float> got = dequantize<float>(q, n);
        std::vector<float> block_absmax(static_cast<std::size_t>(nf4_blocks(n))),
            group_absmax(static_cast<std::size_t>(nf4_step_count(n)));
        for (std::size_t k = 0; k < x.size(); ++k) {
            float& b = block_absmax[k / kNf4Block];
            b = std::max(b, std::fabs(x[k]));
            float& g = group_absmax[k / (kNf4Block * kNf4ScaleBlock)];
            g = std::max(g, b);
        }
        for (std::int64_t i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            ASSERT_TRUE(got[k] == ref.want[k] || got[k] == ref.alt[k])
                << "element " << i << " of " << x[k] << ": got " << got[k] << ", want "
                << ref.want[k];
            // Within half the widest level gap (-1 to -0.696) of the block's stored scale, which
            // is at most one step (1/255 of its group's largest absmax) above the block's absmax.
            const float scale_bound = block_absmax[k / kNf4Block] +
                                      group_absmax[k / (kNf4Block * kNf4ScaleBlock)] / 255.0f;
            ASSERT_LE(std::fabs(got[k] - x[k]), 0.1520f * scale_bound) << "element " << i;
        }
        const std::vector<float> bf = dequantize<bf16_t>(q, n), hf = dequantize<f16_t>(q, n);
        for (std::int64_t i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            ASSERT_EQ(bf[k], to_float(bf16_t(got[k]))) << "bf16 element " << i;
            ASSERT_EQ(hf[k], to_float(f16_t(got[k]))) << "f16 element " << i;
        }
    }
}

TEST(Nf4, ZerosStayZeroAndTheLargestElementDoesNotClip) {
    std::vector<float> x(200, 0.0f);
    EXPECT_EQ(dequantize<float>(quantize(x), 200), x);
    x[70] = 3.0f;  // block 1's absmax, the group's largest: stored as exactly 255 steps
    x[71] = -3.0f;
    const std::vector<float> got = dequantize<float>(quantize(x), 200);
    EXPECT_FLOAT_EQ(got[70], 3.0f);
    EXPECT_FLOAT_EQ(got[71], -3.0f);
    EXPECT_EQ(got[0], 0.0f);
}

TEST(Nf4, NanOrInfinityPoisonsItsGroupOnly) {
    const std::int64_t n = kNf4Block * kNf4ScaleBlock + 100;  // two groups
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        std::vector<float> x(static_cast<std::size_t>(n), 0.5f);
        x[5] = bad;
        const std::vector<float> got = dequantize<float>(quantize(x), n);
        for (std::int64_t i = 0; i < kNf4Block * kNf4ScaleBlock; ++i)
            ASSERT_TRUE(std::isnan(got[static_cast<std::size_t>(i)]))
                << "element " << i << " after " << bad;
        for (std::int64_t i = kNf4Block * kNf4ScaleBlock; i < n; ++i)
            ASSERT_FLOAT_EQ(got[static_cast<std::size_t>(i)], 0.5f)
                << "element " << i << " after " << bad;
    }
}

TEST(Nf4, StorageIsQloraBitsPerWeight) {
    EXPECT_EQ(nf4_storage_bytes(16384) * 8.0 / 16384.0, 4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0));
    EXPECT_EQ(nf4_storage_bytes(1), 1u + 4u + 1u);  // a code byte, a step, an absmax code
    EXPECT_EQ(nf4_storage_bytes(65), 33u + 4u + 2u);
    EXPECT_EQ(nf4_dequantize_cost({16384, DType::bf16}).bytes_written, 2u * 16384u);
}

}  // namespace
}  // namespace napkin
