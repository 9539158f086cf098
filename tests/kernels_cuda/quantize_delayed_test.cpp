// Delayed scaling on the GPU against the CPU's (kernels/cpu/quantize.cpp): the one-pass cast with
// a slot's scale pair (codes, the copied pair, the amax recorded into a history entry, bit for
// bit) on random tensors of several sizes (one block, many: the atomic across blocks), on NaN,
// infinities, zeros and values past the scale's range; current scaling's recorded amax; and
// amax_history_roll over random histories with zero and infinite ones.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"
#include "tests/kernels_cuda/fp8_codes.h"

namespace napkin {
namespace {

using namespace test;

std::uint32_t delayed_bits(float f) {
    return std::bit_cast<std::uint32_t>(f);
}

// delayed: the pair to cast with (null: current scaling); prior: the history entry before.
template <class Q, class T>
void check_delayed(const std::vector<T>& x, const float* delayed, float prior) {
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<Q> q(x.size());
    float scale[kFp8ScaleFloats];
    float amax = prior;
    cpu::quantize<Q, T>({.out = q.data(),
                         .scale = scale,
                         .inp = x.data(),
                         .n = n,
                         .delayed = delayed,
                         .amax = &amax});

    DeviceBuffer<T> x_d(x);
    DeviceBuffer<Q> q_d(x.size());
    DeviceBuffer<float> scale_d(kFp8ScaleFloats), amax_d(std::vector<float>{prior});
    std::optional<DeviceBuffer<float>> delayed_d;
    if (delayed != nullptr)
        delayed_d.emplace(std::vector<float>(delayed, delayed + kFp8ScaleFloats));
    q_d.poison();
    scale_d.poison();
    cuda::quantize<Q, T>({.out = q_d.get(),
                          .scale = scale_d.get(),
                          .inp = x_d.get(),
                          .n = n,
                          .delayed = delayed_d ? delayed_d->get() : nullptr,
                          .amax = amax_d.get()},
                         {});
    const std::vector<float> s = scale_d.download();
    for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
        EXPECT_EQ(delayed_bits(s[static_cast<std::size_t>(i)]), delayed_bits(scale[i])) << "pair slot " << i;
    EXPECT_EQ(delayed_bits(amax_d.download()[0]), delayed_bits(amax)) << "recorded amax";
    expect_same_codes(q_d.download(), q);
}

std::vector<float> delayed_pair_of(float scale) {
    std::vector<float> p(kFp8ScaleFloats, 0.0f);
    p[0] = scale;
    p[kFp8ScaleInv] = 1.0f / scale;
    return p;
}

template <class T>
class QuantizeDelayedCuda : public ::testing::Test {};
TYPED_TEST_SUITE(QuantizeDelayedCuda, StorageTypes);

TYPED_TEST(QuantizeDelayedCuda, MatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::vector<float> narrow = delayed_pair_of(448.0f / 8.0f), wide = delayed_pair_of(57344.0f / 0.5f);
    for (std::int64_t n : {1, 7, 256, 1000, 300001}) {
        SCOPED_TRACE(case_name<T>(n));
        const auto x = random_storage<T>(rng, n, 1.0);
        // Past the range (|x| > 8 is rare; |x| > 0.5 saturates E5M2's often), prior amaxes
        // below and above the tensor's.
        check_delayed<f8e4m3_t>(x, narrow.data(), 0.0f);
        check_delayed<f8e4m3_t>(x, narrow.data(), 100.0f);
        check_delayed<f8e5m2_t>(x, wide.data(), 0.25f);
        check_delayed<f8e4m3_t>(x, nullptr, 0.5f);  // current scaling, recording
    }
}

TEST(QuantizeDelayedCudaEdges, NanInfinityZerosAndOverflow) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    const std::vector<float> one = delayed_pair_of(1.0f), big = delayed_pair_of(448.0f);
    for (const std::vector<float>& x :
         {std::vector<float>{0.0f, -0.0f, 0.0f}, std::vector<float>{nan, 2.0f, -1.0f},
          std::vector<float>{inf, 1000.0f, 3.0f, -inf}, std::vector<float>{3.0f, -2.0f, 0.5f},
          std::vector<float>{}}) {
        SCOPED_TRACE(testing::Message() << x.size() << " elements");
        check_delayed<f8e4m3_t>(x, one.data(), 0.0f);
        check_delayed<f8e4m3_t>(x, big.data(), 0.0f);
        check_delayed<f8e5m2_t>(x, one.data(), 0.0f);
        check_delayed<f8e4m3_t>(x, nullptr, 0.0f);
    }
}

TEST(AmaxHistoryRollCuda, MatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 4.0f);
    for (const std::int64_t H : {1, 3, 16}) {
        for (const std::int64_t slots : {1, 5, 300}) {
            SCOPED_TRACE(testing::Message() << "H " << H << " slots " << slots);
            const std::int64_t e4m3 = slots * 2 / 3;
            std::vector<float> history(static_cast<std::size_t>(slots * H));
            for (float& h : history)
                h = std::ldexp(u(rng), static_cast<int>(u(rng) * 20.0f) - 40);
            std::fill(history.begin(), history.begin() + H, 0.0f);  // slot 0: no amax yet
            if (slots > 1)
                history[static_cast<std::size_t>(H)] = std::numeric_limits<float>::infinity();
            std::vector<float> scales(static_cast<std::size_t>(slots * kFp8ScaleFloats));
            DeviceBuffer<float> history_d(history), scales_d(scales.size());
            scales_d.poison();
            cpu::amax_history_roll({history.data(), scales.data(), slots, e4m3, H});
            cuda::amax_history_roll({history_d.get(), scales_d.get(), slots, e4m3, H}, {});
            const std::vector<float> h = history_d.download(), s = scales_d.download();
            for (std::size_t i = 0; i < h.size(); ++i)
                ASSERT_EQ(delayed_bits(h[i]), delayed_bits(history[i])) << "history entry " << i;
            for (std::size_t i = 0; i < s.size(); ++i)
                ASSERT_EQ(delayed_bits(s[i]), delayed_bits(scales[i])) << "scale float " << i;
        }
    }
}

}  // namespace
}  // namespace napkin
