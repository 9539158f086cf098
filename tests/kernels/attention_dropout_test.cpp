// Attention with dropout on its probabilities (kernels/attention.h, AttentionDropout), naive and
// flash, against a double-precision reference written from the definitions with the same keep
// bits (kernels/dropout.h): naive's P, mask, Pd and out, flash's out (it keeps no mask and draws
// the bits again); dqkv of both against the reference's chain rule and its finite differences
// (the mask depends on indices only, so L(qkv) stays smooth).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/dropout.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct AttentionDropoutTestShape {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
    std::size_t qkv(std::int64_t b, std::int64_t t, int head) const {
        return static_cast<std::size_t>(((b * T + t) * (NH + 2ll * KVH) + head) * HD);
    }
    std::size_t o(std::int64_t b, std::int64_t t, int h) const {
        return static_cast<std::size_t>(((b * T + t) * NH + h) * HD);
    }
    std::size_t p(std::int64_t b, int h, std::int64_t i, std::int64_t j) const {
        return static_cast<std::size_t>(((b * NH + h) * T + i) * T + j);
    }
};

struct Reference {
    Vec out, p, pd;
    std::vector<std::uint8_t> mask;
};

// Forward from the definitions; with `grad`, also dqkv of L = sum(out * grad) into *dqkv.
Reference run(const AttentionDropoutTestShape& s, const Vec& x, float prob, std::uint64_t seed,
              const Vec* grad = nullptr, Vec* dqkv = nullptr) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.HD));
    const double keep_scale = 1.0 / (1.0 - static_cast<double>(prob));
    const std::uint32_t threshold = dropout_threshold(prob);
    const std::size_t np = static_cast<std::size_t>(s.B * s.NH * s.T * s.T);
    Reference r{Vec(static_cast<std::size_t>(s.B * s.T * s.NH * s.HD), 0.0), Vec(np, 0.0),
                Vec(np, 0.0), std::vector<std::uint8_t>(np, 0)};
    if (dqkv != nullptr) dqkv->assign(x.size(), 0.0);
    for (std::int64_t b = 0; b < s.B; ++b) {
        for (int h = 0; h < s.NH; ++h) {
            const int g = h / (s.NH / s.KVH);
            for (std::int64_t i = 0; i < s.T; ++i) {
                std::vector<double> sc(static_cast<std::size_t>(i + 1));
                double mx = -std::numeric_limits<double>::infinity();
                for (std::int64_t j = 0; j <= i; ++j) {
                    double d = 0;
                    for (std::int64_t e = 0; e < s.HD; ++e)
                        d += x[s.qkv(b, i, h) + static_cast<std::size_t>(e)] *
                             x[s.qkv(b, j, s.NH + g) + static_cast<std::size_t>(e)];
                    sc[static_cast<std::size_t>(j)] = d * scale;
                    mx = std::max(mx, d * scale);
                }
                double sum = 0;
                for (double v : sc)
                    sum += std::exp(v - mx);
                for (std::int64_t j = 0; j <= i; ++j) {
                    const std::size_t at = s.p(b, h, i, j);
                    r.p[at] = std::exp(sc[static_cast<std::size_t>(j)] - mx) / sum;
                    r.mask[at] = dropout_keep(seed, at, threshold) ? 1 : 0;
                    r.pd[at] = r.mask[at] ? r.p[at] * keep_scale : 0.0;
                    for (std::int64_t e = 0; e < s.HD; ++e)
                        r.out[s.o(b, i, h) + static_cast<std::size_t>(e)] +=
                            r.pd[at] *
                            x[s.qkv(b, j, s.NH + s.KVH + g) + static_cast<std::size_t>(e)];
                }
                if (grad == nullptr) continue;
                std::vector<double> dp(static_cast<std::size_t>(i + 1));
                double D = 0;
                for (std::int64_t j = 0; j <= i; ++j) {
                    double d = 0;
                    for (std::int64_t e = 0; e < s.HD; ++e)
                        d += (*grad)[s.o(b, i, h) + static_cast<std::size_t>(e)] *
                             x[s.qkv(b, j, s.NH + s.KVH + g) + static_cast<std::size_t>(e)];
                    const std::size_t at = s.p(b, h, i, j);
                    dp[static_cast<std::size_t>(j)] = r.mask[at] ? d * keep_scale : 0.0;
                    D += r.p[at] * dp[static_cast<std::size_t>(j)];
                }
                for (std::int64_t j = 0; j <= i; ++j) {
                    const std::size_t at = s.p(b, h, i, j);
                    const double ds = r.p[at] * (dp[static_cast<std::size_t>(j)] - D) * scale;
                    for (std::int64_t e = 0; e < s.HD; ++e) {
                        const auto ee = static_cast<std::size_t>(e);
                        (*dqkv)[s.qkv(b, i, h) + ee] += ds * x[s.qkv(b, j, s.NH + g) + ee];
                        (*dqkv)[s.qkv(b, j, s.NH + g) + ee] += ds * x[s.qkv(b, i, h) + ee];
                        (*dqkv)[s.qkv(b, j, s.NH + s.KVH + g) + ee] +=
                            r.pd[at] * (*grad)[s.o(b, i, h) + ee];
                    }
                }
            }
        }
    }
    return r;
}

template <class T>
void check(const AttentionDropoutTestShape& s, float prob, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << test::dtype_name<T>() << " seed " << seed << " B " << s.B << " T " << s.T
                 << " NH " << s.NH << " KVH " << s.KVH << " HD " << s.HD << " p " << prob);
    std::mt19937 rng(seed);
    const std::int64_t n_qkv = s.B * s.T * (s.NH + 2 * s.KVH) * s.HD;
    const auto qkv = test::to_storage<T>(test::random_normal(rng, n_qkv));
    const Vec xs = test::as_seen(qkv);
    const std::uint64_t site = rng();
    const std::int64_t np = s.B * s.NH * s.T * s.T;
    std::vector<T> out = test::nan_filled<T>(s.B * s.T * s.NH * s.HD), p = test::nan_filled<T>(np),
                   pd = test::nan_filled<T>(np);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(np), 9);
    AttentionDropout<T> d{prob, site, mask.data(), pd.data()};
    cpu::attention_naive_forward<T>(
        {out.data(), p.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.HD, &d});
    const Vec grad = test::random_normal(rng, static_cast<std::int64_t>(out.size()));
    Vec want_dqkv;
    const Reference ref = run(s, xs, prob, site, &grad, &want_dqkv);
    ASSERT_EQ(mask, ref.mask);
    const test::Tolerance tol = test::for_sum_of(test::tolerance<T>(), s.T);
    test::expect_close("P", test::as_seen(p), ref.p, tol);
    test::expect_close("Pd", test::as_seen(pd), ref.pd, test::Tolerance{tol.abs * 4, tol.rel});
    test::expect_close("out", test::as_seen(out), ref.out,
                       test::Tolerance{tol.abs * 4, tol.rel * 2});
    std::vector<T> fout = test::nan_filled<T>(static_cast<std::int64_t>(out.size()));
    std::vector<float> lse(static_cast<std::size_t>(s.B * s.NH * s.T));
    const AttentionDropout<T> fd{prob, site, nullptr, nullptr};
    cpu::attention_flash_forward<T>(
        {fout.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.HD, &fd});
    test::expect_close("flash out", test::as_seen(fout), ref.out,
                       test::Tolerance{tol.abs * 4, tol.rel * 2});
    if (!std::is_same_v<T, float>) return;  // the 16-bit gradients: attention_test.cpp's bounds

    const auto gT = test::to_storage<T>(grad);
    std::vector<T> dqkv(qkv.size(), from_float<T>(0.0f));
    std::vector<float> scratch(
        static_cast<std::size_t>(cpu::attention_naive_backward_scratch_floats(s.B, s.T, s.NH)));
    cpu::attention_naive_backward<T>({dqkv.data(), scratch.data(), gT.data(), qkv.data(), p.data(),
                                      s.B, s.T, s.NH, s.KVH, s.HD, &d});
    Vec xv = xs;
    auto loss = [&] { return test::dot(run(s, xv, prob, site).out, grad); };
    test::expect_gradient("dqkv", loss, xv, test::as_seen(dqkv), Vec(xv.size(), 0.0), want_dqkv,
                          test::for_sum_of(test::Tolerance{1e-4, 1e-4}, s.T * s.NH), rng);
    std::vector<T> fdqkv(qkv.size(), from_float<T>(0.0f));
    cpu::attention_flash_backward<T>({fdqkv.data(), gT.data(), fout.data(), qkv.data(), lse.data(),
                                      s.B, s.T, s.NH, s.KVH, s.HD, &fd});
    test::expect_gradient("flash dqkv", loss, xv, test::as_seen(fdqkv), Vec(xv.size(), 0.0),
                          want_dqkv, test::for_sum_of(test::Tolerance{1e-4, 1e-4}, s.T * s.NH),
                          rng);
}

TEST(AttentionDropout, NaiveAndFlashMatchTheReferenceAndItsGradient) {
    const unsigned seed = test::fresh_seed();
    // T = 70 spans two of flash's 64-key forward blocks and three 32-key backward blocks.
    const AttentionDropoutTestShape shapes[] = {
        {1, 1, 1, 1, 1}, {2, 7, 4, 2, 8}, {1, 13, 2, 1, 5}, {1, 70, 2, 2, 4}};
    unsigned k = 0;
    for (const AttentionDropoutTestShape& s : shapes) {
        for (const float p : {0.0f, 0.1f, 0.5f}) {
            check<float>(s, p, seed + k);
            check<bf16_t>(s, p, seed + k);
            check<f16_t>(s, p, seed + k++);
        }
    }
}

TEST(AttentionDropout, ZeroProbabilityIsNoDropout) {
    const AttentionDropoutTestShape s{2, 9, 2, 2, 4};
    std::mt19937 rng(5);
    const auto qkv =
        test::to_storage<float>(test::random_normal(rng, s.B * s.T * (s.NH + 2 * s.KVH) * s.HD));
    const std::int64_t np = s.B * s.NH * s.T * s.T;
    std::vector<float> a(static_cast<std::size_t>(s.B * s.T * s.NH * s.HD)),
        b = a, p(static_cast<std::size_t>(np)), pd = p;
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(np));
    AttentionDropout<float> d{0.0f, 123, mask.data(), pd.data()};
    cpu::attention_naive_forward<float>(
        {a.data(), p.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.HD});
    cpu::attention_naive_forward<float>(
        {b.data(), p.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.HD, &d});
    EXPECT_EQ(a, b);
    EXPECT_EQ(pd, p);
}

}  // namespace
}  // namespace napkin
