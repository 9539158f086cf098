// Token (+ position) embedding against a double-precision reference with fresh random inputs and
// repeated tokens, for each storage type; the scatter-add backward against the analytic gradient
// and central finite differences of L = sum(out * G), accumulating into pre-filled gradients;
// bitwise determinism across runs and thread counts; fp32 summation of repeats under bf16.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Vec;

struct EmbeddingTestCase {
    std::int64_t B, T, C, Vp;
};

std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::int64_t n, std::int64_t Vp) {
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(Vp - 1));
    std::vector<std::int32_t> t(static_cast<std::size_t>(n));
    for (auto& x : t)
        x = d(rng);
    return t;
}

// out (B, T, C) = wte[tokens] (+ wpe[t]); wpe empty means none.
Vec embedding_ref(const Vec& wte, const Vec& wpe, const std::vector<std::int32_t>& tokens,
                  const EmbeddingTestCase& c) {
    Vec out(static_cast<std::size_t>(c.B * c.T * c.C));
    for (std::int64_t p = 0; p < c.B * c.T; ++p) {
        for (std::int64_t k = 0; k < c.C; ++k) {
            double v = wte[static_cast<std::size_t>(tokens[static_cast<std::size_t>(p)] * c.C + k)];
            if (!wpe.empty()) v += wpe[static_cast<std::size_t>((p % c.T) * c.C + k)];
            out[static_cast<std::size_t>(p * c.C + k)] = v;
        }
    }
    return out;
}

template <class T>
void check_embedding(const EmbeddingTestCase& c, bool positions, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " " << test::dtype_name<T>() << " B " << c.B << " T " << c.T
                 << " C " << c.C << " Vp " << c.Vp << " positions " << positions);
    std::mt19937 rng(seed);
    const std::int64_t ctx = c.T + 3;  // rows past T stay untouched
    const std::int64_t n = c.B * c.T * c.C;
    const auto tokens = random_tokens(rng, c.B * c.T, c.Vp);
    const auto wte = test::to_storage<T>(test::random_normal(rng, c.Vp * c.C));
    const auto wpe =
        positions ? test::to_storage<T>(test::random_normal(rng, ctx * c.C)) : std::vector<T>{};
    Vec wte_s = test::as_seen(wte), wpe_s = test::as_seen(wpe);

    auto out = test::nan_filled<T>(n);
    cpu::embedding_forward<T>(
        {out.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr, c.B, c.T, c.C});
    test::expect_close("out", test::as_seen(out), embedding_ref(wte_s, wpe_s, tokens, c),
                       test::tolerance<T>());

    const auto g = test::to_storage<T>(test::random_normal(rng, n));
    const Vec gs = test::as_seen(g);
    auto dwte = test::to_storage<T>(test::random_normal(rng, c.Vp * c.C));
    auto dwpe =
        positions ? test::to_storage<T>(test::random_normal(rng, ctx * c.C)) : std::vector<T>{};
    const Vec dwte0 = test::as_seen(dwte), dwpe0 = test::as_seen(dwpe);
    cpu::embedding_backward<T>(
        {dwte.data(), positions ? dwpe.data() : nullptr, g.data(), tokens.data(), c.B, c.T, c.C});

    Vec ref_dwte(wte_s.size(), 0.0), ref_dwpe(wpe_s.size(), 0.0);
    for (std::int64_t p = 0; p < c.B * c.T; ++p) {
        for (std::int64_t k = 0; k < c.C; ++k) {
            const double gv = gs[static_cast<std::size_t>(p * c.C + k)];
            ref_dwte[static_cast<std::size_t>(tokens[static_cast<std::size_t>(p)] * c.C + k)] += gv;
            if (positions) ref_dwpe[static_cast<std::size_t>((p % c.T) * c.C + k)] += gv;
        }
    }
    auto loss = [&] { return test::dot(embedding_ref(wte_s, wpe_s, tokens, c), gs); };
    // Each row sums its token's (or position's) occurrences.
    const auto tol = test::for_sum_of(test::tolerance<T>(), c.B * c.T);
    test::expect_gradient("dwte", loss, wte_s, test::as_seen(dwte), dwte0, ref_dwte, tol, rng);
    if (positions)
        test::expect_gradient("dwpe", loss, wpe_s, test::as_seen(dwpe), dwpe0, ref_dwpe, tol, rng);
}

// Few vocabulary rows so tokens repeat; odd widths; the last is big enough for the threaded paths.
const EmbeddingTestCase kEmbeddingTestCases[] = {
    {1, 1, 1, 1}, {2, 5, 33, 7}, {3, 16, 64, 100}, {4, 64, 160, 50}, {2, 300, 70, 3}};

TEST(Embedding, Float) {
    const unsigned seed = test::fresh_seed();
    for (const EmbeddingTestCase& c : kEmbeddingTestCases) {
        check_embedding<float>(c, true, seed);
        check_embedding<float>(c, false, seed + 1);
    }
}

TEST(Embedding, Bf16) {
    const unsigned seed = test::fresh_seed();
    for (const EmbeddingTestCase& c : kEmbeddingTestCases) {
        check_embedding<bf16_t>(c, true, seed);
        check_embedding<bf16_t>(c, false, seed + 1);
    }
}

TEST(Embedding, F16) {
    const unsigned seed = test::fresh_seed();
    check_embedding<f16_t>(EmbeddingTestCase{2, 5, 33, 7}, true, seed);
    check_embedding<f16_t>(EmbeddingTestCase{4, 64, 160, 50}, true, seed + 1);
}

// The backward from the same inputs, run with one thread and with the default team, twice each.
template <class T>
void check_deterministic(unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << test::dtype_name<T>());
    std::mt19937 rng(seed);
    const EmbeddingTestCase c{8, 128, 96, 5};  // heavy repeats, well over the threading threshold
    const auto tokens = random_tokens(rng, c.B * c.T, c.Vp);
    const auto g = test::to_storage<T>(test::random_normal(rng, c.B * c.T * c.C));
    const auto dwte0 = test::to_storage<T>(test::random_normal(rng, c.Vp * c.C));
    const auto dwpe0 = test::to_storage<T>(test::random_normal(rng, c.T * c.C));
    auto run = [&] {
        auto dwte = dwte0;
        auto dwpe = dwpe0;
        cpu::embedding_backward<T>(
            {dwte.data(), dwpe.data(), g.data(), tokens.data(), c.B, c.T, c.C});
        dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
        return dwte;
    };
    const auto first = run();
    std::vector<std::vector<T>> others = {run()};
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    others.push_back(run());
    omp_set_num_threads(threads > 1 ? threads : 4);  // more than one thread even on one core
    others.push_back(run());
    omp_set_num_threads(threads);
#endif
    for (const auto& other : others) {
        EXPECT_EQ(std::memcmp(first.data(), other.data(), first.size() * sizeof(T)), 0);
    }
}

TEST(Embedding, BackwardIsDeterministic) {
    const unsigned seed = test::fresh_seed();
    check_deterministic<float>(seed);
    check_deterministic<bf16_t>(seed + 1);
}

// 2000 repeats of one token under bf16: summed in bf16 the row would stall near 4 (the ulp
// outgrows the increment); summed in fp32 and rounded once it lands on 2000 * 0.01.
TEST(Embedding, Bf16RepeatsSumInFp32) {
    const std::int64_t B = 4, T = 500, C = 3;
    const std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T), 1);
    const std::vector<bf16_t> g(static_cast<std::size_t>(B * T * C), from_float<bf16_t>(0.01f));
    std::vector<bf16_t> dwte(static_cast<std::size_t>(2 * C), from_float<bf16_t>(0.0f));
    cpu::embedding_backward<bf16_t>({dwte.data(), nullptr, g.data(), tokens.data(), B, T, C});
    const double want = static_cast<double>(B * T) * to_float(g[0]);
    for (std::int64_t k = 0; k < C; ++k) {
        EXPECT_EQ(to_float(dwte[static_cast<std::size_t>(k)]), 0.0f) << "row 0 untouched";
        EXPECT_NEAR(to_float(dwte[static_cast<std::size_t>(C + k)]), want, 0.01 * want) << "row 1";
    }
}

}  // namespace
}  // namespace napkin
