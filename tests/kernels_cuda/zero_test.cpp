// zero (many buffers set to zero in few launches): inside one device allocation poisoned with
// 0xff, spans at every offset modulo 16 and of sizes around the 16-byte stores (empty, 1..33
// bytes, large, more spans than one launch takes) are zeroed; every byte outside them keeps its
// poison, as the CPU's memset leaves the same host buffer.
#include "kernels/zero.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

TEST(ZeroCuda, ZeroesEachSpanAndNothingElse) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    constexpr std::size_t kBytes = 1 << 20;
    DeviceBuffer<std::uint8_t> dev(kBytes);
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        // Non-overlapping spans in order: a gap, then a span, from fresh random sizes.
        std::vector<std::pair<std::size_t, std::size_t>> at;  // offset, bytes
        std::size_t pos = 0;
        const int count = round == 2 ? 3 * kZeroSpansPerLaunch + 5 : 40;
        for (int i = 0; i < count; ++i) {
            pos += rng() % 40;
            const std::size_t bytes = i % 7 == 0   ? 0
                                      : i % 5 == 0 ? 1000 + rng() % 20000
                                                   : rng() % 34;
            if (pos + bytes > kBytes) break;
            at.emplace_back(pos, bytes);
            pos += bytes;
        }
        std::vector<std::uint8_t> host(kBytes, 0xff);
        std::vector<ZeroSpan> cpu_spans, gpu_spans;
        for (const auto& [off, bytes] : at) {
            cpu_spans.push_back(ZeroSpan{host.data() + off, bytes});
            gpu_spans.push_back(ZeroSpan{dev.get() + off, bytes});
        }
        cpu::zero(cpu_spans.data(), static_cast<int>(cpu_spans.size()));
        dev.poison();  // 0xff everywhere
        cuda::zero(gpu_spans.data(), static_cast<int>(gpu_spans.size()), nullptr);
        const std::vector<std::uint8_t> got = dev.download();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < kBytes; ++i) {
            if (got[i] != host[i] && bad++ < 5)
                ADD_FAILURE() << "byte " << i << ": " << int(got[i]) << ", the CPU's " << int(host[i]);
        }
        EXPECT_EQ(bad, 0u);
        std::size_t zeroed = 0;
        for (const auto& [off, bytes] : at) zeroed += bytes;
        EXPECT_GT(zeroed, 0u);
    }
}

TEST(ZeroCuda, NoSpansAndEmptySpansLaunchNothing) {
    NAPKIN_SKIP_WITHOUT_GPU();
    cuda::zero(nullptr, 0, nullptr);
    const ZeroSpan empty[2] = {{nullptr, 0}, {nullptr, 0}};
    cuda::zero(empty, 2, nullptr);
    EXPECT_EQ(zero_cost(empty, 2).bytes_written, 0u);
}

}  // namespace
}  // namespace napkin
