// Residual add against a double-precision reference with fresh random inputs, for each storage
// type; backward (accumulating into both branches) against the analytic gradient and central
// finite differences of L = sum(out * G); the documented aliasing (in place) as well.
#include "kernels/residual.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

template <class T>
void check_residual(std::int64_t n, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<T>() << " n " << n);
    std::mt19937 rng(seed);
    const auto a = test::to_storage<T>(test::random_normal(rng, n));
    const auto b = test::to_storage<T>(test::random_normal(rng, n));
    Vec as = test::as_seen(a), bs = test::as_seen(b);

    auto out = test::nan_filled<T>(n);
    cpu::residual_forward<T>({out.data(), a.data(), b.data(), n});
    test::expect_close("out", test::as_seen(out), test::plus(as, bs), test::tolerance<T>());

    const auto g = test::to_storage<T>(test::random_normal(rng, n));
    const Vec gs = test::as_seen(g);
    auto da = test::to_storage<T>(test::random_normal(rng, n));
    auto db = test::to_storage<T>(test::random_normal(rng, n));
    const Vec da0 = test::as_seen(da), db0 = test::as_seen(db);
    cpu::residual_backward<T>({da.data(), db.data(), g.data(), n});
    auto loss = [&] { return test::dot(test::plus(as, bs), gs); };
    test::expect_gradient("da", loss, as, test::as_seen(da), da0, gs, test::tolerance<T>(), rng);
    test::expect_gradient("db", loss, bs, test::as_seen(db), db0, gs, test::tolerance<T>(), rng);

    // Aliasing: the stream updated in place, and dout accumulated into itself.
    auto stream = a;
    cpu::residual_forward<T>({stream.data(), stream.data(), b.data(), n});
    test::expect_close("in-place out", test::as_seen(stream), test::as_seen(out), {0.0, 0.0});
    auto grad = g;
    auto other = test::to_storage<T>(db0);
    cpu::residual_backward<T>({grad.data(), other.data(), grad.data(), n});
    test::expect_close("da aliasing dout", test::as_seen(grad), test::plus(gs, gs),
                       test::tolerance<T>());
    test::expect_close("db with dout aliased", test::as_seen(other), test::as_seen(db), {0.0, 0.0});
}

TEST(Residual, Float) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 33, 4096, 70001})
        check_residual<float>(n, seed);
}

TEST(Residual, Bf16) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 33, 70001})
        check_residual<bf16_t>(n, seed);
}

TEST(Residual, F16) {
    const unsigned seed = test::fresh_seed();
    check_residual<f16_t>(1001, seed);
}

}  // namespace
}  // namespace napkin
