// The cast-transpose on the GPU (kernels/cuda/quantize.cu) against its CPU twin
// (kernels/cpu/quantize.cpp): the codes (R, C), their transpose (C, R), the scale pair and the
// recorded amax bit for bit, under current and delayed scaling, on random matrices of odd shapes
// (partial tiles on both edges, one tile, many), with every pointer aligned (the 16-byte path)
// and one element off (the path element by element), outputs poisoned first; on NaN, infinities
// and values past the scale's range; and transpose_fp8 against the CPU's on the same shapes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"
#include "tests/kernels_cuda/fp8_codes.h"

namespace napkin {
namespace {

using namespace test;

struct CastTransposeCase {
    std::int64_t R, C;
    bool rows, transposed;  // the outputs asked for
    std::size_t offset;     // elements every pointer is moved by (1: off the 16-byte path)
};

constexpr CastTransposeCase kCastTransposeCases[] = {
    {1, 1, true, true, 0},    {7, 13, true, true, 0},    {64, 64, true, true, 0},
    {128, 96, true, true, 0}, {128, 96, false, true, 0}, {128, 96, true, false, 0},
    {65, 130, true, true, 0}, {33, 200, true, true, 0},  {192, 48, false, true, 1},
    {128, 96, true, true, 1}, {16, 256, true, true, 0},  {0, 5, true, true, 0}};

std::uint32_t cast_transpose_bits(float f) {
    return std::bit_cast<std::uint32_t>(f);
}

std::vector<float> cast_transpose_pair(float scale) {
    std::vector<float> p(kFp8ScaleFloats, 0.0f);
    p[0] = scale;
    p[kFp8ScaleInv] = 1.0f / scale;
    return p;
}

// Codes poisoned with a code that is not NaN (a NaN would match a NaN the CPU wrote).
template <class Q>
std::vector<Q> poisoned_codes(std::int64_t n) {
    Q q;
    q.bits = 0x5a;
    return std::vector<Q>(static_cast<std::size_t>(n), q);
}

// delayed: the pair to cast with (null: current scaling); prior: the amax entry before.
template <class Q, class T>
void check_cast_transpose(const std::vector<T>& x, const CastTransposeCase& c, const float* delayed,
                          float prior) {
    const std::int64_t n = c.R * c.C;
    std::vector<Q> q = poisoned_codes<Q>(n), qt = poisoned_codes<Q>(n);
    float scale[kFp8ScaleFloats];
    float amax = prior;
    cpu::quantize_transpose<Q, T>({.out = c.rows ? q.data() : nullptr,
                                   .out_t = c.transposed ? qt.data() : nullptr,
                                   .scale = scale,
                                   .inp = x.data(),
                                   .R = c.R,
                                   .C = c.C,
                                   .delayed = delayed,
                                   .amax = &amax});

    DeviceBuffer<T> x_d(x, c.offset);
    DeviceBuffer<Q> q_d(poisoned_codes<Q>(n), c.offset), qt_d(poisoned_codes<Q>(n), c.offset);
    DeviceBuffer<float> scale_d(kFp8ScaleFloats), amax_d(std::vector<float>{prior});
    std::optional<DeviceBuffer<float>> delayed_d;
    if (delayed != nullptr)
        delayed_d.emplace(std::vector<float>(delayed, delayed + kFp8ScaleFloats));
    scale_d.poison();
    cuda::quantize_transpose<Q, T>({.out = c.rows ? q_d.get() : nullptr,
                                    .out_t = c.transposed ? qt_d.get() : nullptr,
                                    .scale = scale_d.get(),
                                    .inp = x_d.get(),
                                    .R = c.R,
                                    .C = c.C,
                                    .delayed = delayed_d ? delayed_d->get() : nullptr,
                                    .amax = amax_d.get()},
                                   {});
    const std::vector<float> s = scale_d.download();
    for (std::int64_t i = 0; i < kFp8ScaleFloats; ++i)
        EXPECT_EQ(cast_transpose_bits(s[static_cast<std::size_t>(i)]),
                  cast_transpose_bits(scale[i]))
            << "pair slot " << i;
    EXPECT_EQ(cast_transpose_bits(amax_d.download()[0]), cast_transpose_bits(amax))
        << "recorded amax";
    {
        SCOPED_TRACE("codes (R, C)");
        expect_same_codes(q_d.download(), q);
    }
    {
        SCOPED_TRACE("codes transposed (C, R)");
        expect_same_codes(qt_d.download(), qt);
    }
}

template <class T>
class QuantizeTransposeCuda : public ::testing::Test {};
TYPED_TEST_SUITE(QuantizeTransposeCuda, StorageTypes);

TYPED_TEST(QuantizeTransposeCuda, MatchesCpuBitForBit) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::vector<float> narrow = cast_transpose_pair(448.0f / 8.0f),
                             wide = cast_transpose_pair(57344.0f / 0.5f);
    for (const CastTransposeCase& c : kCastTransposeCases) {
        SCOPED_TRACE(case_name<T>(c.R, c.C) + (c.rows ? " rows" : "") +
                     (c.transposed ? " transposed" : "") + " offset " + std::to_string(c.offset));
        const auto x = random_storage<T>(rng, c.R * c.C, 1.0);
        check_cast_transpose<f8e4m3_t>(x, c, nullptr, 0.0f);  // current scaling
        check_cast_transpose<f8e5m2_t>(x, c, nullptr, 100.0f);
        check_cast_transpose<f8e4m3_t>(x, c, narrow.data(), 0.5f);  // delayed, some saturate
        check_cast_transpose<f8e5m2_t>(x, c, wide.data(), 0.0f);
    }
}

TEST(QuantizeTransposeCudaEdges, NanInfinityZerosAndSaturation) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    const std::vector<float> one = cast_transpose_pair(1.0f), big = cast_transpose_pair(448.0f);
    const CastTransposeCase c{16, 32, true, true, 0};
    std::mt19937 rng(fresh_seed());
    std::vector<float> x = random_storage<float>(rng, c.R * c.C, 1.0);
    x[3] = nan, x[40] = inf, x[41] = -inf, x[100] = 1e6f, x[200] = -0.0f, x[511] = nan;
    for (const std::vector<float>& pair : {one, big}) {
        check_cast_transpose<f8e4m3_t>(x, c, pair.data(), 0.0f);
        check_cast_transpose<f8e5m2_t>(x, c, pair.data(), 0.0f);
    }
    check_cast_transpose<f8e4m3_t>(x, c, nullptr, 0.0f);
    check_cast_transpose<f8e5m2_t>(x, c, nullptr, 0.0f);
    const std::vector<float> zeros(static_cast<std::size_t>(c.R * c.C), 0.0f);
    check_cast_transpose<f8e4m3_t>(zeros, c, nullptr, 0.0f);
}

TEST(TransposeFp8Cuda, MatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    std::mt19937 rng(fresh_seed());
    std::uniform_int_distribution<int> byte(0, 255);
    for (const CastTransposeCase& c : kCastTransposeCases) {
        SCOPED_TRACE(case_name<f8e4m3_t>(c.R, c.C) + " offset " + std::to_string(c.offset));
        std::vector<f8e4m3_t> in(static_cast<std::size_t>(c.R * c.C));
        for (f8e4m3_t& q : in)
            q.bits = static_cast<std::uint8_t>(byte(rng));
        std::vector<f8e4m3_t> out = poisoned_codes<f8e4m3_t>(c.R * c.C);
        cpu::transpose_fp8({out.data(), in.data(), c.R, c.C});
        DeviceBuffer<f8e4m3_t> in_d(in, c.offset),
            out_d(poisoned_codes<f8e4m3_t>(c.R * c.C), c.offset);
        cuda::transpose_fp8({out_d.get(), in_d.get(), c.R, c.C}, {});
        const std::vector<f8e4m3_t> got = out_d.download();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            if (got[i].bits != out[i].bits && bad++ < 5)
                ADD_FAILURE() << "byte " << i << ": " << int(got[i].bits) << ", the CPU's "
                              << int(out[i].bits);
        EXPECT_EQ(bad, 0u);
    }
}

}  // namespace
}  // namespace napkin
