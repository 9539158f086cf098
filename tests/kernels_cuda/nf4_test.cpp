// nf4_dequantize on the GPU against the CPU's (kernels/cpu/nf4.cpp), bit for bit: codes and state
// quantized on the host by cpu::nf4_quantize (the only quantizer), dequantized on both sides into
// every storage type, at sizes that end mid-byte, mid-block and mid-group, over several groups of
// 256 blocks; with the state packed right behind odd-sized codes in one allocation (its fp32 steps
// then unaligned); and with a NaN and an infinity poisoning their group.
#include "kernels/nf4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct Quantized {
    std::vector<std::uint8_t> codes, state;
};

Quantized quantize(const std::vector<float>& x) {
    const auto n = static_cast<std::int64_t>(x.size());
    Quantized q{std::vector<std::uint8_t>(nf4_code_bytes(n)),
                std::vector<std::uint8_t>(nf4_state_bytes(n))};
    cpu::nf4_quantize(q.codes.data(), q.state.data(), x.data(), n);
    return q;
}

// Blocks of very different magnitudes (2^-3 to 2^3), so the 8-bit absmax codes span their range.
std::vector<float> random_weights(std::mt19937& rng, std::int64_t n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        x[static_cast<std::size_t>(i)] =
            d(rng) * std::exp2(static_cast<float>((i / kNf4Block) % 7) - 3.0f);
    return x;
}

template <class T>
std::vector<T> dequantize_cpu(const Quantized& q, std::int64_t n) {
    std::vector<T> out(static_cast<std::size_t>(n));
    cpu::nf4_dequantize<T>({out.data(), q.codes.data(), q.state.data(), n});
    return out;
}

template <class T>
std::vector<T> dequantize_gpu(const Quantized& q, std::int64_t n) {
    DeviceBuffer<std::uint8_t> codes_d(q.codes), state_d(q.state);
    DeviceBuffer<T> out_d(static_cast<std::size_t>(n));
    out_d.poison();
    cuda::nf4_dequantize<T>({out_d.get(), codes_d.get(), state_d.get(), n}, {});
    return out_d.download();
}

template <class T>
class Nf4Cuda : public ::testing::Test {};
TYPED_TEST_SUITE(Nf4Cuda, StorageTypes);

TYPED_TEST(Nf4Cuda, DequantizeMatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::int64_t group = kNf4Block * kNf4ScaleBlock;  // elements per fp32 step
    for (const std::int64_t n :
         {std::int64_t{1}, std::int64_t{2}, std::int64_t{63}, std::int64_t{64}, std::int64_t{65},
          std::int64_t{1001}, group, 2 * group + 7, 3 * group + 129}) {
        SCOPED_TRACE(case_name<T>(n));
        const Quantized q = quantize(random_weights(rng, n));
        expect_same_bits("dequantized", dequantize_gpu<T>(q, n), dequantize_cpu<T>(q, n));
    }
}

// The engine may keep codes and state in one allocation: with n odd the state (and its fp32
// steps) then starts at an odd address, which the kernel must read byte-wise.
TYPED_TEST(Nf4Cuda, StatePackedBehindOddCodes) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::int64_t n = 2 * kNf4Block * kNf4ScaleBlock + 3 * kNf4Block + 9;
    ASSERT_EQ(nf4_code_bytes(n) % 2, 1u);
    const Quantized q = quantize(random_weights(rng, n));
    std::vector<std::uint8_t> packed = q.codes;
    packed.insert(packed.end(), q.state.begin(), q.state.end());
    DeviceBuffer<std::uint8_t> packed_d(packed);
    DeviceBuffer<T> out_d(static_cast<std::size_t>(n));
    out_d.poison();
    cuda::nf4_dequantize<T>({out_d.get(), packed_d.get(), packed_d.get() + q.codes.size(), n}, {});
    expect_same_bits("dequantized (unaligned)", out_d.download(), dequantize_cpu<T>(q, n));
}

TYPED_TEST(Nf4Cuda, NanOrInfinityPoisonsItsGroupOnly) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const std::int64_t group = kNf4Block * kNf4ScaleBlock;
    const std::int64_t n = 2 * group + 100;
    for (const float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        SCOPED_TRACE(std::to_string(bad));
        std::vector<float> x(static_cast<std::size_t>(n), 0.5f);
        x[static_cast<std::size_t>(group + 5)] = bad;  // the second group
        const Quantized q = quantize(x);
        const std::vector<T> got = dequantize_gpu<T>(q, n);
        expect_same_bits("dequantized", got, dequantize_cpu<T>(q, n));
        for (std::int64_t i = 0; i < n; ++i) {
            const float v = to_float(got[static_cast<std::size_t>(i)]);
            if (i >= group && i < 2 * group)
                ASSERT_TRUE(std::isnan(v)) << "element " << i;
            else
                ASSERT_NEAR(v, 0.5f, 1e-6f) << "element " << i;
        }
    }
}

TEST(Nf4CudaShape, NothingToDo) {
    NAPKIN_SKIP_WITHOUT_GPU();
    DeviceBuffer<bf16_t> out(1);
    DeviceBuffer<std::uint8_t> codes(1), state(1);
    out.poison();
    cuda::nf4_dequantize<bf16_t>({out.get(), codes.get(), state.get(), 0}, {});
    EXPECT_TRUE(std::isnan(to_float(out.download()[0]))) << "n = 0 writes nothing";
}

}  // namespace
}  // namespace napkin
