// LayerNorm and RMSNorm: the CUDA kernels against the CPU's (kernels/cpu/norm.cpp) at several
// shapes, odd ones and rows longer than a block included; forward into poisoned outputs and
// statistics, backward accumulating into pre-filled gradients (parameter gradients optional).
#include "kernels/norm.h"

#include <gtest/gtest.h>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

constexpr std::int64_t kShapes[][2] = {{1, 1}, {3, 7}, {17, 768}, {5, 1025}, {64, 33}, {2, 4099}};

template <class T>
class NormCuda : public ::testing::Test {};
TYPED_TEST_SUITE(NormCuda, StorageTypes);

TYPED_TEST(NormCuda, LayernormMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& s : kShapes) {
        const std::int64_t N = s[0], C = s[1];
        for (bool with_bias : {true, false}) {
            SCOPED_TRACE(case_name<T>(N, C) + (with_bias ? " bias" : ""));
            const auto x = to_storage<T>(random_normal(rng, N * C, 0.5, 2.0));
            const auto w = random_storage<T>(rng, C), b = random_storage<T>(rng, C);
            const auto dout = random_storage<T>(rng, N * C);
            const auto dx0 = random_storage<T>(rng, N * C), dw0 = random_storage<T>(rng, C);
            const auto db0 = random_storage<T>(rng, C);
            const T* bias = with_bias ? b.data() : nullptr;
            std::vector<T> out(x.size()), dx = dx0, dw = dw0, db = db0;
            std::vector<float> mean(static_cast<std::size_t>(N)), rstd(mean.size());
            cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias,
                                   N, C);
            cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                    w.data(), mean.data(), rstd.data(), N, C);

            DeviceBuffer<T> x_d(x), w_d(w), b_d(b), out_d(x.size()), dout_d(dout), dx_d(dx0),
                dw_d(dw0), db_d(db0);
            DeviceBuffer<float> mean_d(mean.size()), rstd_d(rstd.size());
            out_d.poison();
            mean_d.poison();
            rstd_d.poison();
            cuda::layernorm_forward(out_d.get(), mean_d.get(), rstd_d.get(), x_d.get(), w_d.get(),
                                    with_bias ? b_d.get() : nullptr, N, C, nullptr);
            expect_match("out", out_d.download(), out, for_sum_of(tolerance<T>(), C));
            expect_match("mean", mean_d.download(), mean, for_sum_of(tolerance<float>(), C));
            expect_match("rstd", rstd_d.download(), rstd, for_sum_of(tolerance<float>(), C));
            // Backward from the CPU's statistics, so that only the backward is compared.
            mean_d.upload(mean);
            rstd_d.upload(rstd);
            cuda::layernorm_backward(dx_d.get(), dw_d.get(), db_d.get(), dout_d.get(), x_d.get(),
                                     w_d.get(), mean_d.get(), rstd_d.get(), N, C, nullptr);
            expect_match("dinp", dx_d.download(), dx, for_sum_of(tolerance<T>(), C));
            expect_match("dweight", dw_d.download(), dw, for_sum_of(tolerance<T>(), N));
            expect_match("dbias", db_d.download(), db, for_sum_of(tolerance<T>(), N));
        }
    }
}

TYPED_TEST(NormCuda, RmsnormMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& s : kShapes) {
        const std::int64_t N = s[0], C = s[1];
        for (bool with_dw : {true, false}) {
            SCOPED_TRACE(case_name<T>(N, C) + (with_dw ? "" : " frozen"));
            const auto x = random_storage<T>(rng, N * C, 2.0), w = random_storage<T>(rng, C);
            const auto dout = random_storage<T>(rng, N * C);
            const auto dx0 = random_storage<T>(rng, N * C), dw0 = random_storage<T>(rng, C);
            std::vector<T> out(x.size()), dx = dx0, dw = dw0;
            std::vector<float> rstd(static_cast<std::size_t>(N));
            cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
            cpu::rmsnorm_backward(dx.data(), with_dw ? dw.data() : nullptr, dout.data(), x.data(),
                                  w.data(), rstd.data(), N, C);

            DeviceBuffer<T> x_d(x), w_d(w), out_d(x.size()), dout_d(dout), dx_d(dx0), dw_d(dw0);
            DeviceBuffer<float> rstd_d(rstd.size());
            out_d.poison();
            rstd_d.poison();
            cuda::rmsnorm_forward(out_d.get(), rstd_d.get(), x_d.get(), w_d.get(), N, C, nullptr);
            expect_match("out", out_d.download(), out, for_sum_of(tolerance<T>(), C));
            expect_match("rstd", rstd_d.download(), rstd, for_sum_of(tolerance<float>(), C));
            rstd_d.upload(rstd);
            cuda::rmsnorm_backward(dx_d.get(), with_dw ? dw_d.get() : nullptr, dout_d.get(),
                                   x_d.get(), w_d.get(), rstd_d.get(), N, C, nullptr);
            expect_match("dinp", dx_d.download(), dx, for_sum_of(tolerance<T>(), C));
            expect_match("dweight", dw_d.download(), dw, for_sum_of(tolerance<T>(), N));
        }
    }
}

}  // namespace
}  // namespace napkin
