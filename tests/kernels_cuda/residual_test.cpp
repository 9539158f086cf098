// Residual add: the CUDA kernels against the CPU's (kernels/cpu/residual.cpp) at several sizes,
// odd ones included; forward overwrites a poisoned output, backward accumulates into both
// branches' gradients.
#include "kernels/residual.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

template <class T>
class ResidualCuda : public ::testing::Test {};
TYPED_TEST_SUITE(ResidualCuda, StorageTypes);

TYPED_TEST(ResidualCuda, ForwardAndBackwardMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const std::size_t offset : {0, 1})  // 1: off the 16-byte vectors
        for (std::int64_t n : {1, 3, 1000, 4097, 65537}) {
            SCOPED_TRACE(case_name<T>(n) + " offset " + std::to_string(offset));
            const auto a = random_storage<T>(rng, n), b = random_storage<T>(rng, n);
            const auto dout = random_storage<T>(rng, n);
            const auto da0 = random_storage<T>(rng, n), db0 = random_storage<T>(rng, n);

            std::vector<T> out(static_cast<std::size_t>(n)), da = da0, db = db0;
            cpu::residual_forward<T>({out.data(), a.data(), b.data(), n});
            cpu::residual_backward<T>({da.data(), db.data(), dout.data(), n});

            DeviceBuffer<T> a_d(a, offset), b_d(b, offset), out_d(a.size(), offset),
                dout_d(dout, offset), da_d(da0, offset), db_d(db0, offset);
            out_d.poison();
            cuda::residual_forward<T>({out_d.get(), a_d.get(), b_d.get(), n}, {});
            cuda::residual_backward<T>({da_d.get(), db_d.get(), dout_d.get(), n}, {});
            expect_match("out", out_d.download(), out, tolerance<T>());
            expect_match("da", da_d.download(), da, tolerance<T>());
            expect_match("db", db_d.download(), db, tolerance<T>());

            // In place: out = a (the residual stream updated where it lies).
            a_d.upload(a);
            cuda::residual_forward<T>({a_d.get(), a_d.get(), b_d.get(), n}, {});
            expect_match("out in place", a_d.download(), out, tolerance<T>());
        }
}

}  // namespace
}  // namespace napkin
