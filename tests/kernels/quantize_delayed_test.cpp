// Delayed scaling (kernels/quantize.h): quantize with a slot's scale pair against the OCP spec's
// nearest code of x * scale and a double-precision amax; the amax recorded as a maximum with the
// history's entry; saturation past the scale's range; and amax_history_roll against the rule
// written out here (scale from the history's maximum, the shift, entry 0 cleared).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/quantize.h"
#include "tests/kernels/fp8_reference.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

template <class Q>
const test::Fp8Spec& delayed_spec() {
    return std::is_same_v<Q, f8e4m3_t> ? test::kE4M3Spec : test::kE5M2Spec;
}

// A scale pair as amax_history_roll writes it.
std::vector<float> delayed_pair(float scale) {
    std::vector<float> p(kFp8ScaleFloats, 0.0f);
    p[0] = scale;
    p[kFp8ScaleInv] = 1.0f / scale;
    return p;
}

// Codes = nearest(x * scale) with the given pair, the pair copied, amax = max(prior, max |x|).
template <class Q, class T>
void delayed_cast(std::int64_t n, double stddev, float scale, float prior, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " n " << n << " stddev " << stddev << " scale " << scale
                 << " prior amax " << prior << " " << test::dtype_name<T>());
    std::mt19937 rng(seed);
    const auto x = test::to_storage<T>(test::random_normal(rng, n, 0.0, stddev));
    const auto xs = test::as_seen(x);
    double amax = 0;
    for (double v : xs)
        amax = std::max(amax, std::fabs(v));
    std::vector<Q> q(static_cast<std::size_t>(n));
    for (Q& c : q)
        c.bits = 0x7f;  // NaN: an unwritten code fails
    std::vector<float> out_pair(kFp8ScaleFloats, std::nanf(""));
    const std::vector<float> pair = delayed_pair(scale);
    float recorded = prior;
    cpu::quantize<Q, T>({.out = q.data(),
                         .scale = out_pair.data(),
                         .inp = x.data(),
                         .n = n,
                         .delayed = pair.data(),
                         .amax = &recorded});
    for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out_pair[i]), std::bit_cast<std::uint32_t>(pair[i]));
    EXPECT_EQ(recorded, std::max(prior, static_cast<float>(amax)));
    const test::Fp8Spec& s = delayed_spec<Q>();
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float scaled = static_cast<float>(xs[static_cast<std::size_t>(i)]) * scale;
        if (q[static_cast<std::size_t>(i)].bits != s.nearest(scaled) && bad++ < 5) {
            ADD_FAILURE() << "element " << i << ": " << scaled << " gave code "
                          << int(q[static_cast<std::size_t>(i)].bits) << ", want "
                          << int(s.nearest(scaled));
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(QuantizeDelayed, CodesOfTheSlotsScaleAndTheAmaxRecorded) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 7, 1000, 70001}) {  // 70001: the threaded path
        // A scale from an earlier amax near this one, one from a much larger amax (codes use
        // little of the range), and one from a smaller amax (values past the range saturate).
        delayed_cast<f8e4m3_t, bf16_t>(n, 1.0, 448.0f / 4.0f, 0.0f, seed);
        delayed_cast<f8e4m3_t, bf16_t>(n, 1.0, 448.0f / 400.0f, 7.0f, seed + 1);
        delayed_cast<f8e4m3_t, float>(n, 10.0, 448.0f / 2.0f, 1e9f, seed + 2);
        delayed_cast<f8e5m2_t, bf16_t>(n, 1e-3, 57344.0f / 4e-3f, 0.0f, seed + 3);
        delayed_cast<f8e5m2_t, f16_t>(n, 100.0, 57344.0f / 50.0f, 0.0f, seed + 4);
    }
}

// What current scaling records: its own amax, a maximum with the entry there.
TEST(QuantizeDelayed, CurrentScalingRecordsItsAmaxToo) {
    const std::vector<float> x{0.5f, -3.0f, 2.0f};
    std::vector<f8e4m3_t> q(x.size());
    float pair[kFp8ScaleFloats];
    float recorded = 1.0f;
    cpu::quantize<f8e4m3_t, float>(
        {.out = q.data(), .scale = pair, .inp = x.data(), .n = 3, .amax = &recorded});
    EXPECT_EQ(recorded, 3.0f);
    EXPECT_EQ(pair[0], 448.0f / 3.0f);  // the codes' scale is still the tensor's own
    recorded = 5.0f;
    cpu::quantize<f8e4m3_t, float>(
        {.out = q.data(), .scale = pair, .inp = x.data(), .n = 3, .amax = &recorded});
    EXPECT_EQ(recorded, 5.0f);
}

// NaN: skipped by the amax, kept as a code; infinity: recorded as the amax, saturated; a zero
// tensor records 0; a value past the delayed scale's range saturates to +-max (satfinite, as
// Transformer Engine's casts).
TEST(QuantizeDelayed, NanInfinityZerosAndOverflow) {
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    auto run = [](const std::vector<float>& x, float scale, float& recorded) {
        std::vector<f8e4m3_t> q(x.size());
        std::vector<float> out_pair(kFp8ScaleFloats);
        const std::vector<float> pair = delayed_pair(scale);
        cpu::quantize<f8e4m3_t, float>({.out = q.data(),
                                        .scale = out_pair.data(),
                                        .inp = x.data(),
                                        .n = static_cast<std::int64_t>(x.size()),
                                        .delayed = pair.data(),
                                        .amax = &recorded});
        std::vector<float> v;
        for (const f8e4m3_t c : q)
            v.push_back(static_cast<float>(c));
        return v;
    };
    float recorded = 0.0f;
    auto v = run({nan, 2.0f, -1.0f}, 1.0f, recorded);
    EXPECT_TRUE(std::isnan(v[0]));
    EXPECT_EQ(v[1], 2.0f);
    EXPECT_EQ(recorded, 2.0f);

    recorded = 0.0f;
    v = run({inf, 3.0f, -inf}, 1.0f, recorded);
    EXPECT_EQ(recorded, inf);
    EXPECT_EQ(v[0], 448.0f);
    EXPECT_EQ(v[2], -448.0f);

    recorded = 0.0f;
    v = run({0.0f, -0.0f}, 448.0f, recorded);
    EXPECT_EQ(recorded, 0.0f);
    EXPECT_FALSE(std::signbit(recorded));
    EXPECT_EQ(v[0], 0.0f);

    // Scale from an amax of 1; this tensor reaches 3: 3 * 448 saturates to 448, as does -2.
    recorded = 0.0f;
    v = run({3.0f, -2.0f, 0.5f}, 448.0f, recorded);
    EXPECT_EQ(v[0], 448.0f);
    EXPECT_EQ(v[1], -448.0f);
    EXPECT_EQ(v[2], 224.0f);
    EXPECT_EQ(recorded, 3.0f);
}

// The roll against the rule: per slot, the pair from max(history) by fp8_scale with the slot's
// format's max, the history shifted by one, entry 0 zero.
TEST(QuantizeDelayed, HistoryRollScalesFromTheMaximumAndShifts) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 10.0f);
    for (const std::int64_t H : {1, 2, 16}) {
        const std::int64_t slots = 7, e4m3 = 4;
        std::vector<float> history(static_cast<std::size_t>(slots * H));
        for (float& h : history)
            h = u(rng);
        history[0] = 0.0f;  // slot 0's first entry zero; slot 1 all zeros (scale 1)
        std::fill(history.begin() + H, history.begin() + 2 * H, 0.0f);
        history[static_cast<std::size_t>(2 * H)] = std::numeric_limits<float>::infinity();
        const std::vector<float> before = history;
        std::vector<float> scales(static_cast<std::size_t>(slots * kFp8ScaleFloats), std::nanf(""));
        cpu::amax_history_roll({.history = history.data(),
                                .scales = scales.data(),
                                .slots = slots,
                                .e4m3_slots = e4m3,
                                .H = H});
        for (std::int64_t r = 0; r < slots; ++r) {
            SCOPED_TRACE(testing::Message() << "H " << H << " slot " << r);
            const auto* h0 = before.data() + r * H;
            const float m = *std::max_element(h0, h0 + H);
            const float want = fp8_scale(m, r < e4m3 ? 448.0f : 57344.0f);
            const float* p = scales.data() + r * kFp8ScaleFloats;
            EXPECT_EQ(p[0], want);
            EXPECT_EQ(p[kFp8ScaleInv], 1.0f / want);
            for (std::int64_t i = 1; i < kFp8ScaleFloats; ++i) {
                if (i != kFp8ScaleInv) {
                    EXPECT_EQ(std::bit_cast<std::uint32_t>(p[i]), 0u);
                }
            }
            const float* h = history.data() + r * H;
            EXPECT_EQ(std::bit_cast<std::uint32_t>(h[0]), 0u);
            for (std::int64_t j = 1; j < H; ++j)
                EXPECT_EQ(h[j], h0[j - 1]);
        }
        EXPECT_EQ(scales[1 * kFp8ScaleFloats], 1.0f);  // all zeros: scale 1
        EXPECT_EQ(scales[2 * kFp8ScaleFloats], 1.0f);  // an infinite amax: scale 1
    }
}

TEST(QuantizeDelayed, RollCostCountsTheHistories) {
    const KernelCost c = amax_history_roll_cost({144, 16});
    EXPECT_EQ(c.flops, 144u * 16u);
    EXPECT_EQ(c.bytes_read, 4u * 144u * 16u);
    EXPECT_EQ(c.bytes_written, 4u * 144u * (16u + 8u));
}

}  // namespace
}  // namespace napkin
