// adamw-8bit's states (kernels/optimizer.h, kernels/optimizer_rule.h): the dynamic-tree maps as
// documented, quantization to the nearest code against a brute-force search, and the 8-bit
// update against the fp32-state update it quantizes: the same weights after a first step from
// zero states, the codes and block absmax of the fp32 run's moments (blocks of 2048, a short last
// block), and a descent on a quadratic that tracks fp32's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/optimizer.h"
#include "kernels/optimizer_rule.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

TEST(Optimizer8bit, MapsAreTheDynamicTreeAscending) {
    const DynamicMap u = dynamic_map(false), s = dynamic_map(true);
    ASSERT_EQ(u.size, 256);
    ASSERT_EQ(s.size, 255);
    EXPECT_EQ(u.value[0], 0.0f);
    EXPECT_EQ(u.value[255], 1.0f);
    EXPECT_FLOAT_EQ(u.value[1], 1e-7f);  // 7 leading zeros, no fraction bits
    EXPECT_EQ(s.value[127], 0.0f);
    EXPECT_EQ(s.value[0], -1.0f);
    EXPECT_EQ(s.value[254], 1.0f);
    EXPECT_FLOAT_EQ(s.value[128], 1e-6f);
    for (int i = 1; i < u.size; ++i) ASSERT_LT(u.value[i - 1], u.value[i]) << i;
    for (int i = 1; i < s.size; ++i) ASSERT_LT(s.value[i - 1], s.value[i]) << i;
    for (int i = 0; i < 127; ++i) ASSERT_EQ(s.value[i], -s.value[254 - i]) << i;
    // Exponent 0 covers (0.1, 1] with 128 (unsigned) or 64 (signed) evenly spaced values.
    EXPECT_NEAR(u.value[255] - u.value[254], 0.9 / 128, 1e-7);
    EXPECT_NEAR(s.value[254] - s.value[253], 0.9 / 64, 1e-7);
}

TEST(Optimizer8bit, QuantizesToTheNearestCode) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    for (const bool is_signed : {false, true}) {
        const DynamicMap map = dynamic_map(is_signed);
        std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
        for (int trial = 0; trial < 20000; ++trial) {
            float x = std::pow(10.0f, exponent(rng));
            if (x > 1.0f) x = 1.0f;
            if (is_signed && (rng() & 1)) x = -x;
            const int code = dynamic_quantize(x, map);
            double best = 1e30;
            for (int c = 0; c < map.size; ++c) best = std::min(best, std::fabs(static_cast<double>(map.value[c]) - x));
            ASSERT_LE(std::fabs(static_cast<double>(map.value[code]) - x), best * (1 + 1e-6) + 1e-30)
                << "x " << x << " code " << code;
        }
        EXPECT_EQ(map.value[dynamic_quantize(0.0f, map)], 0.0f);
        EXPECT_EQ(dynamic_quantize(1.0f, map), map.size - 1);
        EXPECT_EQ(dynamic_quantize(2.0f, map), map.size - 1);  // clamps
    }
}

struct States {
    std::vector<float> w, m, v;                  // fp32 run
    std::vector<float> w8, m_absmax, v_absmax;   // 8-bit run
    std::vector<std::uint8_t> mq, vq;
};

OptimizerHyper adamw(int t) {
    OptimizerHyper h;
    h.kind = OptimizerKind::adamw_8bit;
    h.lr = 1e-2f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.bias_correction1 = 1.0f - std::pow(0.9f, static_cast<float>(t));
    h.bias_correction2 = 1.0f - std::pow(0.95f, static_cast<float>(t));
    return h;
}

// One step of both runs on the same gradient (each its own weights).
void step(States& s, const std::vector<float>& g8, const std::vector<float>& g32, int t) {
    const auto n = static_cast<std::int64_t>(s.w.size());
    OptimizerTensor a;
    a.master = s.w.data();
    a.grad = const_cast<float*>(g32.data());
    a.m = s.m.data();
    a.v = s.v.data();
    a.n = n;
    a.weight_decay = 0.1f;
    cpu::optimizer_update(adamw(t), &a, 1, DType::f32);
    OptimizerTensor b = a;
    b.master = s.w8.data();
    b.grad = const_cast<float*>(g8.data());
    b.m = s.mq.data();
    b.v = s.vq.data();
    b.m_absmax = s.m_absmax.data();
    b.v_absmax = s.v_absmax.data();
    cpu::optimizer_update(adamw(t), &b, 1, DType::i8);
}

States fresh(std::int64_t n, std::mt19937& rng) {
    States s;
    s.w = test::to_storage<float>(test::random_normal(rng, n));
    s.w8 = s.w;
    s.m.assign(static_cast<std::size_t>(n), 0.0f);
    s.v = s.m;
    s.mq.assign(static_cast<std::size_t>(n), 0);
    s.vq = s.mq;
    s.m_absmax.assign(static_cast<std::size_t>(optimizer_8bit_blocks(n)), 0.0f);
    s.v_absmax = s.m_absmax;
    return s;
}

TEST(Optimizer8bit, FirstStepQuantizesTheFp32RunsMoments) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const DynamicMap m_map = dynamic_map(true), v_map = dynamic_map(false);
    for (const std::int64_t n : {1, 7, 2048, 5000}) {
        SCOPED_TRACE(testing::Message() << "n " << n);
        States s = fresh(n, rng);
        // Gradients of very different sizes per block, some exactly zero.
        std::vector<float> g = test::to_storage<float>(test::random_normal(rng, n));
        for (std::int64_t k = 0; k < n; ++k) {
            g[static_cast<std::size_t>(k)] *= std::exp2(static_cast<float>(k % 11) - 5.0f);
            if (k % 13 == 0) g[static_cast<std::size_t>(k)] = 0.0f;
        }
        step(s, g, g, 1);
        EXPECT_EQ(s.w8, s.w) << "the first step reads zero states either way";
        for (std::int64_t b = 0; b < optimizer_8bit_blocks(n); ++b) {
            const std::int64_t k0 = b * 2048, k1 = std::min(n, k0 + 2048);
            float m_max = 0, v_max = 0;
            for (std::int64_t k = k0; k < k1; ++k) {
                m_max = std::max(m_max, std::fabs(s.m[static_cast<std::size_t>(k)]));
                v_max = std::max(v_max, s.v[static_cast<std::size_t>(k)]);
            }
            ASSERT_EQ(s.m_absmax[static_cast<std::size_t>(b)], m_max) << "block " << b;
            ASSERT_EQ(s.v_absmax[static_cast<std::size_t>(b)], v_max) << "block " << b;
            for (std::int64_t k = k0; k < k1; ++k) {
                const auto i = static_cast<std::size_t>(k);
                ASSERT_EQ(s.mq[i], dynamic_quantize(m_max > 0 ? s.m[i] / m_max : 0.0f, m_map)) << k;
                ASSERT_EQ(s.vq[i], v_max > 0 ? dynamic_quantize(s.v[i] / v_max, v_map) : 0) << k;
                // Dequantized: within the map's resolution, 0.9/64 of the block's absmax for m
                // at worst (its coarsest step), relative 1/8 of the value below that.
                const float m8 = m_map.value[s.mq[i]] * m_max;
                ASSERT_LE(std::fabs(m8 - s.m[i]), 0.9f / 128 * m_max + 0.07f * std::fabs(s.m[i])) << k;
            }
        }
    }
}

// 8-bit AdamW on f(w) = sum (w - target)^2 / 2 follows fp32 AdamW: the loss falls alike.
TEST(Optimizer8bit, DescentTracksFp32States) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const std::int64_t n = 4096 + 100;
    States s = fresh(n, rng);
    const std::vector<float> target = test::to_storage<float>(test::random_normal(rng, n));
    auto loss = [&](const std::vector<float>& w) {
        double l = 0;
        for (std::size_t k = 0; k < w.size(); ++k) l += 0.5 * std::pow(w[k] - target[k], 2);
        return l;
    };
    const double l0 = loss(s.w);
    for (int t = 1; t <= 200; ++t) {
        std::vector<float> g32(s.w.size()), g8(s.w.size());
        for (std::size_t k = 0; k < g32.size(); ++k) {
            g32[k] = s.w[k] - target[k];
            g8[k] = s.w8[k] - target[k];
        }
        step(s, g8, g32, t);
    }
    const double l32 = loss(s.w), l8 = loss(s.w8);
    EXPECT_LT(l32, 0.2 * l0);
    EXPECT_LT(l8, 0.2 * l0);
    EXPECT_NEAR(l8 / l32, 1.0, 0.25) << "fp32 " << l32 << " 8-bit " << l8 << " from " << l0;
    for (float w : s.w8) ASSERT_TRUE(std::isfinite(w));
}

}  // namespace
}  // namespace napkin
