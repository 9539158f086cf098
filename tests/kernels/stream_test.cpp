// stream_copy copies exactly; its bandwidth probe returns a finite positive rate.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/stream.h"

TEST(StreamCopy, CopiesEveryElement) {
    for (std::int64_t n : {1, 7, 65537, 300001}) {
        std::mt19937 rng(static_cast<unsigned>(n));
        std::normal_distribution<float> nd;
        std::vector<float> inp(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n), NAN);
        for (float& v : inp) v = nd(rng);
        napkin::cpu::stream_copy(out.data(), inp.data(), n);
        EXPECT_EQ(inp, out) << "n=" << n;
    }
    EXPECT_EQ(napkin::stream_copy_cost(10).bytes(), 80u);
    EXPECT_EQ(napkin::stream_copy_cost(10).flops, 0u);
}

TEST(StreamCopy, BandwidthIsPositive) {
    const double bw = napkin::cpu::stream_copy_bandwidth(std::size_t{4} << 20, 2);
    EXPECT_TRUE(std::isfinite(bw));
    EXPECT_GT(bw, 1e8);  // any machine moves more than 100 MB/s
}
