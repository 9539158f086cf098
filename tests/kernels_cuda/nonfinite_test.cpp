// The anomaly check's reduction: the CUDA kernel against the CPU's (kernels/cpu/nonfinite.cpp)
// on fresh random inputs with NaN and inf injected at random places, at sizes below one block,
// odd ones and past the grid's cap (grid-stride), aligned (16-byte vectors) and not; the slot
// accumulates over launches.
#include "kernels/nonfinite.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

template <class T>
class NonfiniteCuda : public ::testing::Test {};
TYPED_TEST_SUITE(NonfiniteCuda, StorageTypes);

TYPED_TEST(NonfiniteCuda, CountsAndMaximumMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (std::int64_t n : {1, 255, 4097, 300001}) {
        for (int bad : {0, 1, 9}) {
            SCOPED_TRACE(case_name<T>(n, bad));
            std::vector<T> x = random_storage<T>(rng, n, 50.0);
            std::uniform_int_distribution<std::int64_t> at(0, n - 1);
            for (int k = 0; k < bad; ++k) {
                const float v = k % 3 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                           : (k % 3 == 1 ? INFINITY : -INFINITY);
                x[static_cast<std::size_t>(at(rng))] = from_float<T>(v);
            }
            DeviceBuffer<T> x_d(x);
            // From the buffer's start (16-byte vectors and a tail) and from its second element
            // (unaligned: element by element).
            for (std::int64_t skip : {0, 1}) {
                SCOPED_TRACE("from element " + std::to_string(skip));
                const std::int64_t m = n - skip;
                NonfiniteSlot want;
                cpu::nonfinite_check<T>({&want, x.data() + skip, m});
                cpu::nonfinite_check<T>({&want, x.data() + skip, m});
                DeviceBuffer<NonfiniteSlot> slot_d(std::vector<NonfiniteSlot>(1));
                cuda::nonfinite_check<T>({slot_d.get(), x_d.get() + skip, m}, {});
                cuda::nonfinite_check<T>({slot_d.get(), x_d.get() + skip, m}, {});
                const NonfiniteSlot got = slot_d.download()[0];
                EXPECT_EQ(got.nan, want.nan);
                EXPECT_EQ(got.inf, want.inf);
                EXPECT_EQ(got.max_finite, want.max_finite);  // a maximum: exact in any order
            }
        }
    }
}

// One launch over a batch (sizes far apart: the grid is sized for the largest, the smaller
// checks' spare blocks read nothing) equals the CPU's checks one by one.
TYPED_TEST(NonfiniteCuda, ManyMatchesCpuCheckByCheck) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::int64_t sizes[] = {1, 300001, 255, 2, 4097};
    std::vector<std::vector<T>> xs;
    std::vector<std::unique_ptr<DeviceBuffer<T>>> xs_d;
    for (std::int64_t n : sizes) {
        std::vector<T> x = random_storage<T>(rng, n, 50.0);
        if (n > 2) x[static_cast<std::size_t>(n / 2)] = from_float<T>(INFINITY);
        if (n > 3) x[1] = from_float<T>(std::numeric_limits<float>::quiet_NaN());
        xs.push_back(x);
    }
    for (const auto& x : xs)
        xs_d.push_back(std::make_unique<DeviceBuffer<T>>(x));
    DeviceBuffer<NonfiniteSlot> slots_d(std::vector<NonfiniteSlot>(xs.size()));
    NonfiniteCheckManyArgs<T> many;
    std::vector<NonfiniteSlot> want(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
        const auto n = static_cast<std::int64_t>(xs[i].size());
        cpu::nonfinite_check<T>({&want[i], xs[i].data(), n});
        many.checks[many.count++] = {slots_d.get() + i, xs_d[i]->get(), n};
    }
    cuda::nonfinite_check_many<T>(many, {});
    const std::vector<NonfiniteSlot> got = slots_d.download();
    for (std::size_t i = 0; i < xs.size(); ++i) {
        EXPECT_EQ(got[i].nan, want[i].nan) << i;
        EXPECT_EQ(got[i].inf, want[i].inf) << i;
        EXPECT_EQ(got[i].max_finite, want[i].max_finite) << i;
    }
}

}  // namespace
}  // namespace napkin
