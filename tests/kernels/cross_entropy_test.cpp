// The fused chunked head + cross-entropy against a double-precision reference and finite
// differences, for several chunk sizes (the result must not depend on the chunking).
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

struct Problem {
    std::int64_t M, C, V, Vp;
    std::vector<double> x, w;  // as the kernel sees them
    std::vector<std::int32_t> targets;
};

// Mean loss over rows of logsumexp(x w^T) - logit[target], in double.
double reference_loss(const Problem& p, const std::vector<double>& x,
                      const std::vector<double>& w) {
    double total = 0;
    for (std::int64_t m = 0; m < p.M; ++m) {
        std::vector<double> logits(static_cast<std::size_t>(p.V));
        double maxv = -1e300;
        for (std::int64_t v = 0; v < p.V; ++v) {
            double s = 0;
            for (std::int64_t c = 0; c < p.C; ++c)
                s += x[static_cast<std::size_t>(m * p.C + c)] *
                     w[static_cast<std::size_t>(v * p.C + c)];
            logits[static_cast<std::size_t>(v)] = s;
            maxv = std::max(maxv, s);
        }
        double sum = 0;
        for (double l : logits)
            sum += std::exp(l - maxv);
        total += maxv + std::log(sum) -
                 logits[static_cast<std::size_t>(p.targets[static_cast<std::size_t>(m)])];
    }
    return total / static_cast<double>(p.M);
}

template <class T>
void check(std::int64_t M, std::int64_t C, std::int64_t V, std::int64_t Vp, std::int64_t chunk,
           unsigned seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " M " << M << " C " << C << " V " << V
                                    << " Vp " << Vp << " chunk " << chunk);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<T> x(static_cast<std::size_t>(M * C)), w(static_cast<std::size_t>(Vp * C));
    for (auto& v : x)
        v = from_float<T>(nd(rng));
    for (auto& v : w)
        v = from_float<T>(nd(rng) * 0.5f);
    Problem p{M, C, V, Vp, {}, {}, {}};
    for (auto v : x)
        p.x.push_back(to_float(v));
    for (auto v : w)
        p.w.push_back(to_float(v));
    for (std::int64_t m = 0; m < M; ++m)
        p.targets.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(V)));

    std::vector<float> losses(static_cast<std::size_t>(M));
    std::vector<T> dx(x.size(), from_float<T>(7.0f));  // overwritten
    std::vector<T> dw(w.size(), from_float<T>(1.0f));  // accumulated
    std::vector<float> scratch(static_cast<std::size_t>(
        cpu::head_cross_entropy_scratch_floats(chunk, C, Vp, !std::is_same_v<T, float>)));
    const float loss = cpu::head_cross_entropy<T>({losses.data(), dx.data(), dw.data(), x.data(),
                                                   w.data(), p.targets.data(), M, C, V, Vp, chunk,
                                                   1.0f / static_cast<float>(M), scratch.data()});
    const double tol = std::is_same_v<T, float> ? 1e-4 : 2e-2;
    const double ref = reference_loss(p, p.x, p.w);
    ASSERT_NEAR(loss, ref, tol * (1 + std::fabs(ref)));

    const double h = 1e-4;
    for (std::size_t i = 0; i < p.x.size(); ++i) {
        auto xp = p.x, xm = p.x;
        xp[i] += h;
        xm[i] -= h;
        const double fd = (reference_loss(p, xp, p.w) - reference_loss(p, xm, p.w)) / (2 * h);
        ASSERT_NEAR(to_float(dx[i]), fd, tol * (1 + std::fabs(fd))) << "dx " << i;
    }
    for (std::size_t i = 0; i < p.w.size(); ++i) {
        auto wp = p.w, wm = p.w;
        wp[i] += h;
        wm[i] -= h;
        const double fd = (reference_loss(p, p.x, wp) - reference_loss(p, p.x, wm)) / (2 * h);
        ASSERT_NEAR(to_float(dw[i]) - 1.0, fd, tol * (1 + std::fabs(fd)))
            << "dw " << i;  // padding rows: 0
    }
}

TEST(HeadCrossEntropy, MatchesReferenceForEveryChunking) {
    const unsigned seed = test::fresh_seed();
    for (std::int64_t chunk : {1, 3, 7, 100})
        check<float>(7, 5, 11, 16, chunk, seed);
    check<float>(1, 1, 2, 2, 1, seed + 1);
}

TEST(HeadCrossEntropy, SixteenBitStorage) {
    const unsigned seed = test::fresh_seed();
    check<bf16_t>(6, 4, 9, 16, 4, seed);
    check<f16_t>(6, 4, 9, 16, 2, seed + 1);
}

TEST(HeadCrossEntropy, UniformLogitsGiveLnV) {
    // Zero weights: every logit is 0 and the loss is exactly ln(V), the step-0 check of training.
    const std::int64_t M = 4, C = 3, V = 256, Vp = 256;
    std::vector<float> x(M * C, 1.0f), w(Vp * C, 0.0f), dx(M * C), losses(M);
    std::vector<std::int32_t> t = {0, 5, 255, 17};
    std::vector<float> scratch(
        static_cast<std::size_t>(cpu::head_cross_entropy_scratch_floats(2, C, Vp, false)));
    const float loss =
        cpu::head_cross_entropy<float>({losses.data(), dx.data(), nullptr, x.data(), w.data(),
                                        t.data(), M, C, V, Vp, 2, 0.25f, scratch.data()});
    EXPECT_NEAR(loss, std::log(256.0), 1e-6);
}

// The CUDA op's per-launch account at GPT-2's shape, counted here tensor by tensor in bytes.
TEST(HeadCrossEntropy, LaunchCostsCountEachTensorOncePerLaunch) {
    const std::int64_t R = 1024, V = 50257, Vp = 50304, C = 768;
    const std::uint64_t x = 1024ull * 768 * 2, w = 50304ull * 768 * 2, logits = 1024ull * 50304 * 4,
                        dlogits = 1024ull * 50304 * 2, dw32 = 50304ull * 768 * 4;
    const std::uint64_t gemm = 2ull * 1024 * 50304 * 768;  // 79.1 GFLOP
    for (const bool first : {true, false}) {
        const HeadCrossEntropyLaunchCosts c = head_cross_entropy_chunk_costs(R, V, Vp, C, first, 2);
        EXPECT_EQ(c.logits.flops, gemm);
        EXPECT_EQ(c.logits.bytes(), x + w + logits);
        EXPECT_EQ(c.rows.flops, 5ull * 1024 * 50257);
        EXPECT_EQ(c.rows.bytes(), 2 * logits + dlogits + 1024ull * 4 * 2);  // targets, losses
        EXPECT_EQ(c.dx.flops, gemm);
        EXPECT_EQ(c.dx.bytes(), dlogits + w + x);
        EXPECT_EQ(c.dw.flops, gemm);
        EXPECT_EQ(c.dw.bytes(), dlogits + x + (first ? 1 : 2) * dw32);
    }
    EXPECT_EQ(head_cross_entropy_chunk_costs(R, V, Vp, C, false, 3).rows.bytes_read,
              3 * logits + 1024ull * 4);
    const KernelCost acc = head_cross_entropy_accumulate_cost(Vp, C);
    EXPECT_EQ(acc.bytes(), w + dw32 + w);
}

TEST(HeadCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
    std::vector<float> x(2, 1.0f), w(4, 0.0f), dx(2), losses(2), scratch(8);
    std::vector<std::int32_t> t = {0, 2};  // V = 2
    EXPECT_THROW(
        cpu::head_cross_entropy<float>({losses.data(), dx.data(), nullptr, x.data(), w.data(),
                                        t.data(), 2, 1, 2, 4, 2, 0.5f, scratch.data()}),
        UsageError);
}

}  // namespace
}  // namespace napkin
