// dropout against its definition (kernels/dropout.h): each element kept exactly when the hash
// says so, scaled by 1 / (1 - p), in place too; the kept fraction near 1 - p; a site's seed
// giving other bits than its neighbours'; the backward the same mask's scaling of dout.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

template <class T>
class Dropout : public testing::Test {};
using StorageTypes = testing::Types<float, bf16_t, f16_t>;
TYPED_TEST_SUITE(Dropout, StorageTypes);

TYPED_TEST(Dropout, KeepsWhatTheHashSaysScaledAndInPlace) {
    using T = TypeParam;
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    for (const float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
        const std::int64_t n = 70001;  // past the parallel threshold, odd
        const auto inp = test::to_storage<T>(test::random_normal(rng, n));
        std::vector<T> out = test::nan_filled<T>(n);
        std::vector<std::uint8_t> mask(static_cast<std::size_t>(n), 7);
        const std::uint64_t site = rng();
        cpu::dropout_forward<T>({out.data(), mask.data(), inp.data(), n, p, site});
        const std::uint32_t threshold = dropout_threshold(p);
        const float scale = 1.0f / (1.0f - p);
        std::int64_t kept = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            const bool keep = dropout_keep(site, static_cast<std::uint64_t>(i), threshold);
            ASSERT_EQ(mask[k], keep ? 1 : 0) << i;
            ASSERT_EQ(to_float(out[k]),
                      keep ? to_float(from_float<T>(to_float(inp[k]) * scale)) : 0.0f)
                << i;
            kept += keep;
        }
        // Binomial: the kept fraction within 5 standard deviations of 1 - p.
        const double sd = std::sqrt(static_cast<double>(p) * (1 - p) / static_cast<double>(n));
        EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - p, 5 * sd + 1e-12)
            << p;
        // In place, and the backward: the same mask, the same scale.
        std::vector<T> same = inp;
        std::vector<std::uint8_t> mask2(mask.size());
        cpu::dropout_forward<T>({same.data(), mask2.data(), same.data(), n, p, site});
        ASSERT_EQ(mask2, mask);
        for (std::size_t k = 0; k < same.size(); ++k)
            ASSERT_EQ(to_float(same[k]), to_float(out[k])) << k;
        const auto dout = test::to_storage<T>(test::random_normal(rng, n));
        std::vector<T> dinp = test::nan_filled<T>(n);
        cpu::dropout_backward<T>({dinp.data(), dout.data(), mask.data(), n, p});
        for (std::size_t k = 0; k < dinp.size(); ++k) {
            ASSERT_EQ(to_float(dinp[k]),
                      mask[k] ? to_float(from_float<T>(to_float(dout[k]) * scale)) : 0.0f)
                << k;
        }
    }
}

TEST(DropoutSeeds, SitesDrawIndependentBits) {
    // Every (layer, site) of a micro-batch has its own seed, and other micro-batches others.
    std::set<std::uint64_t> seeds;
    for (std::uint64_t micro : {1ull, 2ull, 1ull << 40}) {
        for (int layer = -1; layer < 12; ++layer) {
            for (const DropoutSite s : {DropoutSite::embedding, DropoutSite::attention,
                                        DropoutSite::attention_residual, DropoutSite::mlp_residual})
                seeds.insert(dropout_site_seed(micro, layer, s));
        }
    }
    EXPECT_EQ(seeds.size(), 3u * 13 * 4);
    // Two sites' masks agree on about (1-p)^2 + p^2 of the elements, as independent bits do.
    const std::uint32_t t = dropout_threshold(0.5);
    const std::uint64_t a = dropout_site_seed(7, 0, DropoutSite::attention);
    const std::uint64_t b = dropout_site_seed(7, 0, DropoutSite::attention_residual);
    int agree = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i)
        agree += dropout_keep(a, static_cast<std::uint64_t>(i), t) ==
                 dropout_keep(b, static_cast<std::uint64_t>(i), t);
    EXPECT_NEAR(agree / static_cast<double>(n), 0.5, 0.01);
}

}  // namespace
}  // namespace napkin
