// The CPU's cast-transpose (kernels/cpu/quantize.cpp) against quantize on the same elements and
// a transpose by hand: the same codes in both layouts, the same scale pair and the same recorded
// amax, bit for bit, under current and delayed scaling, on random matrices of odd shapes and on
// NaN, infinities and values past the scale's range; transpose_fp8 against a loop; the costs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/quantize.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

std::uint32_t ct_bits(float f) {
    return std::bit_cast<std::uint32_t>(f);
}

// x (R, C) cast both ways; delayed null: current scaling.
template <class Q>
void check_against_quantize(const std::vector<bf16_t>& x, std::int64_t R, std::int64_t C,
                            const float* delayed) {
    const std::int64_t n = R * C;
    std::vector<Q> ref(static_cast<std::size_t>(n));
    float ref_scale[kFp8ScaleFloats];
    float ref_amax = 0.25f;
    cpu::quantize<Q, bf16_t>({.out = ref.data(),
                              .scale = ref_scale,
                              .inp = x.data(),
                              .n = n,
                              .delayed = delayed,
                              .amax = &ref_amax});
    for (int outputs = 1; outputs <= 3; ++outputs) {  // rows, transposed, both
        const bool rows = outputs & 1, transposed = outputs & 2;
        Q poison;
        poison.bits = 0x5a;
        std::vector<Q> q(static_cast<std::size_t>(n), poison), qt(q);
        float scale[kFp8ScaleFloats];
        float amax = 0.25f;
        cpu::quantize_transpose<Q, bf16_t>({.out = rows ? q.data() : nullptr,
                                            .out_t = transposed ? qt.data() : nullptr,
                                            .scale = scale,
                                            .inp = x.data(),
                                            .R = R,
                                            .C = C,
                                            .delayed = delayed,
                                            .amax = &amax});
        for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
            ASSERT_EQ(ct_bits(scale[i]), ct_bits(ref_scale[i])) << "pair slot " << i;
        ASSERT_EQ(ct_bits(amax), ct_bits(ref_amax));
        for (std::int64_t r = 0; r < R; ++r) {
            for (std::int64_t c = 0; c < C; ++c) {
                const auto want = ref[static_cast<std::size_t>(r * C + c)].bits;
                const auto rc = static_cast<std::size_t>(r * C + c);
                const auto cr = static_cast<std::size_t>(c * R + r);
                ASSERT_EQ(q[rc].bits, rows ? want : poison.bits) << "(" << r << ", " << c << ")";
                ASSERT_EQ(qt[cr].bits, transposed ? want : poison.bits)
                    << "transposed (" << c << ", " << r << ")";
            }
        }
    }
}

std::vector<float> ct_pair(float scale) {
    std::vector<float> p(kFp8ScaleFloats, 0.0f);
    p[0] = scale;
    p[kFp8ScaleInv] = 1.0f / scale;
    return p;
}

TEST(QuantizeTranspose, MatchesQuantizeInBothLayouts) {
    std::mt19937 rng(test::fresh_seed());
    const std::vector<float> narrow = ct_pair(448.0f / 8.0f), wide = ct_pair(57344.0f / 0.5f);
    const std::int64_t shapes[][2] = {{1, 1}, {3, 5}, {17, 9}, {64, 64}, {65, 130}, {300, 7}};
    for (const auto& [R, C] : shapes) {
        SCOPED_TRACE(testing::Message() << R << " x " << C);
        const auto x = test::to_storage<bf16_t>(test::random_normal(rng, R * C));
        check_against_quantize<f8e4m3_t>(x, R, C, nullptr);
        check_against_quantize<f8e5m2_t>(x, R, C, nullptr);
        check_against_quantize<f8e4m3_t>(x, R, C, narrow.data());
        check_against_quantize<f8e5m2_t>(x, R, C, wide.data());
    }
}

TEST(QuantizeTranspose, NanInfinityAndSaturation) {
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    const std::vector<float> v = {nan, 2.0f, -inf, 1e6f, -0.0f, 0.5f, inf, -3.0f};
    std::vector<bf16_t> x;
    for (float f : v)
        x.push_back(bf16_t(f));
    const std::vector<float> one = ct_pair(1.0f);
    check_against_quantize<f8e4m3_t>(x, 2, 4, nullptr);
    check_against_quantize<f8e5m2_t>(x, 4, 2, nullptr);
    check_against_quantize<f8e4m3_t>(x, 2, 4, one.data());
    check_against_quantize<f8e5m2_t>(x, 8, 1, one.data());
}

TEST(TransposeFp8, MovesEveryByte) {
    const std::int64_t R = 5, C = 7;
    std::vector<std::uint8_t> in(R * C), out(R * C, 0);
    for (std::size_t i = 0; i < in.size(); ++i)
        in[i] = static_cast<std::uint8_t>(i * 37 + 1);
    cpu::transpose_fp8({out.data(), in.data(), R, C});
    for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c)
            EXPECT_EQ(out[static_cast<std::size_t>(c * R + r)],
                      in[static_cast<std::size_t>(r * C + c)]);
}

// By hand: a (3, 5) bf16 matrix cast to both layouts writes 15 codes twice and the pair.
TEST(QuantizeTranspose, CostsCountEachLayoutWritten) {
    const KernelCost both = quantize_transpose_cost({3, 5, DType::bf16, DType::f8e4m3, true, true});
    EXPECT_EQ(both.flops, 30u);
    EXPECT_EQ(both.bytes_read, 30u);
    EXPECT_EQ(both.bytes_written, 30u + 32u);
    const KernelCost one = quantize_transpose_cost({3, 5, DType::bf16, DType::f8e5m2, false, true});
    EXPECT_EQ(one.bytes_written, 15u + 32u);
    EXPECT_EQ(one.bytes_written, quantize_cost({15, DType::bf16, DType::f8e5m2}).bytes_written);
    const KernelCost t = transpose_fp8_cost(3, 5);
    EXPECT_EQ(t.flops, 0u);
    EXPECT_EQ(t.bytes_read, 15u);
    EXPECT_EQ(t.bytes_written, 15u);
}

}  // namespace
}  // namespace napkin
