// GELU and SwiGLU: the CUDA kernels against the CPU's (kernels/cpu/activation.cpp) at several
// shapes, odd ones included; forward into a poisoned output, backward accumulating.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

template <class T>
class ActivationCuda : public ::testing::Test {};
TYPED_TEST_SUITE(ActivationCuda, StorageTypes);

TYPED_TEST(ActivationCuda, GeluMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const std::size_t offset : {0, 1})  // 1: off the 16-byte vectors
        for (std::int64_t n : {1, 31, 1000, 4099, 100003}) {
            SCOPED_TRACE(case_name<T>(n) + " offset " + std::to_string(offset));
            const auto x = random_storage<T>(rng, n, 2.0), dout = random_storage<T>(rng, n);
            const auto dinp0 = random_storage<T>(rng, n);
            std::vector<T> out(x.size()), dinp = dinp0;
            cpu::gelu_forward<T>({out.data(), x.data(), n});
            cpu::gelu_backward<T>({dinp.data(), x.data(), dout.data(), n});

            DeviceBuffer<T> x_d(x, offset), out_d(x.size(), offset), dout_d(dout, offset),
                dinp_d(dinp0, offset);
            out_d.poison();
            cuda::gelu_forward<T>({out_d.get(), x_d.get(), n}, {});
            cuda::gelu_backward<T>({dinp_d.get(), x_d.get(), dout_d.get(), n}, {});
            expect_match("gelu out", out_d.download(), out, tolerance<T>());
            expect_match("gelu dinp", dinp_d.download(), dinp, tolerance<T>());
        }
}

TYPED_TEST(ActivationCuda, SwigluMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    // {N, F, offset}: F a multiple of 8 takes the 16-byte vectors, offset 1 the scalar path.
    const std::int64_t shapes[][3] = {{1, 1, 0},    {7, 33, 0}, {64, 257, 0},
                                      {3, 1024, 0}, {5, 64, 0}, {5, 64, 1}};
    for (const auto& s : shapes) {
        const std::int64_t N = s[0], F = s[1];
        const auto offset = static_cast<std::size_t>(s[2]);
        SCOPED_TRACE(case_name<T>(N, F) + " offset " + std::to_string(offset));
        const auto x = random_storage<T>(rng, N * 2 * F, 2.0), dout = random_storage<T>(rng, N * F);
        const auto dinp0 = random_storage<T>(rng, N * 2 * F);
        std::vector<T> out(static_cast<std::size_t>(N * F)), dinp = dinp0;
        cpu::swiglu_forward<T>({out.data(), x.data(), N, F});
        cpu::swiglu_backward<T>({dinp.data(), x.data(), dout.data(), N, F});

        DeviceBuffer<T> x_d(x, offset), out_d(out.size(), offset), dout_d(dout, offset),
            dinp_d(dinp0, offset);
        out_d.poison();
        cuda::swiglu_forward<T>({out_d.get(), x_d.get(), N, F}, {});
        cuda::swiglu_backward<T>({dinp_d.get(), x_d.get(), dout_d.get(), N, F}, {});
        expect_match("swiglu out", out_d.download(), out, tolerance<T>());
        expect_match("swiglu dinp", dinp_d.download(), dinp, tolerance<T>());
    }
}

}  // namespace
}  // namespace napkin
