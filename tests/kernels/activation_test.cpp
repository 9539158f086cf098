// GELU (tanh approximation) and SwiGLU against a double-precision reference with fresh random
// inputs (saturating tails included), for each storage type; backward against the reference's
// analytic gradient and central finite differences of L = sum(out * G), accumulating into
// pre-filled gradients.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

double gelu(double x) {
    return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double gelu_grad(double x) {
    const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

// Normal inputs with a few saturating values planted at the front (tanh and exp in the tails).
Vec activation_inputs(std::mt19937& rng, std::int64_t n) {
    Vec v = test::random_normal(rng, n, 0.0, 2.0);
    const double tails[] = {-60.0, 60.0, -9.0, 9.0, 0.0};
    for (std::size_t i = 0; i < std::size(tails) && i < v.size(); ++i)
        v[i] = tails[i];
    return v;
}

template <class T>
void check_gelu(std::int64_t n, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<T>() << " gelu n " << n);
    std::mt19937 rng(seed);
    const auto x = test::to_storage<T>(activation_inputs(rng, n));
    Vec xs = test::as_seen(x);

    auto out = test::nan_filled<T>(n);
    cpu::gelu_forward<T>({out.data(), x.data(), n});
    Vec ref(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i)
        ref[i] = gelu(xs[i]);
    test::expect_close("out", test::as_seen(out), ref, test::tolerance<T>());

    const auto g = test::to_storage<T>(test::random_normal(rng, n));
    const Vec gs = test::as_seen(g);
    auto dx = test::to_storage<T>(test::random_normal(rng, n));
    const Vec dx0 = test::as_seen(dx);
    cpu::gelu_backward<T>({dx.data(), x.data(), g.data(), n});
    Vec ref_dx(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i)
        ref_dx[i] = gelu_grad(xs[i]) * gs[i];
    auto loss = [&] {
        double l = 0.0;
        for (std::size_t i = 0; i < xs.size(); ++i)
            l += gelu(xs[i]) * gs[i];
        return l;
    };
    test::expect_gradient("dinp", loss, xs, test::as_seen(dx), dx0, ref_dx, test::tolerance<T>(),
                          rng);

    // In place: out may be inp.
    auto inplace = x;
    cpu::gelu_forward<T>({inplace.data(), inplace.data(), n});
    test::expect_close("in-place out", test::as_seen(inplace), test::as_seen(out), {0.0, 0.0});
}

// out (N, F) = silu(gate) * up, rows of inp (N, 2F) = [gate | up]
Vec swiglu_ref(const Vec& x, std::int64_t N, std::int64_t F) {
    Vec out(static_cast<std::size_t>(N * F));
    for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t f = 0; f < F; ++f) {
            const double gate = x[static_cast<std::size_t>(n * 2 * F + f)];
            const double up = x[static_cast<std::size_t>(n * 2 * F + F + f)];
            out[static_cast<std::size_t>(n * F + f)] = gate * sigmoid(gate) * up;
        }
    }
    return out;
}

template <class T>
void check_swiglu(std::int64_t N, std::int64_t F, unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << test::dtype_name<T>()
                                    << " swiglu N " << N << " F " << F);
    std::mt19937 rng(seed);
    const auto x = test::to_storage<T>(activation_inputs(rng, N * 2 * F));
    Vec xs = test::as_seen(x);

    auto out = test::nan_filled<T>(N * F);
    cpu::swiglu_forward<T>({out.data(), x.data(), N, F});
    test::expect_close("out", test::as_seen(out), swiglu_ref(xs, N, F), test::tolerance<T>());

    const auto g = test::to_storage<T>(test::random_normal(rng, N * F));
    const Vec gs = test::as_seen(g);
    auto dx = test::to_storage<T>(test::random_normal(rng, N * 2 * F));
    const Vec dx0 = test::as_seen(dx);
    cpu::swiglu_backward<T>({dx.data(), x.data(), g.data(), N, F});
    Vec ref_dx(xs.size());
    for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t f = 0; f < F; ++f) {
            const std::size_t ig = static_cast<std::size_t>(n * 2 * F + f),
                              iu = ig + static_cast<std::size_t>(F);
            const double gate = xs[ig], up = xs[iu], d = gs[static_cast<std::size_t>(n * F + f)];
            const double sg = sigmoid(gate);
            ref_dx[ig] = d * up * sg * (1.0 + gate * (1.0 - sg));
            ref_dx[iu] = d * gate * sg;
        }
    }
    auto loss = [&] { return test::dot(swiglu_ref(xs, N, F), gs); };
    test::expect_gradient("dinp", loss, xs, test::as_seen(dx), dx0, ref_dx, test::tolerance<T>(),
                          rng);
}

TEST(Activation, GeluFloat) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 7, 33, 1000, 40001})
        check_gelu<float>(n, seed);
}

TEST(Activation, GeluBf16) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {1, 33, 1000, 40001})
        check_gelu<bf16_t>(n, seed);
}

TEST(Activation, GeluF16) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t n : {33, 4097})
        check_gelu<f16_t>(n, seed);
}

// For negative x, gelu is tiny and 0.5 x (1 + tanh(u)) cancels: in fp32 it returns 0 from
// x = -5 down (relative error 1). The kernels' x sigmoid(2u) is the same function without the
// cancellation; here it must hold fp32's relative accuracy (a few ulps, amplified by exp's
// argument) on [-9, 0), value and gradient, against the same form in long double.
TEST(Activation, GeluKeepsItsDigitsForNegativeInputs) {
    std::vector<float> x;
    for (float v = -9.0f; v < 0.0f; v += 0.01f) x.push_back(v);
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<float> out(x.size()), dx(x.size(), 0.0f), ones(x.size(), 1.0f);
    cpu::gelu_forward<float>({out.data(), x.data(), n});
    cpu::gelu_backward<float>({dx.data(), x.data(), ones.data(), n});
    for (std::size_t i = 0; i < x.size(); ++i) {
        const long double v = x[i];
        const long double u = static_cast<long double>(kSqrt2OverPi) * (v + 0.044715L * v * v * v);
        const long double e = std::exp(-2.0L * u), s = 1.0L / (1.0L + e);
        const long double want = v * s;
        const long double slope = 2.0L * v * s * (e * s) * static_cast<long double>(kSqrt2OverPi) *
                                  (1.0L + 3.0L * 0.044715L * v * v);
        const long double want_dx = s + slope;
        // Relative to fp32's ulp, widened by |2u| (exp's condition number) and a few roundings;
        // the gradient's two terms cancel near its root (x = -0.75): relative to their sizes.
        const double tol = 1e-6 * (4.0 + std::fabs(2.0 * static_cast<double>(u)));
        EXPECT_NEAR(out[i] / static_cast<double>(want), 1.0, tol) << "x " << x[i];
        EXPECT_NEAR(dx[i], static_cast<double>(want_dx), 4 * tol * static_cast<double>(s + std::fabs(slope)))
            << "x " << x[i];
    }
}

struct SwigluCase {
    std::int64_t N, F;
};

TEST(Activation, SwigluFloat) {
    const unsigned seed = test::fresh_seed();
    for (const SwigluCase c :
         {SwigluCase{1, 1}, SwigluCase{3, 33}, SwigluCase{17, 64}, SwigluCase{300, 129}}) {
        check_swiglu<float>(c.N, c.F, seed);
    }
}

TEST(Activation, SwigluBf16) {
    const unsigned seed = test::fresh_seed();
    for (const SwigluCase c : {SwigluCase{1, 1}, SwigluCase{3, 33}, SwigluCase{300, 129}}) {
        check_swiglu<bf16_t>(c.N, c.F, seed);
    }
}

TEST(Activation, SwigluF16) {
    const unsigned seed = test::fresh_seed();
    check_swiglu<f16_t>(5, 33, seed);
}

}  // namespace
}  // namespace napkin
