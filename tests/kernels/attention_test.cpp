// Causal self-attention, naive and flash, against a double-precision reference with fresh random
// inputs at fixed corner shapes and random ones (GQA, MQA, T off the tile sizes), for each
// storage type: forward (out, P, lse), backward against the reference's analytic gradient and
// central finite differences of L = sum(out * G), the two implementations against each other,
// accumulation into pre-filled gradients, causality and run-to-run determinism.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct AttentionTestCase {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;

    std::int64_t qkv_numel() const { return B * T * (NH + 2ll * KVH) * HD; }
    std::int64_t out_numel() const { return B * T * NH * HD; }
    std::int64_t lse_numel() const { return B * NH * T; }
    std::int64_t p_numel() const { return B * NH * T * T; }
};

std::ostream& operator<<(std::ostream& os, const AttentionTestCase& c) {
    return os << "B " << c.B << " T " << c.T << " NH " << c.NH << " KVH " << c.KVH << " HD "
              << c.HD;
}

// T = 1; T equal to, one past and one short of the tiles (64 keys forward, 32 backward); MHA,
// GQA, MQA; several forward tiles.
const AttentionTestCase kAttentionTestCases[] = {
    {1, 1, 1, 1, 8},   {1, 64, 2, 2, 16}, {2, 65, 4, 2, 8},  {1, 70, 4, 1, 64},
    {2, 33, 3, 3, 16}, {1, 31, 4, 4, 8},  {1, 130, 2, 1, 16}};

// B 1-2, T 1-70, NH 1-4, KVH in {1, NH, a divisor of NH}, HD in {8, 16, 64}.
AttentionTestCase random_case(std::mt19937& rng) {
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    AttentionTestCase c{};
    c.B = pick(1, 2);
    c.T = pick(1, 70);
    c.NH = pick(1, 4);
    std::vector<int> divisors;
    for (int d = 1; d <= c.NH; ++d) {
        if (c.NH % d == 0) divisors.push_back(d);
    }
    c.KVH = divisors[static_cast<std::size_t>(pick(0, static_cast<int>(divisors.size()) - 1))];
    const std::int64_t hds[] = {8, 16, 64};
    c.HD = hds[pick(0, 2)];
    return c;
}

// The double-precision reference, written out from the definitions.
struct AttentionRef {
    AttentionTestCase c;

    std::size_t q(std::int64_t b, std::int64_t t, int h) const { return at(b, t, h); }
    std::size_t k(std::int64_t b, std::int64_t t, int g) const { return at(b, t, c.NH + g); }
    std::size_t v(std::int64_t b, std::int64_t t, int g) const {
        return at(b, t, c.NH + c.KVH + g);
    }
    std::size_t o(std::int64_t b, std::int64_t t, int h) const {
        return static_cast<std::size_t>(((b * c.T + t) * c.NH + h) * c.HD);
    }
    std::size_t row(std::int64_t b, int h, std::int64_t t) const {
        return static_cast<std::size_t>((b * c.NH + h) * c.T + t);
    }
    int kv_head(int h) const { return h / (c.NH / c.KVH); }
    double scale() const { return 1.0 / std::sqrt(static_cast<double>(c.HD)); }

    double dot(const Vec& a, std::size_t ia, const Vec& b, std::size_t ib) const {
        double s = 0.0;
        for (std::int64_t d = 0; d < c.HD; ++d)
            s += a[ia + static_cast<std::size_t>(d)] * b[ib + static_cast<std::size_t>(d)];
        return s;
    }

    // out (B, T, NH*HD); optionally P (B, NH, T, T), zero above the diagonal, and lse (B, NH, T).
    Vec forward(const Vec& qkv, Vec* p = nullptr, Vec* lse = nullptr) const {
        Vec out(static_cast<std::size_t>(c.out_numel()), 0.0);
        if (p != nullptr) p->assign(static_cast<std::size_t>(c.p_numel()), 0.0);
        if (lse != nullptr) lse->assign(static_cast<std::size_t>(c.lse_numel()), 0.0);
        Vec s(static_cast<std::size_t>(c.T));
        for (std::int64_t b = 0; b < c.B; ++b) {
            for (int h = 0; h < c.NH; ++h) {
                const int g = kv_head(h);
                for (std::int64_t i = 0; i < c.T; ++i) {
                    double mx = -std::numeric_limits<double>::infinity();
                    for (std::int64_t j = 0; j <= i; ++j) {
                        s[static_cast<std::size_t>(j)] =
                            dot(qkv, q(b, i, h), qkv, k(b, j, g)) * scale();
                        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
                    }
                    double sum = 0.0;
                    for (std::int64_t j = 0; j <= i; ++j)
                        sum += std::exp(s[static_cast<std::size_t>(j)] - mx);
                    for (std::int64_t j = 0; j <= i; ++j) {
                        const double pij = std::exp(s[static_cast<std::size_t>(j)] - mx) / sum;
                        if (p != nullptr)
                            (*p)[row(b, h, i) * static_cast<std::size_t>(c.T) +
                                 static_cast<std::size_t>(j)] = pij;
                        for (std::int64_t d = 0; d < c.HD; ++d) {
                            out[o(b, i, h) + static_cast<std::size_t>(d)] +=
                                pij * qkv[v(b, j, g) + static_cast<std::size_t>(d)];
                        }
                    }
                    if (lse != nullptr) (*lse)[row(b, h, i)] = mx + std::log(sum);
                }
            }
        }
        return out;
    }

    // d/dqkv of L = sum(out * g) by the chain rule: dP_ij = g_i . v_j,
    // dS_ij = P_ij (dP_ij - sum_l P_il dP_il), dq_i = scale sum_j dS_ij k_j,
    // dk_j = scale sum_i dS_ij q_i, dv_j = sum_i P_ij g_i.
    Vec backward(const Vec& qkv, const Vec& grad) const {
        Vec p;
        forward(qkv, &p);
        Vec dqkv(qkv.size(), 0.0);
        Vec dp(static_cast<std::size_t>(c.T));
        for (std::int64_t b = 0; b < c.B; ++b) {
            for (int h = 0; h < c.NH; ++h) {
                const int g = kv_head(h);
                for (std::int64_t i = 0; i < c.T; ++i) {
                    const std::size_t prow = row(b, h, i) * static_cast<std::size_t>(c.T);
                    double D = 0.0;
                    for (std::int64_t j = 0; j <= i; ++j) {
                        dp[static_cast<std::size_t>(j)] = dot(grad, o(b, i, h), qkv, v(b, j, g));
                        D +=
                            p[prow + static_cast<std::size_t>(j)] * dp[static_cast<std::size_t>(j)];
                    }
                    for (std::int64_t j = 0; j <= i; ++j) {
                        const double pij = p[prow + static_cast<std::size_t>(j)];
                        const double ds = pij * (dp[static_cast<std::size_t>(j)] - D) * scale();
                        for (std::int64_t d = 0; d < c.HD; ++d) {
                            const auto dd = static_cast<std::size_t>(d);
                            dqkv[q(b, i, h) + dd] += ds * qkv[k(b, j, g) + dd];
                            dqkv[k(b, j, g) + dd] += ds * qkv[q(b, i, h) + dd];
                            dqkv[v(b, j, g) + dd] += pij * grad[o(b, i, h) + dd];
                        }
                    }
                }
            }
        }
        return dqkv;
    }

    // How far each element of dqkv may move, to first order in the unit roundoff u of a 16-bit
    // Elem (2^-8 bf16, 2^-11 f16), because a kernel reads back an intermediate it stored in
    // Elem: the flash kernel its out, through D_i = g_i . out_i with |dD_i| <= u sum_d
    // |g_id out_id|, which moves dS_ij = P_ij (dP_ij - D_i) by P_ij dD_i and so dq_i and dk_j
    // by sums of up to (NH/KVH) T such terms; the naive kernel its P, each P_ij by up to
    // u P_ij, which moves D_i, dS_ij and dv_j. Worst-case (every rounding the same sign), so an
    // error above it is a bug, not bad luck: rounding out alone moved an early key's dk by 0.05
    // against a gradient of 0.1 (seed 2236257742, B 2 T 65 NH 4 KVH 2 HD 8).
    struct StoredRounding {
        Vec naive, flash;
    };
    StoredRounding stored_rounding(const Vec& qkv, const Vec& grad, double u) const {
        Vec p;
        const Vec out = forward(qkv, &p);
        StoredRounding r{Vec(qkv.size(), 0.0), Vec(qkv.size(), 0.0)};
        Vec dp(static_cast<std::size_t>(c.T));
        for (std::int64_t b = 0; b < c.B; ++b) {
            for (int h = 0; h < c.NH; ++h) {
                const int g = kv_head(h);
                for (std::int64_t i = 0; i < c.T; ++i) {
                    const std::size_t prow = row(b, h, i) * static_cast<std::size_t>(c.T);
                    double D = 0.0, dD_naive = 0.0, dD_flash = 0.0;
                    for (std::int64_t j = 0; j <= i; ++j) {
                        const auto jj = static_cast<std::size_t>(j);
                        dp[jj] = dot(grad, o(b, i, h), qkv, v(b, j, g));
                        D += p[prow + jj] * dp[jj];
                        dD_naive += u * p[prow + jj] * std::fabs(dp[jj]);
                    }
                    for (std::int64_t d = 0; d < c.HD; ++d) {
                        const std::size_t od = o(b, i, h) + static_cast<std::size_t>(d);
                        dD_flash += u * std::fabs(grad[od] * out[od]);
                    }
                    for (std::int64_t j = 0; j <= i; ++j) {
                        const double pij = p[prow + static_cast<std::size_t>(j)];
                        const double dds_naive =
                            (u * pij * std::fabs(dp[static_cast<std::size_t>(j)] - D) +
                             pij * dD_naive) *
                            scale();
                        const double dds_flash = pij * dD_flash * scale();
                        for (std::int64_t d = 0; d < c.HD; ++d) {
                            const auto dd = static_cast<std::size_t>(d);
                            const double kd = std::fabs(qkv[k(b, j, g) + dd]);
                            const double qd = std::fabs(qkv[q(b, i, h) + dd]);
                            r.naive[q(b, i, h) + dd] += dds_naive * kd;
                            r.naive[k(b, j, g) + dd] += dds_naive * qd;
                            r.naive[v(b, j, g) + dd] += u * pij * std::fabs(grad[o(b, i, h) + dd]);
                            r.flash[q(b, i, h) + dd] += dds_flash * kd;
                            r.flash[k(b, j, g) + dd] += dds_flash * qd;
                        }
                    }
                }
            }
        }
        return r;
    }

private:
    std::size_t at(std::int64_t b, std::int64_t t, int head) const {
        return static_cast<std::size_t>(((b * c.T + t) * (c.NH + 2ll * c.KVH) + head) * c.HD);
    }
};

Vec floats_as_double(const std::vector<float>& v) {
    return Vec(v.begin(), v.end());
}

// Forward outputs of both implementations, from NaN-poisoned buffers.
template <class Elem>
struct Forward {
    std::vector<Elem> naive_out, p, flash_out;
    std::vector<float> lse;
};

template <class Elem>
Forward<Elem> run_forward(const AttentionTestCase& c, const std::vector<Elem>& qkv) {
    Forward<Elem> f;
    f.naive_out = test::nan_filled<Elem>(c.out_numel());
    f.p = test::nan_filled<Elem>(c.p_numel());
    f.flash_out = test::nan_filled<Elem>(c.out_numel());
    f.lse.assign(static_cast<std::size_t>(c.lse_numel()), std::numeric_limits<float>::quiet_NaN());
    cpu::attention_naive_forward<Elem>(
        {f.naive_out.data(), f.p.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD});
    cpu::attention_flash_forward<Elem>(
        {f.flash_out.data(), f.lse.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD});
    return f;
}

// dqkv after naive backward accumulated into a copy of `prefill`; scratch starts as NaN.
template <class Elem>
std::vector<Elem> run_naive_backward(const AttentionTestCase& c, std::vector<Elem> dqkv,
                                     const std::vector<Elem>& dout, const std::vector<Elem>& qkv,
                                     const Forward<Elem>& f) {
    std::vector<float> scratch(
        static_cast<std::size_t>(cpu::attention_naive_backward_scratch_floats(c.B, c.T, c.NH)),
        std::numeric_limits<float>::quiet_NaN());
    cpu::attention_naive_backward<Elem>({dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                         f.p.data(), c.B, c.T, c.NH, c.KVH, c.HD});
    return dqkv;
}

template <class Elem>
std::vector<Elem> run_flash_backward(const AttentionTestCase& c, std::vector<Elem> dqkv,
                                     const std::vector<Elem>& dout, const std::vector<Elem>& qkv,
                                     const Forward<Elem>& f) {
    cpu::attention_flash_backward<Elem>({dqkv.data(), dout.data(), f.flash_out.data(), qkv.data(),
                                         f.lse.data(), c.B, c.T, c.NH, c.KVH, c.HD});
    return dqkv;
}

template <class Elem>
void check_forward(const AttentionTestCase& c, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<Elem>() << " " << c);
    std::mt19937 rng(seed);
    const AttentionRef ref{c};
    const auto qkv = test::to_storage<Elem>(test::random_normal(rng, c.qkv_numel()));
    const Vec qkvs = test::as_seen(qkv);
    const Forward<Elem> f = run_forward(c, qkv);

    Vec ref_p, ref_lse;
    const Vec ref_out = ref.forward(qkvs, &ref_p, &ref_lse);
    const auto tol = test::tolerance<Elem>();
    test::expect_close("naive out", test::as_seen(f.naive_out), ref_out, tol);
    test::expect_close("naive P", test::as_seen(f.p), ref_p, tol);
    test::expect_close("flash out", test::as_seen(f.flash_out), ref_out, tol);
    // lse is fp32 from inputs the reference sees exactly: fp32 tolerance whatever Elem is.
    test::expect_close("flash lse", floats_as_double(f.lse), ref_lse, test::tolerance<float>());
    // Both round the same fp32-accurate value once, so at most one Elem rounding apart.
    test::expect_close("flash out vs naive out", test::as_seen(f.flash_out),
                       test::as_seen(f.naive_out), tol);

    // Above the diagonal P is exactly zero, not merely small.
    std::int64_t nonzero = 0;
    for (std::int64_t r = 0; r < c.B * c.NH * c.T; ++r) {
        for (std::int64_t j = r % c.T + 1; j < c.T; ++j)
            nonzero += to_float(f.p[static_cast<std::size_t>(r * c.T + j)]) != 0.0f;
    }
    EXPECT_EQ(nonzero, 0) << "P entries above the diagonal that are not zero";
}

// The unit roundoff of the storage type: half an ulp, relative.
template <class Elem>
double unit_roundoff() {
    if constexpr (std::is_same_v<Elem, bf16_t>) return 0x1p-8;
    if constexpr (std::is_same_v<Elem, f16_t>) return 0x1p-11;
    return 0.0;  // fp32 kernels keep P and out in fp32: for_sum_of covers them
}

// Tolerance for dqkv. fp32: dk and dv sum over up to NH/KVH * T query rows. 16-bit: twice one
// Elem tolerance (bf16 1e-2) for the final rounding and the fp32 work before it; the error the
// kept P (naive) or out (flash) brings, which grows with the sums over T, is each element's own
// bound from AttentionRef::stored_rounding on top.
template <class Elem>
test::Tolerance gradient_tolerance(const AttentionTestCase& c) {
    test::Tolerance tol = test::tolerance<Elem>();
    if constexpr (!std::is_same_v<Elem, float>) tol = {2.0 * tol.abs, 2.0 * tol.rel};
    return test::for_sum_of(tol, (c.NH / c.KVH) * c.T);
}

template <class Elem>
void check_backward(const AttentionTestCase& c, unsigned seed, std::size_t fd_samples = 48) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<Elem>() << " " << c);
    std::mt19937 rng(seed);
    const AttentionRef ref{c};
    const auto qkv = test::to_storage<Elem>(test::random_normal(rng, c.qkv_numel()));
    const auto dout = test::to_storage<Elem>(test::random_normal(rng, c.out_numel()));  // G
    const auto prefill = test::to_storage<Elem>(test::random_normal(rng, c.qkv_numel()));
    Vec qkvs = test::as_seen(qkv);
    const Vec gs = test::as_seen(dout), prefill_s = test::as_seen(prefill);
    const Forward<Elem> f = run_forward(c, qkv);

    const auto naive = run_naive_backward(c, prefill, dout, qkv, f);
    const auto flash = run_flash_backward(c, prefill, dout, qkv, f);
    const Vec ref_d = ref.backward(qkvs, gs);
    auto loss = [&] { return test::dot(ref.forward(qkvs), gs); };
    const auto tol = gradient_tolerance<Elem>(c);
    const auto stored = ref.stored_rounding(qkvs, gs, unit_roundoff<Elem>());
    test::expect_gradient("naive dqkv", loss, qkvs, test::as_seen(naive), prefill_s, ref_d, tol,
                          rng, fd_samples, &stored.naive);
    test::expect_gradient("flash dqkv", loss, qkvs, test::as_seen(flash), prefill_s, ref_d, tol,
                          rng, fd_samples, &stored.flash);

    // The two implementations from zeroed gradients agree with each other: each is within its
    // bound of the reference, so within the sum of the bounds of the other.
    const std::vector<Elem> zeros(static_cast<std::size_t>(c.qkv_numel()), from_float<Elem>(0.0f));
    const Vec both = test::plus(stored.naive, stored.flash);
    test::expect_close("flash dqkv vs naive dqkv",
                       test::as_seen(run_flash_backward(c, zeros, dout, qkv, f)),
                       test::as_seen(run_naive_backward(c, zeros, dout, qkv, f)),
                       {2.0 * tol.abs, 2.0 * tol.rel}, &both);
}

TEST(Attention, ForwardFloat) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_forward<float>(c, seed);
    for (int n = 0; n < 12; ++n)
        check_forward<float>(random_case(shapes), seed + 1 + static_cast<unsigned>(n));
}

TEST(Attention, ForwardBf16) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_forward<bf16_t>(c, seed);
    for (int n = 0; n < 12; ++n)
        check_forward<bf16_t>(random_case(shapes), seed + 1 + static_cast<unsigned>(n));
}

TEST(Attention, ForwardF16) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (int n = 0; n < 6; ++n)
        check_forward<f16_t>(random_case(shapes), seed + static_cast<unsigned>(n));
}

TEST(Attention, BackwardFloat) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_backward<float>(c, seed);
    for (int n = 0; n < 8; ++n)
        check_backward<float>(random_case(shapes), seed + 1 + static_cast<unsigned>(n));
}

TEST(Attention, BackwardBf16) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_backward<bf16_t>(c, seed);
    for (int n = 0; n < 8; ++n)
        check_backward<bf16_t>(random_case(shapes), seed + 1 + static_cast<unsigned>(n));
}

TEST(Attention, BackwardF16) {
    const unsigned seed = test::fresh_seed();
    std::mt19937 shapes(seed);
    for (int n = 0; n < 6; ++n)
        check_backward<f16_t>(random_case(shapes), seed + static_cast<unsigned>(n));
}

// Finite differences at every element of qkv (q, k and v of every head) for small GQA and MHA
// shapes that still span more than one backward key block.
TEST(Attention, BackwardEveryElementFiniteDifferences) {
    const unsigned seed = test::fresh_seed();
    for (const AttentionTestCase& c :
         {AttentionTestCase{1, 5, 4, 2, 8}, AttentionTestCase{2, 3, 2, 2, 8},
          AttentionTestCase{1, 35, 2, 1, 8}}) {
        check_backward<float>(c, seed, static_cast<std::size_t>(c.qkv_numel()));
    }
}

// dqkv is accumulated, not overwritten: a second call on the same buffer adds the same fp32
// gradient once more, so from zero the result is exactly twice the first (float storage).
TEST(Attention, BackwardAccumulates) {
    const unsigned seed = test::fresh_seed();
    const AttentionTestCase c{2, 37, 4, 2, 16};
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << c);
    std::mt19937 rng(seed);
    const auto qkv = test::to_storage<float>(test::random_normal(rng, c.qkv_numel()));
    const auto dout = test::to_storage<float>(test::random_normal(rng, c.out_numel()));
    const Forward<float> f = run_forward(c, qkv);
    const std::vector<float> zeros(static_cast<std::size_t>(c.qkv_numel()), 0.0f);
    const auto naive_once = run_naive_backward(c, zeros, dout, qkv, f);
    const auto flash_once = run_flash_backward(c, zeros, dout, qkv, f);
    Vec naive_twice = floats_as_double(run_naive_backward(c, naive_once, dout, qkv, f));
    Vec flash_twice = floats_as_double(run_flash_backward(c, flash_once, dout, qkv, f));
    for (double& x : naive_twice)
        x /= 2.0;
    for (double& x : flash_twice)
        x /= 2.0;
    test::expect_close("naive twice / 2", naive_twice, floats_as_double(naive_once), {0.0, 0.0});
    test::expect_close("flash twice / 2", flash_twice, floats_as_double(flash_once), {0.0, 0.0});
}

// Changing token t0's keys and values leaves every earlier query's out, P row and lse exactly
// as they were, and does change out at t0 itself (so the check can fail).
template <class Elem>
void check_causal(const AttentionTestCase& c, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<Elem>() << " " << c);
    std::mt19937 rng(seed);
    const AttentionRef ref{c};
    auto qkv = test::to_storage<Elem>(test::random_normal(rng, c.qkv_numel()));
    const Forward<Elem> before = run_forward(c, qkv);
    const std::int64_t t0 = std::uniform_int_distribution<std::int64_t>(1, c.T - 1)(rng);
    for (std::int64_t b = 0; b < c.B; ++b) {
        for (int g = 0; g < c.KVH; ++g) {
            for (std::int64_t d = 0; d < c.HD; ++d) {
                auto& kx = qkv[ref.k(b, t0, g) + static_cast<std::size_t>(d)];
                auto& vx = qkv[ref.v(b, t0, g) + static_cast<std::size_t>(d)];
                kx = from_float<Elem>(to_float(kx) + 3.0f);
                vx = from_float<Elem>(to_float(vx) - 2.0f);
            }
        }
    }
    const Forward<Elem> after = run_forward(c, qkv);
    std::int64_t changed_early = 0, changed_at_t0 = 0;
    auto differ = [](Elem a, Elem b) { return !(to_float(a) == to_float(b)); };
    for (std::int64_t b = 0; b < c.B; ++b) {
        for (int h = 0; h < c.NH; ++h) {
            for (std::int64_t t = 0; t <= t0; ++t) {
                std::int64_t changed = 0;
                for (std::int64_t d = 0; d < c.HD; ++d) {
                    const std::size_t i = ref.o(b, t, h) + static_cast<std::size_t>(d);
                    changed += differ(before.naive_out[i], after.naive_out[i]);
                    changed += differ(before.flash_out[i], after.flash_out[i]);
                }
                for (std::int64_t j = 0; j < c.T; ++j) {
                    const std::size_t i = ref.row(b, h, t) * static_cast<std::size_t>(c.T) +
                                          static_cast<std::size_t>(j);
                    if (t < t0) changed += differ(before.p[i], after.p[i]);
                }
                if (t < t0)
                    changed += !(before.lse[ref.row(b, h, t)] == after.lse[ref.row(b, h, t)]);
                (t < t0 ? changed_early : changed_at_t0) += changed;
            }
        }
    }
    EXPECT_EQ(changed_early, 0) << "outputs before t0 " << t0 << " changed";
    EXPECT_GT(changed_at_t0, 0) << "outputs at t0 " << t0 << " did not change";
}

TEST(Attention, Causal) {
    const unsigned seed = test::fresh_seed();
    for (const AttentionTestCase& c :
         {AttentionTestCase{2, 70, 4, 2, 16}, AttentionTestCase{1, 9, 3, 1, 8},
          AttentionTestCase{1, 2, 1, 1, 64}}) {
        check_causal<float>(c, seed);
        check_causal<bf16_t>(c, seed + 1);
    }
}

// Threads (the shape is large enough for the parallel paths) do not change a single bit.
TEST(Attention, Deterministic) {
    const unsigned seed = test::fresh_seed();
    const AttentionTestCase c{2, 70, 4, 1, 64};
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << c);
    std::mt19937 rng(seed);
    const auto qkv = test::to_storage<bf16_t>(test::random_normal(rng, c.qkv_numel()));
    const auto dout = test::to_storage<bf16_t>(test::random_normal(rng, c.out_numel()));
    const auto prefill = test::to_storage<bf16_t>(test::random_normal(rng, c.qkv_numel()));
    const Forward<bf16_t> f1 = run_forward(c, qkv), f2 = run_forward(c, qkv);
    const test::Tolerance exact{0.0, 0.0};
    test::expect_close("naive out", test::as_seen(f1.naive_out), test::as_seen(f2.naive_out),
                       exact);
    test::expect_close("P", test::as_seen(f1.p), test::as_seen(f2.p), exact);
    test::expect_close("flash out", test::as_seen(f1.flash_out), test::as_seen(f2.flash_out),
                       exact);
    test::expect_close("lse", floats_as_double(f1.lse), floats_as_double(f2.lse), exact);
    test::expect_close("naive dqkv", test::as_seen(run_naive_backward(c, prefill, dout, qkv, f1)),
                       test::as_seen(run_naive_backward(c, prefill, dout, qkv, f1)), exact);
    test::expect_close("flash dqkv", test::as_seen(run_flash_backward(c, prefill, dout, qkv, f1)),
                       test::as_seen(run_flash_backward(c, prefill, dout, qkv, f1)), exact);
}

TEST(Attention, RejectsBadShapes) {
    std::vector<float> buf(4096), lse(64);
    EXPECT_THROW(
        cpu::attention_flash_forward<float>({buf.data(), lse.data(), buf.data(), 1, 1, 4, 3, 8}),
        InternalError);
    EXPECT_THROW(cpu::attention_naive_forward<float>({buf.data(), buf.data(), buf.data(), 1, 1, 1,
                                                      1, cpu::kAttentionMaxHeadDim + 1}),
                 InternalError);
    EXPECT_THROW(cpu::attention_flash_backward<float>(
                     {buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), 1, 1, 2, 0, 8}),
                 InternalError);
    EXPECT_THROW(cpu::attention_naive_backward<float>(
                     {buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 1, -1, 1, 1, 8}),
                 InternalError);
}

}  // namespace
}  // namespace napkin
