// lora against a double-precision reference with fresh random inputs, for each storage type: one
// adapter, a fused qkv's three (unequal under GQA) and swiglu's two; the backward against the
// reference's analytic gradients and central finite differences of L = sum(out * g).
#include "kernels/lora.h"

#include <gtest/gtest.h>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct LoraTestCase {
    std::int64_t M, N, K, r;
    int parts;
    std::int64_t n_first;
};

LoraShape shape_of(const LoraTestCase& c) {
    LoraShape s;
    s.M = c.M;
    s.N = c.N;
    s.K = c.K;
    s.r = c.r;
    s.parts = c.parts;
    s.n_first = c.n_first;
    return s;
}

// h (M, PR) = x @ a^T; out = out0 + scale * h_p @ b_p^T.
struct Forward {
    Vec h, out;
};
Forward reference_forward(const Vec& x, const Vec& a, const Vec& b, const Vec& out0,
                          const LoraShape& s, double scale) {
    const std::int64_t PR = s.parts * s.r;
    Forward f{Vec(static_cast<std::size_t>(s.M * PR)), out0};
    for (std::int64_t m = 0; m < s.M; ++m) {
        for (std::int64_t j = 0; j < PR; ++j) {
            double acc = 0;
            for (std::int64_t k = 0; k < s.K; ++k)
                acc += x[static_cast<std::size_t>(m * s.K + k)] *
                       a[static_cast<std::size_t>(j * s.K + k)];
            f.h[static_cast<std::size_t>(m * PR + j)] = acc;
        }
    }
    for (int p = 0; p < s.parts; ++p) {
        const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
        for (std::int64_t m = 0; m < s.M; ++m) {
            for (std::int64_t n = off; n < off + rows; ++n) {
                double acc = 0;
                for (std::int64_t q = 0; q < s.r; ++q)
                    acc += f.h[static_cast<std::size_t>(m * PR + p * s.r + q)] *
                           b[static_cast<std::size_t>(n * s.r + q)];
                f.out[static_cast<std::size_t>(m * s.N + n)] += scale * acc;
            }
        }
    }
    return f;
}

// Analytic gradients of L = sum(out * g): dh, db, da, dinp.
struct Backward {
    Vec dh, db, da, dinp;
};
Backward reference_backward(const Vec& x, const Vec& a, const Vec& b, const Vec& h, const Vec& g,
                            const LoraShape& s, double scale) {
    const std::int64_t PR = s.parts * s.r;
    Backward d{Vec(static_cast<std::size_t>(s.M * PR)), Vec(b.size()), Vec(a.size()),
               Vec(x.size())};
    for (int p = 0; p < s.parts; ++p) {
        const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
        for (std::int64_t m = 0; m < s.M; ++m) {
            for (std::int64_t n = off; n < off + rows; ++n) {
                const double gv = scale * g[static_cast<std::size_t>(m * s.N + n)];
                for (std::int64_t q = 0; q < s.r; ++q) {
                    const std::size_t hi = static_cast<std::size_t>(m * PR + p * s.r + q);
                    d.dh[hi] += gv * b[static_cast<std::size_t>(n * s.r + q)];
                    d.db[static_cast<std::size_t>(n * s.r + q)] += gv * h[hi];
                }
            }
        }
    }
    for (std::int64_t m = 0; m < s.M; ++m) {
        for (std::int64_t j = 0; j < PR; ++j) {
            const double dh = d.dh[static_cast<std::size_t>(m * PR + j)];
            for (std::int64_t k = 0; k < s.K; ++k) {
                d.da[static_cast<std::size_t>(j * s.K + k)] +=
                    dh * x[static_cast<std::size_t>(m * s.K + k)];
                d.dinp[static_cast<std::size_t>(m * s.K + k)] +=
                    dh * a[static_cast<std::size_t>(j * s.K + k)];
            }
        }
    }
    return d;
}

Vec abs_of(const Vec& v) {
    Vec out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = std::fabs(v[i]);
    return out;
}

Vec scaled(const Vec& v, double f) {
    Vec out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = v[i] * f;
    return out;
}

// Relative error of one rounding into T (twice half an ulp, for headroom).
template <class T>
double rounding_of() {
    if constexpr (std::is_same_v<T, bf16_t>) return 0x1p-8;
    if constexpr (std::is_same_v<T, f16_t>) return 0x1p-11;
    return 0.0;
}

template <class T>
void check_case(const LoraTestCase& c, unsigned seed) {
    SCOPED_TRACE(testing::Message() << test::dtype_name<T>() << " seed " << seed << " M " << c.M
                                    << " N " << c.N << " K " << c.K << " r " << c.r << " parts "
                                    << c.parts << " n_first " << c.n_first);
    std::mt19937 rng(seed);
    const LoraShape s = shape_of(c);
    const std::int64_t PR = s.parts * s.r;
    const double scale = 2.0 / static_cast<double>(s.r);  // alpha 2
    const auto x = test::to_storage<T>(test::random_normal(rng, s.M * s.K));
    const auto a = test::to_storage<T>(test::random_normal(rng, PR * s.K, 0.0, 0.5));
    const auto b = test::to_storage<T>(test::random_normal(rng, s.N * s.r, 0.0, 0.5));
    const auto out0 = test::to_storage<T>(test::random_normal(rng, s.M * s.N));
    const Vec xs = test::as_seen(x), as = test::as_seen(a), bs = test::as_seen(b);
    const bool wide16 = !std::is_same_v<T, float>;
    std::vector<float> scratch(static_cast<std::size_t>(cpu::lora_scratch_floats(s, wide16)) + 1);

    std::vector<T> out = out0, h = test::nan_filled<T>(s.M * PR);
    cpu::lora_forward<T>({out.data(), h.data(), x.data(), a.data(), b.data(), s,
                          static_cast<float>(scale), scratch.data()});
    const Forward ref = reference_forward(xs, as, bs, test::as_seen(out0), s, scale);
    const test::Tolerance tol = test::for_sum_of(test::tolerance<T>(), s.K + s.r);
    // The kernel rounds h (and in the backward dh) into T before the next product reads it: each
    // element's bound widens by that rounding times the sum of the magnitudes it meets, which
    // the reference run on |inputs| gives.
    const double eps = rounding_of<T>();
    const Vec zeros(out0.size(), 0.0);
    const Forward mag = reference_forward(abs_of(xs), abs_of(as), abs_of(bs), zeros, s, scale);
    const Vec out_slack = scaled(mag.out, eps);
    test::expect_close("h", test::as_seen(h), ref.h, tol);
    test::expect_close("out", test::as_seen(out), ref.out, tol, &out_slack);

    // Backward into pre-filled gradients (they accumulate); dh is overwritten.
    const auto g = test::to_storage<T>(test::random_normal(rng, s.M * s.N));
    const Vec gs = test::as_seen(g), hs = test::as_seen(h);
    const auto da0 = test::to_storage<T>(test::random_normal(rng, PR * s.K));
    const auto db0 = test::to_storage<T>(test::random_normal(rng, s.N * s.r));
    const auto dx0 = test::to_storage<T>(test::random_normal(rng, s.M * s.K));
    std::vector<T> da = da0, db = db0, dx = dx0, dh = test::nan_filled<T>(s.M * PR);
    cpu::lora_backward<T>({dx.data(), da.data(), db.data(), dh.data(), g.data(), x.data(), h.data(),
                           a.data(), b.data(), s, static_cast<float>(scale), scratch.data()});
    const Backward d = reference_backward(xs, as, bs, hs, gs, s, scale);
    const test::Tolerance btol = test::for_sum_of(test::tolerance<T>(), s.M + s.N + PR);
    test::expect_close("dh", test::as_seen(dh), d.dh, btol);

    // Finite differences of the double reference over its inputs (x, a, b), L = sum(out * g).
    Vec xv = xs, av = as, bv = bs;
    auto loss = [&] { return test::dot(reference_forward(xv, av, bv, zeros, s, scale).out, gs); };
    // The reference's gradient at the exact h (the kernel's db reads h as stored: the difference
    // is one rounding of h, inside the tolerance).
    const Backward exact = reference_backward(xs, as, bs, ref.h, gs, s, scale);
    const Backward bmag =
        reference_backward(abs_of(xs), abs_of(as), abs_of(bs), mag.h, abs_of(gs), s, scale);
    const Vec db_slack = scaled(bmag.db, eps), da_slack = scaled(bmag.da, eps),
              dx_slack = scaled(bmag.dinp, eps);
    test::expect_gradient("db", loss, bv, test::as_seen(db), test::as_seen(db0), exact.db, btol,
                          rng, 48, &db_slack);
    test::expect_gradient("da", loss, av, test::as_seen(da), test::as_seen(da0), exact.da, btol,
                          rng, 48, &da_slack);
    test::expect_gradient("dinp", loss, xv, test::as_seen(dx), test::as_seen(dx0), exact.dinp, btol,
                          rng, 48, &dx_slack);

    // Nothing upstream: dinp may be null, and the adapters' gradients are the same.
    std::vector<T> da2 = da0, db2 = db0;
    cpu::lora_backward<T>({nullptr, da2.data(), db2.data(), dh.data(), g.data(), x.data(), h.data(),
                           a.data(), b.data(), s, static_cast<float>(scale), scratch.data()});
    EXPECT_EQ(test::as_seen(da2), test::as_seen(da));
    EXPECT_EQ(test::as_seen(db2), test::as_seen(db));
}

template <class T>
class Lora : public testing::Test {};
using StorageTypes = testing::Types<float, bf16_t, f16_t>;
TYPED_TEST_SUITE(Lora, StorageTypes);

TYPED_TEST(Lora, MatchesReferenceAndFiniteDifferences) {
    const unsigned seed = test::fresh_seed();
    const LoraTestCase cases[] = {
        {1, 1, 1, 1, 1, 0},    // the smallest
        {7, 5, 9, 3, 1, 0},    // odd sizes, one adapter
        {6, 16, 8, 2, 3, 8},   // qkv under GQA: q 8 rows, k and v 4 each
        {5, 12, 7, 4, 3, 0},   // qkv with equal parts
        {9, 10, 6, 3, 2, 5},   // swiglu's gate | up
        {13, 4, 17, 8, 1, 0},  // rank above N
    };
    unsigned k = 0;
    for (const LoraTestCase& c : cases)
        check_case<TypeParam>(c, seed + k++);
}

TEST(Lora, RefusesPartsThatDoNotTileTheRows) {
    LoraShape s = shape_of({2, 10, 3, 2, 3, 5});  // 5 rows, then 5 left for two parts
    std::vector<float> out(20), h(12), inp(6), a(18), b(20), scratch(1);
    EXPECT_THROW(cpu::lora_forward<float>({out.data(), h.data(), inp.data(), a.data(), b.data(), s,
                                           1.0f, scratch.data()}),
                 std::exception);
    s.parts = 4;
    EXPECT_THROW(cpu::lora_forward<float>({out.data(), h.data(), inp.data(), a.data(), b.data(), s,
                                           1.0f, scratch.data()}),
                 std::exception);
}

TEST(LoraCost, CountsTheAdaptersOnce) {
    const LoraShape s = shape_of({6, 16, 8, 2, 3, 8});
    EXPECT_EQ(lora_params(s), 2 * (3 * 8 + 16));
    EXPECT_EQ(lora_part_rows(s, 0), 8);
    EXPECT_EQ(lora_part_rows(s, 1), 4);
    EXPECT_EQ(lora_part_offset(s, 2), 12);
    EXPECT_EQ(lora_forward_cost(s).flops, 2u * 6 * 2 * (3 * 8 + 16));
    EXPECT_EQ(lora_backward_input_cost(s).flops + lora_backward_weight_cost(s).flops,
              2 * lora_forward_cost(s).flops);
}

}  // namespace
}  // namespace napkin
