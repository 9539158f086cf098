// Rotary embedding (Hugging Face Llama rotate_half convention) against a double-precision
// reference with fresh random inputs, positions offsets and head layouts (GQA included), for each
// storage type; backward (in place) against the analytic gradient and central finite
// differences of L = sum(rope(qkv) * G) over the whole packed buffer, v included.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct RopeTestCase {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
    double theta;
    std::int64_t pos_offset;
};

std::int64_t row_width(const RopeTestCase& c) {
    return (c.NH + 2 * static_cast<std::int64_t>(c.KVH)) * c.HD;
}

// Rotates the q and k heads by sign * angle, written independently of the kernel:
// x'[i] = x[i] cos a - x[i + HD/2] sin a, x'[i + HD/2] = x[i + HD/2] cos a + x[i] sin a.
Vec rope_ref(const Vec& qkv, const RopeTestCase& c, double sign) {
    Vec out = qkv;
    const std::int64_t half = c.HD / 2, W = row_width(c);
    for (std::int64_t b = 0; b < c.B; ++b) {
        for (std::int64_t t = 0; t < c.T; ++t) {
            const double pos = static_cast<double>(t + c.pos_offset);
            for (std::int64_t h = 0; h < c.NH + c.KVH; ++h) {
                const std::size_t base = static_cast<std::size_t>((b * c.T + t) * W + h * c.HD);
                for (std::int64_t i = 0; i < half; ++i) {
                    const double a = sign * pos *
                                     std::pow(c.theta, -2.0 * static_cast<double>(i) /
                                                           static_cast<double>(c.HD));
                    const std::size_t i1 = base + static_cast<std::size_t>(i),
                                      i2 = i1 + static_cast<std::size_t>(half);
                    out[i1] = qkv[i1] * std::cos(a) - qkv[i2] * std::sin(a);
                    out[i2] = qkv[i2] * std::cos(a) + qkv[i1] * std::sin(a);
                }
            }
        }
    }
    return out;
}

// Bitwise equality of the v heads of two buffers.
template <class T>
bool v_untouched(const std::vector<T>& a, const std::vector<T>& b, const RopeTestCase& c) {
    const std::int64_t W = row_width(c), v0 = (c.NH + c.KVH) * c.HD;
    for (std::int64_t bt = 0; bt < c.B * c.T; ++bt) {
        const std::size_t off = static_cast<std::size_t>(bt * W + v0);
        if (std::memcmp(a.data() + off, b.data() + off,
                        static_cast<std::size_t>(W - v0) * sizeof(T)) != 0)
            return false;
    }
    return true;
}

template <class T>
void check_rope(const RopeTestCase& c, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<T>() << " B " << c.B << " T " << c.T
                 << " NH " << c.NH << " KVH " << c.KVH << " HD " << c.HD << " theta " << c.theta
                 << " pos_offset " << c.pos_offset);
    std::mt19937 rng(seed);
    const std::int64_t n = c.B * c.T * row_width(c);
    const auto x = test::to_storage<T>(test::random_normal(rng, n));
    Vec xs = test::as_seen(x);
    const float theta = static_cast<float>(c.theta);

    auto y = x;
    cpu::rope_forward<T>({y.data(), c.B, c.T, c.NH, c.KVH, c.HD, theta, c.pos_offset});
    test::expect_close("out", test::as_seen(y), rope_ref(xs, c, 1.0), test::tolerance<T>());
    EXPECT_TRUE(v_untouched(x, y, c)) << "forward changed v";

    // Backward transforms the gradient in place: dqkv = d/dqkv sum(rope(qkv) * G), v passed
    // through.
    const auto g = test::to_storage<T>(test::random_normal(rng, n));
    const Vec gs = test::as_seen(g);
    auto dqkv = g;
    cpu::rope_backward<T>({dqkv.data(), c.B, c.T, c.NH, c.KVH, c.HD, theta, c.pos_offset});
    EXPECT_TRUE(v_untouched(g, dqkv, c)) << "backward changed v";
    auto loss = [&] { return test::dot(rope_ref(xs, c, 1.0), gs); };
    const Vec zeros(xs.size(), 0.0);
    test::expect_gradient("dqkv", loss, xs, test::as_seen(dqkv), zeros, rope_ref(gs, c, -1.0),
                          test::tolerance<T>(), rng);
}

// theta 10000 (Llama 2) and 500000 (Llama 3); GQA (KVH < NH); positions offset as in
// incremental decoding; the last big enough for the threaded path.
const RopeTestCase kRopeTestCases[] = {
    {1, 1, 1, 1, 2, 10000.0, 0},     {2, 5, 4, 2, 8, 10000.0, 0},   {3, 7, 3, 3, 66, 500000.0, 17},
    {1, 9, 2, 1, 16, 10000.0, 4000}, {2, 40, 8, 2, 64, 10000.0, 0},
};

TEST(Rope, Float) {
    const unsigned seed = test::fresh_seed();
    for (const RopeTestCase& c : kRopeTestCases)
        check_rope<float>(c, seed);
}

TEST(Rope, Bf16) {
    const unsigned seed = test::fresh_seed();
    for (const RopeTestCase& c : kRopeTestCases)
        check_rope<bf16_t>(c, seed);
}

TEST(Rope, F16) {
    const unsigned seed = test::fresh_seed();
    check_rope<f16_t>(kRopeTestCases[1], seed);
    check_rope<f16_t>(kRopeTestCases[3], seed + 1);
}

// Position 0 is the identity; forward then backward is the identity (the rotation is orthogonal).
TEST(Rope, IdentityAtZeroAndInverse) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const RopeTestCase c{2, 6, 3, 1, 10, 10000.0, 0};
    const auto x = test::to_storage<float>(test::random_normal(rng, c.B * c.T * row_width(c)));
    auto y = x;
    cpu::rope_forward<float>({y.data(), 1, 1, c.NH, c.KVH, c.HD});
    test::expect_close("position 0", test::as_seen(y), test::as_seen(x), {0.0, 0.0});
    y = x;
    cpu::rope_forward<float>({y.data(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, 123});
    cpu::rope_backward<float>({y.data(), c.B, c.T, c.NH, c.KVH, c.HD, 10000.0f, 123});
    test::expect_close("backward undoes forward", test::as_seen(y), test::as_seen(x),
                       test::tolerance<float>());
}

TEST(Rope, OddHeadDimIsAnError) {
    std::vector<float> qkv(9, 0.0f);
    EXPECT_THROW(cpu::rope_forward<float>({qkv.data(), 1, 1, 1, 1, 3}), InternalError);
}

}  // namespace
}  // namespace napkin
