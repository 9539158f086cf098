// Accumulate (dst += src, the ZeRO engine's gradient-chunk sum): the CUDA kernel against the
// CPU's (kernels/cpu/accumulate.cpp) at several sizes, odd ones included, on fresh random values.
// The sum of two values rounded once is exact to the storage type's rounding, so the match is
// tight; the destination starts from the same random values on both sides.
#include "kernels/accumulate.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

template <class T>
class AccumulateCuda : public ::testing::Test {};
TYPED_TEST_SUITE(AccumulateCuda, StorageTypes);

TYPED_TEST(AccumulateCuda, MatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const std::size_t offset : {0, 1})  // 1: off the 16-byte vectors
        for (std::int64_t n : {1, 3, 1000, 4097, 65537, 100003}) {
            SCOPED_TRACE(case_name<T>(n) + " offset " + std::to_string(offset));
            const auto src = random_storage<T>(rng, n), dst0 = random_storage<T>(rng, n);
            std::vector<T> dst = dst0;
            cpu::accumulate<T>({dst.data(), src.data(), n});

            DeviceBuffer<T> src_d(src, offset), dst_d(dst0, offset);
            cuda::accumulate<T>({dst_d.get(), src_d.get(), n}, {});
            expect_match("dst", dst_d.download(), dst, tolerance<T>());

            // Twice: the second sum starts from the first's rounded result on both sides.
            cpu::accumulate<T>({dst.data(), src.data(), n});
            cuda::accumulate<T>({dst_d.get(), src_d.get(), n}, {});
            expect_match("dst twice", dst_d.download(), dst, tolerance<T>());
        }
}

}  // namespace
}  // namespace napkin
