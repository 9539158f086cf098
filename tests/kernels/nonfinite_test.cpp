// The anomaly check's reduction (kernels/cpu/nonfinite.cpp) against a count in double precision:
// fresh random inputs at several sizes, odd ones and one past the threading threshold, with NaN
// and inf injected at random places; the slot accumulates over calls.
#include "kernels/nonfinite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using namespace test;

template <class T>
class Nonfinite : public ::testing::Test {};
using Types = ::testing::Types<float, bf16_t, f16_t>;
TYPED_TEST_SUITE(Nonfinite, Types);

// x as the storage type holds it, with `bad` elements set to NaN (even draws) or +-inf.
template <class T>
std::vector<T> poisoned(std::mt19937& rng, std::int64_t n, int bad) {
    std::vector<T> x = to_storage<T>(random_normal(rng, n, 0.0, 100.0));
    std::uniform_int_distribution<std::int64_t> at(0, n - 1);
    for (int k = 0; k < bad; ++k) {
        const float v = k % 2 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                   : (k % 4 == 1 ? 1.0f : -1.0f) * INFINITY;
        x[static_cast<std::size_t>(at(rng))] = from_float<T>(v);
    }
    return x;
}

TYPED_TEST(Nonfinite, CountsNanAndInfAndTheLargestFiniteMagnitude) {
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (std::int64_t n : {1, 7, 1000, 70001}) {
        for (int bad : {0, 1, 5}) {
            const std::vector<T> x = poisoned<T>(rng, n, bad);
            std::uint64_t nan = 0, inf = 0;
            double max_finite = 0;
            for (const T& e : x) {
                const double v = to_float(e);
                if (std::isnan(v))
                    ++nan;
                else if (std::isinf(v))
                    ++inf;
                else
                    max_finite = std::max(max_finite, std::fabs(v));
            }
            NonfiniteSlot slot;
            cpu::nonfinite_check<T>({&slot, x.data(), n});
            EXPECT_EQ(slot.nan, nan) << n;
            EXPECT_EQ(slot.inf, inf) << n;
            EXPECT_EQ(static_cast<double>(slot.max_finite), max_finite) << n;
            EXPECT_EQ(slot.bad(), nan + inf > 0);
            // A second call accumulates: the counts double, the maximum stays.
            cpu::nonfinite_check<T>({&slot, x.data(), n});
            EXPECT_EQ(slot.nan, 2 * nan);
            EXPECT_EQ(slot.inf, 2 * inf);
            EXPECT_EQ(static_cast<double>(slot.max_finite), max_finite);
        }
    }
}

// The batch is the checks one by one, each into its own slot.
TYPED_TEST(Nonfinite, ManyIsEachCheckIntoItsSlot) {
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::int64_t sizes[] = {1, 7, 1000, 70001, 3};
    std::vector<std::vector<T>> xs;
    for (std::size_t i = 0; i < std::size(sizes); ++i)
        xs.push_back(poisoned<T>(rng, sizes[i], static_cast<int>(i % 3)));
    std::vector<NonfiniteSlot> want(xs.size()), got(xs.size());
    NonfiniteCheckManyArgs<T> many;
    for (std::size_t i = 0; i < xs.size(); ++i) {
        const auto n = static_cast<std::int64_t>(xs[i].size());
        cpu::nonfinite_check<T>({&want[i], xs[i].data(), n});
        many.checks[many.count++] = {&got[i], xs[i].data(), n};
    }
    cpu::nonfinite_check_many<T>(many);
    // Bit for bit: the same arithmetic in the same order.
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(NonfiniteSlot)), 0);
}

}  // namespace
}  // namespace napkin
