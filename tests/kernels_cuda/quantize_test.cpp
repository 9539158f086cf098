// quantize / dequantize on the GPU against the CPU's (kernels/cpu/quantize.cpp): the same codes
// and the same scale pair bit for bit, on random tensors of several sizes (one block, many, the
// atomic amax across blocks) and on the edge values (zeros, NaN, infinities, an amax whose scale
// overflows); and core/fp8.h's conversion against cuda_fp8.h's own (host) conversion on floats
// of every magnitude, an implementation independent of napkin's.
#include "kernels/quantize.h"

#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "core/fp8.h"
#include "tests/kernels_cuda/cuda_test_util.h"
#include "tests/kernels_cuda/fp8_codes.h"

namespace napkin {
namespace {

using namespace test;

template <class Q>
constexpr __nv_fp8_interpretation_t kind() {
    return std::is_same_v<Q, f8e4m3_t> ? __NV_E4M3 : __NV_E5M2;
}

template <class Q, class T>
void check(const std::vector<T>& x) {
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<Q> q(x.size());
    float scale[kFp8ScaleFloats];
    cpu::quantize<Q, T>({q.data(), scale, x.data(), n});
    std::vector<T> back(x.size());
    cpu::dequantize<T, Q>({back.data(), q.data(), scale, n});

    DeviceBuffer<T> x_d(x), back_d(x.size());
    DeviceBuffer<Q> q_d(x.size());
    DeviceBuffer<float> scale_d(kFp8ScaleFloats);
    q_d.poison();
    scale_d.poison();
    back_d.poison();
    cuda::quantize<Q, T>({q_d.get(), scale_d.get(), x_d.get(), n}, {});
    cuda::dequantize<T, Q>({back_d.get(), q_d.get(), scale_d.get(), n}, {});
    const std::vector<float> s = scale_d.download();
    EXPECT_EQ(std::bit_cast<std::uint32_t>(s[0]), std::bit_cast<std::uint32_t>(scale[0]))
        << "scale";
    EXPECT_EQ(std::bit_cast<std::uint32_t>(s[kFp8ScaleInv]),
              std::bit_cast<std::uint32_t>(scale[kFp8ScaleInv]))
        << "scale_inv";
    expect_same_codes(q_d.download(), q);
    const std::vector<T> b = back_d.download();
    for (std::size_t i = 0; i < b.size(); ++i) {
        const float g = to_float(b[i]), c = to_float(back[i]);
        if (std::isnan(g) && std::isnan(c)) continue;
        ASSERT_EQ(g, c) << "dequantized element " << i;
    }
}

template <class T>
class QuantizeCuda : public ::testing::Test {};
TYPED_TEST_SUITE(QuantizeCuda, StorageTypes);

TYPED_TEST(QuantizeCuda, MatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (std::int64_t n : {1, 7, 256, 1000, 300001}) {
        for (double stddev : {1.0, 1e-3, 100.0}) {
            SCOPED_TRACE(case_name<T>(n) + " stddev " + std::to_string(stddev));
            const auto x = random_storage<T>(rng, n, stddev);
            check<f8e4m3_t>(x);
            check<f8e5m2_t>(x);
        }
    }
}

TEST(QuantizeCudaEdges, ZerosNanInfinityAndTinyAmax) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    for (const std::vector<float>& x :
         {std::vector<float>{0.0f, -0.0f, 0.0f}, std::vector<float>{nan, 2.0f, -1.0f},
          std::vector<float>{inf, 1000.0f, 3.0f, -inf}, std::vector<float>{1e-39f, -5e-40f},
          std::vector<float>{}}) {
        SCOPED_TRACE(testing::Message() << x.size() << " elements");
        check<f8e4m3_t>(x);
        check<f8e5m2_t>(x);
    }
}

// Host only (no GPU needed): every 2^32 / 1048573-th float bit pattern, both signs and every
// exponent, through core/fp8.h and through cuda_fp8.h's __nv_cvt_float_to_fp8 (satfinite).
TEST(Fp8CodecVsCudaFp8, SaturatingConversionsAgree) {
    std::uint64_t checked = 0;
    for (std::uint64_t u = 0; u < (1ull << 32); u += 4093) {
        const float f = std::bit_cast<float>(static_cast<std::uint32_t>(u));
        const auto e4 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
        const auto e5 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
        ASSERT_EQ(f8e4m3_t(f).bits, e4) << "E4M3 of " << f << " (bits " << u << ")";
        ASSERT_EQ(f8e5m2_t(f).bits, e5) << "E5M2 of " << f << " (bits " << u << ")";
        ++checked;
    }
    EXPECT_GT(checked, 1000000u);
    for (int c = 0; c < 256; ++c) {
        f8e4m3_t a;
        a.bits = static_cast<std::uint8_t>(c);
        f8e5m2_t b;
        b.bits = static_cast<std::uint8_t>(c);
        const float va = __half2float(__half(__nv_cvt_fp8_to_halfraw(a.bits, __NV_E4M3)));
        const float vb = __half2float(__half(__nv_cvt_fp8_to_halfraw(b.bits, __NV_E5M2)));
        if (std::isnan(va))
            EXPECT_TRUE(std::isnan(static_cast<float>(a))) << c;
        else
            EXPECT_EQ(static_cast<float>(a), va) << c;
        if (std::isnan(vb))
            EXPECT_TRUE(std::isnan(static_cast<float>(b))) << c;
        else
            EXPECT_EQ(static_cast<float>(b), vb) << c;
    }
}

}  // namespace
}  // namespace napkin
