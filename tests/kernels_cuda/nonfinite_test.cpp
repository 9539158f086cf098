// The anomaly check's reduction: the CUDA kernel against the CPU's (kernels/cpu/nonfinite.cpp)
// on fresh random inputs with NaN and inf injected at random places, at sizes below one block,
// odd ones and past the grid's cap (grid-stride), aligned (16-byte vectors) and not; the slot
// accumulates over launches.
#include "kernels/nonfinite.h"

#include <gtest/gtest.h>

#include <limits>

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

}  // namespace
}  // namespace napkin
