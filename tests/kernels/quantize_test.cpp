// The fp8 codecs (core/fp8.h) against the OCP FP8 spec on every code both ways, at every rounding
// boundary, on saturation and NaN, and on random floats of every magnitude; quantize and
// dequantize (kernels/quantize.h): the scale rule, the codes, the round trip.
#include "kernels/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "tests/kernels/fp8_reference.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Fp8Spec;

template <class Q>
const Fp8Spec& spec() {
    return std::is_same_v<Q, f8e4m3_t> ? test::kE4M3Spec : test::kE5M2Spec;
}

template <class Q>
float decode(std::uint8_t code) {
    Q q;
    q.bits = code;
    return static_cast<float>(q);
}

template <class Q>
std::uint8_t encode(float f) {
    return Q(f).bits;
}

template <class Q>
void every_code_both_ways() {
    const Fp8Spec& s = spec<Q>();
    for (int c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        const double want = s.value(code);
        const float got = decode<Q>(code);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << "code " << c;
            EXPECT_TRUE(std::isnan(decode<Q>(encode<Q>(got)))) << "code " << c;
            continue;
        }
        EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
        EXPECT_EQ(std::signbit(got), c >= 128) << "code " << c;  // -0 included
        // Every finite code encodes back to itself; infinities saturate to +-max.
        const std::uint8_t back = encode<Q>(got);
        if (std::isinf(want))
            EXPECT_EQ(back, (c & 0x80) | s.max_code()) << "code " << c;
        else
            EXPECT_EQ(back, code) << "code " << c;
    }
}

TEST(Fp8Codec, E4M3EveryCodeBothWays) {
    every_code_both_ways<f8e4m3_t>();
    // The spec's table 1: max normal S.1111.110, min normal S.0001.000, max subnormal
    // S.0000.111, min subnormal S.0000.001, the one NaN S.1111.111.
    EXPECT_EQ(decode<f8e4m3_t>(0x7e), 448.0f);
    EXPECT_EQ(decode<f8e4m3_t>(0x08), 0x1p-6f);
    EXPECT_EQ(decode<f8e4m3_t>(0x07), 0.875f * 0x1p-6f);
    EXPECT_EQ(decode<f8e4m3_t>(0x01), 0x1p-9f);
    EXPECT_EQ(decode<f8e4m3_t>(0x38), 1.0f);
    EXPECT_EQ(decode<f8e4m3_t>(0xfe), -448.0f);
    EXPECT_TRUE(std::isnan(decode<f8e4m3_t>(0x7f)));
    EXPECT_TRUE(std::isnan(decode<f8e4m3_t>(0xff)));
    EXPECT_EQ(decode<f8e4m3_t>(0x78), 256.0f);  // S.1111.000 is finite in E4M3
}

TEST(Fp8Codec, E5M2EveryCodeBothWays) {
    every_code_both_ways<f8e5m2_t>();
    EXPECT_EQ(decode<f8e5m2_t>(0x7b), 57344.0f);
    EXPECT_EQ(decode<f8e5m2_t>(0x04), 0x1p-14f);
    EXPECT_EQ(decode<f8e5m2_t>(0x03), 0.75f * 0x1p-14f);
    EXPECT_EQ(decode<f8e5m2_t>(0x01), 0x1p-16f);
    EXPECT_EQ(decode<f8e5m2_t>(0x3c), 1.0f);
    EXPECT_EQ(decode<f8e5m2_t>(0x7c), std::numeric_limits<float>::infinity());
    EXPECT_EQ(decode<f8e5m2_t>(0xfc), -std::numeric_limits<float>::infinity());
    for (std::uint8_t nan : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff})
        EXPECT_TRUE(std::isnan(decode<f8e5m2_t>(nan)));
}

// Between every two neighbouring codes (zero and the smallest subnormal included): the
// midpoint goes to the even code, one float above it to the upper code, one below to the
// lower; both signs.
template <class Q>
void rounding_boundaries() {
    const Fp8Spec& s = spec<Q>();
    for (int c = 0; c < s.max_code(); ++c) {
        const auto lo = static_cast<std::uint8_t>(c), hi = static_cast<std::uint8_t>(c + 1);
        const float vlo = decode<Q>(lo), vhi = decode<Q>(hi);
        const float mid = (vlo + vhi) / 2;  // exact: 4 significant bits at most
        ASSERT_EQ(static_cast<double>(mid), (s.value(lo) + s.value(hi)) / 2);
        const std::uint8_t even = (c & 1) == 0 ? lo : hi;
        for (float sign : {1.0f, -1.0f}) {
            const std::uint8_t sb = sign < 0 ? 0x80 : 0x00;
            EXPECT_EQ(encode<Q>(sign * mid), sb | even)
                << "midpoint of codes " << c << ", " << c + 1;
            EXPECT_EQ(encode<Q>(sign * std::nextafter(mid, 1e30f)), sb | hi)
                << "above code " << c << "'s midpoint";
            EXPECT_EQ(encode<Q>(sign * std::nextafter(mid, 0.0f)), sb | lo)
                << "below code " << c << "'s midpoint";
            EXPECT_EQ(encode<Q>(sign * vlo), sb | lo);
        }
    }
}

TEST(Fp8Codec, RoundsToNearestEvenAtEveryBoundary) {
    rounding_boundaries<f8e4m3_t>();
    rounding_boundaries<f8e5m2_t>();
}

template <class Q>
void saturates_and_keeps_nan() {
    const Fp8Spec& s = spec<Q>();
    const auto max = static_cast<float>(s.max_finite());
    const float inf = std::numeric_limits<float>::infinity();
    for (float sign : {1.0f, -1.0f}) {
        const std::uint8_t want = (sign < 0 ? 0x80 : 0x00) | s.max_code();
        // Past the largest finite value (the half-way point to the next binade included), the
        // largest float and infinity: all +-max.
        for (float v : {max, std::nextafter(max, inf), max * 1.0625f, max * 1.2f, max * 2.0f, 1e30f,
                        std::numeric_limits<float>::max(), inf}) {
            EXPECT_EQ(encode<Q>(sign * v), want) << sign * v;
        }
    }
    for (float nan :
         {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
          std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc00123u)}) {
        EXPECT_TRUE(std::isnan(decode<Q>(encode<Q>(nan))));
    }
    // Below half the smallest subnormal: a signed zero; float subnormals too.
    const float half_min = static_cast<float>(s.value(1)) / 2;
    EXPECT_EQ(encode<Q>(half_min), 0x00);
    EXPECT_EQ(encode<Q>(-half_min), 0x80);
    EXPECT_EQ(encode<Q>(std::numeric_limits<float>::denorm_min()), 0x00);
    EXPECT_EQ(encode<Q>(-1e-40f), 0x80);
}

TEST(Fp8Codec, SaturatesToTheLargestFiniteValueAndKeepsNaN) {
    saturates_and_keeps_nan<f8e4m3_t>();
    saturates_and_keeps_nan<f8e5m2_t>();
}

// Random float bit patterns over every magnitude against the nearest-code reference.
TEST(Fp8Codec, RandomFloatsMatchTheNearestCode) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> exponent(100, 150);  // 2^-27 .. 2^23: every binade of both
    for (int i = 0; i < 200000; ++i) {
        const std::uint32_t bits =
            (rng() & 0x807fffffu) | (static_cast<std::uint32_t>(exponent(rng)) << 23);
        const float f = std::bit_cast<float>(bits);
        ASSERT_EQ(encode<f8e4m3_t>(f), test::kE4M3Spec.nearest(f)) << f;
        ASSERT_EQ(encode<f8e5m2_t>(f), test::kE5M2Spec.nearest(f)) << f;
    }
}

// quantize: scale = max / amax, codes = the nearest code of x * scale (the product rounded to
// fp32), scale_inv = 1 / scale; dequantize returns code * scale_inv, within half a code's
// spacing of x.
template <class Q, class T>
void round_trip(std::int64_t n, double stddev, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " n " << n << " stddev " << stddev << " "
                 << test::dtype_name<T>() << " -> " << (spec<Q>().e4m3() ? "e4m3" : "e5m2"));
    std::mt19937 rng(seed);
    const auto x = test::to_storage<T>(test::random_normal(rng, n, 0.0, stddev));
    const auto xs = test::as_seen(x);
    double amax = 0;
    for (double v : xs)
        amax = std::max(amax, std::fabs(v));
    std::vector<Q> q(static_cast<std::size_t>(n));
    for (Q& c : q)
        c.bits = 0x7f;  // NaN in both formats: an unwritten code fails
    float scale[kFp8ScaleFloats];
    std::fill(std::begin(scale), std::end(scale), std::nanf(""));
    cpu::quantize<Q, T>({q.data(), scale, x.data(), n});
    const Fp8Spec& s = spec<Q>();
    ASSERT_EQ(scale[0], static_cast<float>(s.max_finite()) / static_cast<float>(amax));
    ASSERT_EQ(scale[kFp8ScaleInv], 1.0f / scale[0]);
    // The layout cuBLASLt's fp8 kernels need: scale_inv 16 bytes in, every other slot zero.
    for (std::int64_t i = 1; i < kFp8ScaleFloats; ++i) {
        if (i != kFp8ScaleInv) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(scale[i]), 0u) << "slot " << i;
        }
    }
    static_assert(kFp8ScaleInv * sizeof(float) % 16 == 0);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float scaled = static_cast<float>(xs[static_cast<std::size_t>(i)]) * scale[0];
        if (q[static_cast<std::size_t>(i)].bits != s.nearest(scaled) && bad++ < 5) {
            ADD_FAILURE() << "element " << i << ": " << xs[static_cast<std::size_t>(i)] << " * "
                          << scale[0] << " gave code " << int(q[static_cast<std::size_t>(i)].bits)
                          << ", want " << int(s.nearest(scaled));
        }
    }
    EXPECT_EQ(bad, 0);
    auto out = test::nan_filled<T>(n);
    cpu::dequantize<T, Q>({out.data(), q.data(), scale, n});
    // Half a spacing: 2^-(M+1) relative in the normal range, half the smallest subnormal below
    // it, both divided by the scale; then the rounding into T.
    const double rel = std::ldexp(1.0, -(s.mantissa_bits + 1));
    // (fp16's own subnormals round the dequantized value by up to 2^-25.)
    const double abs_floor = s.value(1) / 2 / scale[0] + (std::is_same_v<T, f16_t> ? 0x1p-25 : 0.0);
    test::Vec got = test::as_seen(out), want(xs);
    test::Tolerance tol{abs_floor, rel};
    tol.rel += test::tolerance<T>().rel;
    test::expect_close("round trip", got, want, tol);
    for (std::int64_t i = 0; i < n; ++i) {
        const float exact = static_cast<float>(q[static_cast<std::size_t>(i)]) * scale[kFp8ScaleInv];
        ASSERT_EQ(to_float(out[static_cast<std::size_t>(i)]), to_float(from_float<T>(exact)))
            << "element " << i;
    }
}

TEST(Quantize, RoundTripWithinHalfACodesSpacing) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 7, 1000, 70001}) {  // 70001: the threaded path
        for (double stddev : {1.0, 1e-3, 300.0}) {
            round_trip<f8e4m3_t, bf16_t>(n, stddev, seed);
            round_trip<f8e5m2_t, bf16_t>(n, stddev, seed + 1);
            round_trip<f8e4m3_t, float>(n, stddev, seed + 2);
            round_trip<f8e5m2_t, f16_t>(n, stddev, seed + 3);
        }
    }
}

// amax 0: scale 1 and zero codes; NaN ignored by the amax and kept; an infinity makes amax
// infinite: scale 1, so the infinity and anything past max saturate; an amax so small that
// max / amax overflows: FLT_MAX.
TEST(Quantize, ScaleEdgeCases) {
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    auto run = [](std::vector<float> x, float* scale) {
        std::vector<f8e4m3_t> q(x.size());
        cpu::quantize<f8e4m3_t, float>(
            {q.data(), scale, x.data(), static_cast<std::int64_t>(x.size())});
        std::vector<float> back(x.size());
        cpu::dequantize<float, f8e4m3_t>(
            {back.data(), q.data(), scale, static_cast<std::int64_t>(x.size())});
        return back;
    };
    float scale[kFp8ScaleFloats];
    auto zeros = run({0.0f, -0.0f, 0.0f}, scale);
    EXPECT_EQ(scale[0], 1.0f);
    EXPECT_EQ(scale[kFp8ScaleInv], 1.0f);
    for (float v : zeros)
        EXPECT_EQ(v, 0.0f);
    EXPECT_TRUE(std::signbit(zeros[1]));

    auto with_nan = run({nan, 2.0f, -1.0f}, scale);
    EXPECT_EQ(scale[0], 224.0f);  // 448 / 2
    EXPECT_TRUE(std::isnan(with_nan[0]));
    EXPECT_EQ(with_nan[1], 2.0f);
    EXPECT_EQ(with_nan[2], -1.0f);

    auto with_inf = run({inf, 1000.0f, 3.0f, -inf}, scale);
    EXPECT_EQ(scale[0], 1.0f);
    EXPECT_EQ(with_inf[0], 448.0f);
    EXPECT_EQ(with_inf[1], 448.0f);
    EXPECT_EQ(with_inf[2], 3.0f);
    EXPECT_EQ(with_inf[3], -448.0f);

    auto tiny = run({1e-39f, -5e-40f}, scale);
    EXPECT_EQ(scale[0], std::numeric_limits<float>::max());
    EXPECT_NEAR(tiny[0], 1e-39f, 1e-39f / 16);
    EXPECT_NEAR(tiny[1], -5e-40f, 5e-40f / 16);
}

TEST(Quantize, CostsCountBytesAtOneBytePerCode) {
    const KernelCost q = quantize_cost({1000, DType::bf16, DType::f8e4m3});
    EXPECT_EQ(q.flops, 2000u);
    EXPECT_EQ(q.bytes_read, 2000u);
    EXPECT_EQ(q.bytes_written, 1000u + 4u * kFp8ScaleFloats);  // the codes and the scale pair
    const KernelCost d = dequantize_cost({1000, DType::f32, DType::f8e5m2});
    EXPECT_EQ(d.flops, 1000u);
    EXPECT_EQ(d.bytes_read, 1000u + 4u * kFp8ScaleFloats);
    EXPECT_EQ(d.bytes_written, 4000u);
}

}  // namespace
}  // namespace napkin
