// LayerNorm and RMSNorm against a double-precision reference with fresh random inputs, for each
// storage type; backward against the reference's analytic gradient and central finite
// differences of L = sum(out * G), accumulating into pre-filled gradients.
#include "kernels/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/residual.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct NormTestCase {
    std::int64_t N, C;
};

constexpr double kEps = 1e-5;

std::size_t at(std::int64_t n, std::int64_t C, std::int64_t c) {
    return static_cast<std::size_t>(n * C + c);
}

// out = (x - mean) * rstd * w + b per row; b empty means no bias; rms: out = x * rstd * w.
struct NormRef {
    bool rms = false;
    std::int64_t N = 0, C = 0;

    Vec forward(const Vec& x, const Vec& w, const Vec& b, Vec* mean = nullptr,
                Vec* rstd = nullptr) const {
        Vec out(x.size());
        if (mean != nullptr) mean->assign(static_cast<std::size_t>(N), 0.0);
        if (rstd != nullptr) rstd->assign(static_cast<std::size_t>(N), 0.0);
        for (std::int64_t n = 0; n < N; ++n) {
            double m = 0.0, v = 0.0;
            if (!rms) {
                for (std::int64_t c = 0; c < C; ++c)
                    m += x[at(n, C, c)];
                m /= static_cast<double>(C);
            }
            for (std::int64_t c = 0; c < C; ++c)
                v += (x[at(n, C, c)] - m) * (x[at(n, C, c)] - m);
            const double s = 1.0 / std::sqrt(v / static_cast<double>(C) + kEps);
            for (std::int64_t c = 0; c < C; ++c) {
                const std::size_t i = at(n, C, c);
                out[i] = (x[i] - m) * s * w[static_cast<std::size_t>(c)] +
                         (b.empty() ? 0.0 : b[static_cast<std::size_t>(c)]);
            }
            if (mean != nullptr) (*mean)[static_cast<std::size_t>(n)] = m;
            if (rstd != nullptr) (*rstd)[static_cast<std::size_t>(n)] = s;
        }
        return out;
    }

    // Analytic gradients of L = sum(out * g), written out from the chain rule in double.
    void backward(Vec& dx, Vec& dw, Vec& db, const Vec& g, const Vec& x, const Vec& w) const {
        Vec mean, rstd;
        forward(x, w, Vec{}, &mean, &rstd);
        dx.assign(x.size(), 0.0);
        dw.assign(w.size(), 0.0);
        db.assign(w.size(), 0.0);
        for (std::int64_t n = 0; n < N; ++n) {
            const double m = mean[static_cast<std::size_t>(n)],
                         s = rstd[static_cast<std::size_t>(n)];
            double sum_dn = 0.0, sum_dn_xhat = 0.0;
            for (std::int64_t c = 0; c < C; ++c) {
                const std::size_t i = at(n, C, c);
                const double xhat = (x[i] - m) * s;
                const double dn = g[i] * w[static_cast<std::size_t>(c)];
                sum_dn += dn;
                sum_dn_xhat += dn * xhat;
                dw[static_cast<std::size_t>(c)] += g[i] * xhat;
                db[static_cast<std::size_t>(c)] += g[i];
            }
            const double Cd = static_cast<double>(C);
            for (std::int64_t c = 0; c < C; ++c) {
                const std::size_t i = at(n, C, c);
                const double xhat = (x[i] - m) * s;
                const double dn = g[i] * w[static_cast<std::size_t>(c)];
                dx[i] = s * (dn - (rms ? 0.0 : sum_dn / Cd) - xhat * sum_dn_xhat / Cd);
            }
        }
    }
};

Vec floats_as_double(const std::vector<float>& v) {
    return Vec(v.begin(), v.end());
}

template <class T>
void check_norm(const NormTestCase& cs, bool rms, bool bias, unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << test::dtype_name<T>()
                                    << (rms ? " rmsnorm" : " layernorm") << " N " << cs.N << " C "
                                    << cs.C << " bias " << bias);
    std::mt19937 rng(seed);
    const std::int64_t n = cs.N * cs.C;
    const NormRef ref{rms, cs.N, cs.C};
    const auto x = test::to_storage<T>(test::random_normal(rng, n, 0.5, 1.5));
    const auto w = test::to_storage<T>(test::random_normal(rng, cs.C, 1.0, 0.5));
    const auto b = bias ? test::to_storage<T>(test::random_normal(rng, cs.C)) : std::vector<T>{};
    Vec xs = test::as_seen(x), ws = test::as_seen(w), bs = test::as_seen(b);

    // Forward, from NaN-poisoned outputs.
    auto out = test::nan_filled<T>(n);
    std::vector<float> mean(static_cast<std::size_t>(cs.N), NAN),
        rstd(static_cast<std::size_t>(cs.N), NAN);
    if (rms) {
        cpu::rmsnorm_forward<T>({out.data(), rstd.data(), x.data(), w.data(), cs.N, cs.C});
    } else {
        cpu::layernorm_forward<T>({out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                   bias ? b.data() : nullptr, cs.N, cs.C});
    }
    Vec ref_mean, ref_rstd;
    const Vec ref_out = ref.forward(xs, ws, bs, &ref_mean, &ref_rstd);
    test::expect_close("out", test::as_seen(out), ref_out, test::tolerance<T>());
    test::expect_close("rstd", floats_as_double(rstd), ref_rstd, test::tolerance<float>());
    if (!rms)
        test::expect_close("mean", floats_as_double(mean), ref_mean, test::tolerance<float>());

    // Backward, accumulating into pre-filled gradients.
    const auto g = test::to_storage<T>(test::random_normal(rng, n));
    const Vec gs = test::as_seen(g);
    auto dx = test::to_storage<T>(test::random_normal(rng, n));
    auto dw = test::to_storage<T>(test::random_normal(rng, cs.C));
    auto db = bias ? test::to_storage<T>(test::random_normal(rng, cs.C)) : std::vector<T>{};
    const Vec dx0 = test::as_seen(dx), dw0 = test::as_seen(dw), db0 = test::as_seen(db);
    if (rms) {
        cpu::rmsnorm_backward<T>(
            {dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), cs.N, cs.C});
    } else {
        cpu::layernorm_backward<T>({dx.data(), dw.data(), bias ? db.data() : nullptr, g.data(),
                                    x.data(), w.data(), mean.data(), rstd.data(), cs.N, cs.C});
    }
    Vec ref_dx, ref_dw, ref_db;
    ref.backward(ref_dx, ref_dw, ref_db, gs, xs, ws);
    auto loss = [&] { return test::dot(ref.forward(xs, ws, bs), gs); };
    const auto tol = test::tolerance<T>();
    test::expect_gradient("dinp", loss, xs, test::as_seen(dx), dx0, ref_dx, tol, rng);
    const auto row_sum_tol = test::for_sum_of(tol, cs.N);  // parameter gradients sum over rows
    test::expect_gradient("dweight", loss, ws, test::as_seen(dw), dw0, ref_dw, row_sum_tol, rng);
    if (bias)
        test::expect_gradient("dbias", loss, bs, test::as_seen(db), db0, ref_db, row_sum_tol, rng);

    // Frozen parameters (null gradients) leave dinp the same.
    auto dx_frozen = test::to_storage<T>(dx0);
    if (rms) {
        cpu::rmsnorm_backward<T>(
            {dx_frozen.data(), nullptr, g.data(), x.data(), w.data(), rstd.data(), cs.N, cs.C});
    } else {
        cpu::layernorm_backward<T>({dx_frozen.data(), nullptr, nullptr, g.data(), x.data(),
                                    w.data(), mean.data(), rstd.data(), cs.N, cs.C});
    }
    test::expect_close("dinp without parameter gradients", test::as_seen(dx_frozen),
                       test::as_seen(dx), {0.0, 0.0});
}

// Odd sizes, one-element rows, and one large enough for the threaded paths.
const NormTestCase kNormTestCases[] = {{1, 1}, {3, 7}, {5, 33}, {17, 64}, {2, 1000}, {300, 129}};

TEST(Norm, LayerNormFloat) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : kNormTestCases) {
        check_norm<float>(c, false, true, seed);
        check_norm<float>(c, false, false, seed + 1);
    }
}

TEST(Norm, LayerNormBf16) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : kNormTestCases) {
        check_norm<bf16_t>(c, false, true, seed);
        check_norm<bf16_t>(c, false, false, seed + 1);
    }
}

TEST(Norm, LayerNormF16) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : {NormTestCase{5, 33}, NormTestCase{64, 96}})
        check_norm<f16_t>(c, false, true, seed);
}

TEST(Norm, RmsNormFloat) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : kNormTestCases)
        check_norm<float>(c, true, false, seed);
}

TEST(Norm, RmsNormBf16) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : kNormTestCases)
        check_norm<bf16_t>(c, true, false, seed);
}

TEST(Norm, RmsNormF16) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : {NormTestCase{5, 33}, NormTestCase{64, 96}})
        check_norm<f16_t>(c, true, false, seed);
}

// The residual add fused with the layernorm: x = a + b rounded, out = layernorm(x), every output
// the bits of residual_forward then layernorm_forward (the engine swaps one for the other), x and
// out near the double-precision sum and its norm; from NaN-poisoned outputs, odd shapes.
template <class T>
void check_residual_layernorm(const NormTestCase& cs, bool bias, unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << test::dtype_name<T>() << " N "
                                    << cs.N << " C " << cs.C << " bias " << bias);
    std::mt19937 rng(seed);
    const std::int64_t n = cs.N * cs.C;
    const auto a = test::to_storage<T>(test::random_normal(rng, n, 0.5, 1.5));
    const auto b = test::to_storage<T>(test::random_normal(rng, n, -0.2, 0.7));
    const auto w = test::to_storage<T>(test::random_normal(rng, cs.C, 1.0, 0.5));
    const auto bs = bias ? test::to_storage<T>(test::random_normal(rng, cs.C)) : std::vector<T>{};
    const T* bias_ptr = bias ? bs.data() : nullptr;
    auto x = test::nan_filled<T>(n), out = test::nan_filled<T>(n);
    std::vector<float> mean(static_cast<std::size_t>(cs.N), NAN), rstd(mean.size(), NAN);
    cpu::residual_layernorm_forward<T>({out.data(), mean.data(), rstd.data(), x.data(), a.data(),
                                        b.data(), w.data(), bias_ptr, cs.N, cs.C});

    auto x2 = test::nan_filled<T>(n), out2 = test::nan_filled<T>(n);
    std::vector<float> mean2(mean.size(), NAN), rstd2(mean.size(), NAN);
    cpu::residual_forward<T>({x2.data(), a.data(), b.data(), n});
    cpu::layernorm_forward<T>(
        {out2.data(), mean2.data(), rstd2.data(), x2.data(), w.data(), bias_ptr, cs.N, cs.C});
    const test::Tolerance exact{0.0, 0.0};
    test::expect_close("x, fused vs unfused", test::as_seen(x), test::as_seen(x2), exact);
    test::expect_close("out, fused vs unfused", test::as_seen(out), test::as_seen(out2), exact);
    test::expect_close("mean, fused vs unfused", floats_as_double(mean), floats_as_double(mean2),
                       exact);
    test::expect_close("rstd, fused vs unfused", floats_as_double(rstd), floats_as_double(rstd2),
                       exact);

    const Vec as = test::as_seen(a), bv = test::as_seen(b);
    Vec sum(as.size());
    for (std::size_t i = 0; i < sum.size(); ++i)
        sum[i] = as[i] + bv[i];
    test::expect_close("x", test::as_seen(x), sum, test::tolerance<T>());
    const NormRef ref{false, cs.N, cs.C};
    test::expect_close("out", test::as_seen(out),
                       ref.forward(test::as_seen(x), test::as_seen(w), test::as_seen(bs)),
                       test::tolerance<T>());
}

TEST(Norm, ResidualLayerNormIsTheAddThenTheNorm) {
    const unsigned seed = test::fresh_seed();
    for (const NormTestCase& c : kNormTestCases) {
        check_residual_layernorm<float>(c, true, seed);
        check_residual_layernorm<bf16_t>(c, true, seed + 1);
        check_residual_layernorm<bf16_t>(c, false, seed + 2);
    }
    check_residual_layernorm<f16_t>(NormTestCase{5, 33}, true, seed + 3);
}

// Its cost, counted by hand: the add's FLOP and the norm's 7 per element; a and b read with the
// parameters, x, out and the two statistics written, bf16 throughout.
TEST(Norm, ResidualLayerNormCost) {
    NormShape s;
    s.N = 6;
    s.C = 10;
    s.in = s.out = DType::bf16;
    const KernelCost c = residual_layernorm_forward_cost(s);
    EXPECT_EQ(c.flops, 8u * 60);
    EXPECT_EQ(c.bytes_read, 2u * 60 * 2 + 2u * 10 * 2);
    EXPECT_EQ(c.bytes_written, 2u * 60 * 2 + 2u * 6 * 4);
}

}  // namespace
}  // namespace napkin
