// dropout on the GPU against the CPU's (kernels/cpu/dropout.cpp), bit for bit: the mask byte
// for byte and every value's bits (a NaN's payload aside, which is the hardware's), forward and
// backward, out of place and in place, for every storage type, at sizes around the block (256
// threads) and warp boundaries and past a few hundred blocks; with NaN, infinities, the largest
// finite values (whose scaling overflows) and subnormals among the inputs; and the host-side
// refusals of p outside [0, 1).
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

void expect_same_mask(const std::vector<std::uint8_t>& gpu, const std::vector<std::uint8_t>& cpu) {
    ASSERT_EQ(gpu.size(), cpu.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        if (gpu[i] == cpu[i]) continue;
        if (bad++ < 5)
            ADD_FAILURE() << "mask element " << i << ": " << int{gpu[i]} << ", the CPU's "
                          << int{cpu[i]};
    }
    EXPECT_EQ(bad, 0u) << "mask: elements of " << gpu.size() << " differing";
}

template <class T>
T from_bits(std::uint32_t bits) {
    if constexpr (std::is_same_v<T, float>)
        return std::bit_cast<float>(bits);
    else
        return std::bit_cast<T>(static_cast<std::uint16_t>(bits));
}

// N(0, 1) values with the edge cases at the front (where n allows): NaN, +-inf, the largest
// finite value of T (it overflows when scaled), the smallest subnormal of T, -0.
template <class T>
std::vector<T> inputs(std::mt19937& rng, std::int64_t n) {
    std::vector<T> x = random_storage<T>(rng, n);
    constexpr bool f32 = std::is_same_v<T, float>, bf16 = std::is_same_v<T, bf16_t>;
    const T specials[] = {from_float<T>(std::numeric_limits<float>::quiet_NaN()),
                          from_float<T>(std::numeric_limits<float>::infinity()),
                          from_float<T>(-std::numeric_limits<float>::infinity()),
                          from_bits<T>(f32    ? 0x7f7fffffu
                                       : bf16 ? 0x7f7fu
                                              : 0x7bffu),
                          from_bits<T>(1),
                          from_float<T>(-0.0f)};
    for (std::size_t i = 0; i < std::size(specials) && i < x.size(); ++i)
        x[i] = specials[i];
    return x;
}

template <class T>
class DropoutCuda : public ::testing::Test {};
TYPED_TEST_SUITE(DropoutCuda, StorageTypes);

constexpr std::int64_t kSizes[] = {1, 6, 31, 32, 33, 255, 256, 257, 511, 513, 100003};
constexpr float kProbabilities[] = {0.0f, 0.1f, 0.5f, 0.9f};

TYPED_TEST(DropoutCuda, ForwardMatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const std::size_t offset : {0, 1})  // 1: off the 16-byte vectors
        for (const std::int64_t n : kSizes) {
            for (const float p : kProbabilities) {
                SCOPED_TRACE(case_name<T>(n) + " p " + std::to_string(p) + " offset " +
                             std::to_string(offset));
                std::uint64_t site = rng();
                site = site << 32 | rng();
                const std::vector<T> x = inputs<T>(rng, n);
                std::vector<T> out(x.size());
                std::vector<std::uint8_t> mask(x.size());
                cpu::dropout_forward<T>({out.data(), mask.data(), x.data(), n, p, site});

                DeviceBuffer<T> x_d(x, offset), out_d(x.size(), offset);
                DeviceBuffer<std::uint8_t> mask_d(x.size(), offset);
                out_d.poison();
                mask_d.poison();
                cuda::dropout_forward<T>({out_d.get(), mask_d.get(), x_d.get(), n, p, site}, {});
                expect_same_mask(mask_d.download(), mask);
                expect_same_bits("out", out_d.download(), out);
                expect_same_bits("inp (read only)", x_d.download(), x);

                // In place: out is inp.
                mask_d.poison();
                cuda::dropout_forward<T>({x_d.get(), mask_d.get(), x_d.get(), n, p, site}, {});
                expect_same_mask(mask_d.download(), mask);
                expect_same_bits("out in place", x_d.download(), out);
            }
        }
}

TYPED_TEST(DropoutCuda, BackwardMatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const std::size_t offset : {0, 1})  // 1: off the 16-byte vectors
        for (const std::int64_t n : kSizes) {
            for (const float p : kProbabilities) {
                SCOPED_TRACE(case_name<T>(n) + " p " + std::to_string(p) + " offset " +
                             std::to_string(offset));
                const std::uint64_t site = rng();
                std::vector<T> unused(static_cast<std::size_t>(n));
                std::vector<std::uint8_t> mask(unused.size());
                const std::vector<T> x = inputs<T>(rng, n);
                cpu::dropout_forward<T>({unused.data(), mask.data(), x.data(), n, p, site});
                const std::vector<T> dout = inputs<T>(rng, n);
                std::vector<T> dinp(dout.size());
                cpu::dropout_backward<T>({dinp.data(), dout.data(), mask.data(), n, p});

                DeviceBuffer<T> dout_d(dout, offset), dinp_d(dout.size(), offset);
                DeviceBuffer<std::uint8_t> mask_d(mask, offset);
                dinp_d.poison();
                cuda::dropout_backward<T>({dinp_d.get(), dout_d.get(), mask_d.get(), n, p}, {});
                expect_same_bits("dinp", dinp_d.download(), dinp);

                // In place: dinp is dout.
                cuda::dropout_backward<T>({dout_d.get(), dout_d.get(), mask_d.get(), n, p}, {});
                expect_same_bits("dinp in place", dout_d.download(), dinp);
            }
        }
}

// Precondition checks on the host: no device needed.
TYPED_TEST(DropoutCuda, RefusesProbabilitiesOutsideZeroToOne) {
    using T = TypeParam;
    for (const float p : {1.0f, -0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
        EXPECT_ANY_THROW(cuda::dropout_forward<T>({nullptr, nullptr, nullptr, 0, p, 1}, {})) << p;
        EXPECT_ANY_THROW(cuda::dropout_backward<T>({nullptr, nullptr, nullptr, 0, p}, {})) << p;
    }
    EXPECT_ANY_THROW(cuda::dropout_forward<T>({nullptr, nullptr, nullptr, -1, 0.1f, 1}, {}));
}

}  // namespace
}  // namespace napkin
