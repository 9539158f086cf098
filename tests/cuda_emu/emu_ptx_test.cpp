// The emulated PTX of kernels/cuda/mma.cuh (tests/cuda_emu/emu_ptx.h): ldmatrix against lanes
// worked out by hand from the PTX ISA's tables; mma.sync through ldmatrix, as the flash attention
// uses both, against CPU loops (small integers: every product and sum exact), the first product's
// accumulators feeding the second as its A fragment; cp.async landing at the wait and not before,
// per commit group; the misuses that fail a launch; bank-conflicted ldmatrix phases counted, and
// none in the tensor-core flash attention's kernels; the emulated driver's tensor maps (emu_tma.h;
// the TMA copies themselves are held to the hardware by tests/kernels_cuda/wgmma_test.cpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/attention.h"
#include "tests/cuda_emu/emu_ptx.h"
#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/emu_tma.h"
#include "tests/cuda_emu/ptx_selftest_kernels.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin::emu {
namespace {

namespace st = selftest;
using test::DeviceBuffer;

class CudaEmuPtx : public ::testing::Test {
protected:
    void SetUp() override { reset_for_test(); }
    void TearDown() override { reset_for_test(); }
};

std::uint32_t pair(int lo, int hi) {
    return static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16;
}

// Matrix m's element (i, j) is 64 m + 8 i + j (st::ldmatrix_fragments).
TEST_F(CudaEmuPtx, LdmatrixGivesEachLaneThePairsTheIsaNames) {
    DeviceBuffer<std::uint32_t> out(256);
    ASSERT_EQ(st::ldmatrix_fragments(out.get()), cudaSuccess);
    const std::vector<std::uint32_t> r = out.download();
    // By hand: lane 5 is g 1, t 1, so it holds row 1, columns 2 and 3 of each matrix, and
    // transposed, column 1, rows 2 and 3; lane 31 (g 7, t 3) row 7, columns 6 and 7 of matrix 3,
    // transposed column 7, rows 6 and 7 of matrix 2.
    EXPECT_EQ(r[0], pair(0, 1));
    EXPECT_EQ(r[4 * 5], pair(10, 11));
    EXPECT_EQ(r[4 * 31 + 3], pair(192 + 62, 192 + 63));
    EXPECT_EQ(r[128 + 4 * 5], pair(17, 25));
    EXPECT_EQ(r[128 + 4 * 31 + 2], pair(128 + 55, 128 + 63));
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int m = 0; m < 4; ++m) {
            EXPECT_EQ(r[4 * l + m], pair(64 * m + 8 * g + 2 * t, 64 * m + 8 * g + 2 * t + 1))
                << "lane " << l << ", matrix " << m;
            EXPECT_EQ(r[128 + 4 * l + m],
                      pair(64 * m + 8 * (2 * t) + g, 64 * m + 8 * (2 * t + 1) + g))
                << ".trans, lane " << l << ", matrix " << m;
        }
    }
}

// n small integers in [-range, range] as the 16-bit type's bits, and as floats.
template <class T>
std::vector<std::uint16_t> small_integers(std::mt19937& rng, int n, int range,
                                          std::vector<float>& values) {
    std::uniform_int_distribution<int> d(-range, range);
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
    values.resize(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
        values[i] = static_cast<float>(d(rng));
        const T v(values[i]);
        std::memcpy(&bits[i], &v, sizeof v);
    }
    return bits;
}

template <class T>
void check_mma_product(std::mt19937& rng, bool bf16) {
    std::vector<float> a, bt, c(16 * 8);
    const auto a_bits = small_integers<T>(rng, 256, 4, a);
    const auto bt_bits = small_integers<T>(rng, 128, 4, bt);
    std::uniform_int_distribution<int> d(-100, 100);
    for (float& v : c)
        v = static_cast<float>(d(rng));
    DeviceBuffer<std::uint16_t> a_d(a_bits), bt_d(bt_bits);
    DeviceBuffer<float> c_d(c), d_d(c.size());
    d_d.poison();
    ASSERT_EQ(st::mma_product(a_d.get(), bt_d.get(), c_d.get(), d_d.get(), bf16), cudaSuccess);
    const std::vector<float> got = d_d.download();
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
            float want = c[static_cast<std::size_t>(i * 8 + j)];
            for (int k = 0; k < 16; ++k)
                want += a[static_cast<std::size_t>(i * 16 + k)] *
                        bt[static_cast<std::size_t>(j * 16 + k)];
            EXPECT_EQ(got[static_cast<std::size_t>(i * 8 + j)], want)
                << "d(" << i << ", " << j << ")";
        }
}

TEST_F(CudaEmuPtx, MmaThroughLdmatrixMatchesACpuLoop) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    {
        SCOPED_TRACE("bf16");
        check_mma_product<bf16_t>(rng, true);
    }
    {
        SCOPED_TRACE("fp16");
        check_mma_product<f16_t>(rng, false);
    }
}

TEST_F(CudaEmuPtx, AccumulatorsPackedIntoTheNextProductsAFragment) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<float> a, x, y;
    const auto a_bits = small_integers<bf16_t>(rng, 256, 2, a);
    const auto x_bits = small_integers<bf16_t>(rng, 256, 2, x);
    const auto y_bits = small_integers<bf16_t>(rng, 256, 2, y);
    DeviceBuffer<std::uint16_t> a_d(a_bits), x_d(x_bits), y_d(y_bits);
    DeviceBuffer<float> e_d(256);
    e_d.poison();
    ASSERT_EQ(st::mma_chain(a_d.get(), x_d.get(), y_d.get(), e_d.get()), cudaSuccess);
    const std::vector<float> got = e_d.download();
    // (a x) y: a x's entries are integers of at most 64 in magnitude, exact in bf16.
    float s[16][16] = {};
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j)
            for (int k = 0; k < 16; ++k)
                s[i][j] += a[static_cast<std::size_t>(i * 16 + k)] *
                           x[static_cast<std::size_t>(k * 16 + j)];
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            float want = 0.0f;
            for (int k = 0; k < 16; ++k)
                want += s[i][k] * y[static_cast<std::size_t>(k * 16 + j)];
            EXPECT_EQ(got[static_cast<std::size_t>(i * 16 + j)], want)
                << "e(" << i << ", " << j << ")";
        }
}

constexpr std::uint32_t kPoison = 0xffffffffu;

TEST_F(CudaEmuPtx, CpAsyncLandsAtTheWaitAndNotBefore) {
    std::vector<std::uint32_t> in(128);
    for (std::size_t i = 0; i < in.size(); ++i)
        in[i] = static_cast<std::uint32_t>(1000 + i);
    DeviceBuffer<std::uint32_t> in_d(in), out_d(64);
    ASSERT_EQ(st::cp_async_lands_at_wait(in_d.get(), out_d.get()), cudaSuccess);
    const std::vector<std::uint32_t> out = out_d.download();
    for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(out[static_cast<std::size_t>(i)], kPoison)
            << "thread " << i << " before the wait";
        EXPECT_EQ(out[static_cast<std::size_t>(32 + i)],
                  i == 31 ? 0u : in[4 * static_cast<std::size_t>(i)])
            << "thread " << i << " after the wait" << (i == 31 ? " (zero-filled)" : "");
    }
}

TEST_F(CudaEmuPtx, WaitGroupRetiresAllButTheNewestGroups) {
    const std::vector<std::uint32_t> in = {11, 12, 13, 14, 21, 22, 23, 24};
    DeviceBuffer<std::uint32_t> in_d(in), out_d(4);
    ASSERT_EQ(st::cp_async_groups(in_d.get(), out_d.get()), cudaSuccess);
    EXPECT_EQ(out_d.download(), (std::vector<std::uint32_t>{11, kPoison, 11, 21}));
}

TEST_F(CudaEmuPtx, ReadingAnotherThreadsCopyWithoutABarrierIsCaught) {
    std::vector<std::uint32_t> in(256, 7);
    DeviceBuffer<std::uint32_t> in_d(in), out_d(64);
    ASSERT_EQ(st::cp_async_without_barrier(in_d.get(), out_d.get()), cudaSuccess);
    int garbage = 0;
    for (std::uint32_t v : out_d.download())
        garbage += v == kPoison;
    EXPECT_GT(garbage, 0) << "every thread read its neighbour's copy without a barrier";
}

TEST_F(CudaEmuPtx, MisusesFailTheLaunch) {
    DeviceBuffer<std::uint32_t> in(8);
    const struct {
        st::PtxMisuse how;
        const char* says;
    } cases[] = {
        {st::PtxMisuse::kCpAsyncMisalignedDestination, "cp.async: the destination"},
        {st::PtxMisuse::kCpAsyncHostSource, "cp.async: the source"},
        {st::PtxMisuse::kLdmatrixPastTheEnd, "lane 5's row"},
        {st::PtxMisuse::kMmaInHalfAWarp, "mma.sync"},
        {st::PtxMisuse::kLanesInDifferentCalls, "same call"},
    };
    for (const auto& c : cases) {
        reset_for_test();
        EXPECT_EQ(st::ptx_misuse(in.get(), c.how), cudaErrorLaunchFailure) << c.says;
        const std::string message = last_error_message();
        EXPECT_NE(message.find(c.says), std::string::npos) << message;
    }
}

// A producer warp hands rounds to two consumer warps through a full and an empty barrier: every
// round arrives whole. Without the barriers the shuffled schedule gets it wrong, and so it does
// when the producer arrives before it writes (an arriving thread may lag behind the threads it
// releases).
TEST_F(CudaEmuPtx, NamedBarriersHandRoundsFromAProducerWarp) {
    constexpr int kRounds = 5;
    std::vector<int> in(64 * kRounds);
    std::iota(in.begin(), in.end(), 1000);
    std::vector<int> want(in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
        want[i] = in[i] + static_cast<int>(i / 64);
    DeviceBuffer<int> in_d(in);
    for (const st::Handoff how :
         {st::Handoff::kBarriers, st::Handoff::kNone, st::Handoff::kArriveBeforeWrites}) {
        DeviceBuffer<int> out_d(in.size());
        ASSERT_EQ(st::named_handoff(in_d.get(), out_d.get(), kRounds, how), cudaSuccess)
            << last_error_message();
        if (how == st::Handoff::kBarriers)
            EXPECT_EQ(out_d.download(), want);
        else
            EXPECT_NE(out_d.download(), want) << "the consumers read every round whole";
    }
}

TEST_F(CudaEmuPtx, NamedBarrierMisusesFailTheLaunch) {
    const struct {
        st::NamedMisuse how;
        const char* says;
    } cases[] = {
        {st::NamedMisuse::kLeftOver, "named barrier 3 holds 32 of its 64 arrivals"},
        {st::NamedMisuse::kNeverComplete, "bar.sync 3 (32 of 64 arrived)"},
        {st::NamedMisuse::kCountsDisagree, " threads while it counts to "},
        {st::NamedMisuse::kBarrierZero, "0 is __syncthreads's"},
        {st::NamedMisuse::kOddCount, "48 threads (a multiple of 32"},
        {st::NamedMisuse::kTwiceInARound, "twice in one round"},
        {st::NamedMisuse::kPartOfAWarp, "whole warps arrive at a barrier"},
    };
    for (const auto& c : cases) {
        reset_for_test();
        EXPECT_EQ(st::named_misuse(c.how), cudaErrorLaunchFailure) << c.says;
        const std::string message = last_error_message();
        EXPECT_NE(message.find(c.says), std::string::npos) << message;
    }
}

TEST_F(CudaEmuPtx, LdmatrixBankConflictsAreCounted) {
    const std::uint64_t before = ldmatrix_bank_conflicts();
    ASSERT_EQ(st::ldmatrix_rows(false), cudaSuccess);
    EXPECT_EQ(ldmatrix_bank_conflicts() - before, 4u) << "8 rows 128 bytes apart, in each phase";
    ASSERT_EQ(st::ldmatrix_rows(true), cudaSuccess);
    EXPECT_EQ(ldmatrix_bank_conflicts() - before, 4u) << "the swizzled rows";
}

// The mma.sync flash attention (kernels/cuda/attention_fa2_*.cu) reads every tile by ldmatrix
// from its XOR-swizzled shared memory: forward and both backward passes, HD 64 and 128.
TEST_F(CudaEmuPtx, FlashAttentionReadsSharedMemoryWithoutBankConflicts) {
    std::mt19937 rng(5);
    for (const std::int64_t hd : {64, 128}) {
        SCOPED_TRACE("HD " + std::to_string(hd));
        const std::int64_t B = 1, T = 150;
        const int NH = 2, KVH = 1;
        const std::int64_t qkv_n = B * T * (NH + 2 * KVH) * hd, out_n = B * T * NH * hd;
        DeviceBuffer<bf16_t> qkv(test::random_storage<bf16_t>(rng, qkv_n)), out(out_n),
            dout(test::random_storage<bf16_t>(rng, out_n)), dqkv(qkv_n);
        DeviceBuffer<float> lse(B * NH * T);
        const std::uint64_t before = ldmatrix_bank_conflicts();
        cuda::attention_flash_mma_forward<bf16_t>(
            {out.get(), lse.get(), qkv.get(), B, T, NH, KVH, hd}, {});
        cuda::attention_flash_mma_backward<bf16_t>(
            {dqkv.get(), dout.get(), out.get(), qkv.get(), lse.get(), B, T, NH, KVH, hd}, {});
        test::sync_and_check();
        EXPECT_EQ(ldmatrix_bank_conflicts(), before);
    }
}

// cuTensorMapEncodeTiled (emu_tma.h) as the driver documents it: a valid 3-d map of bf16 with a
// 128-byte swizzle is made; each invalid field is refused, what the emulator does not model is
// "not supported", and cudaGetDriverEntryPointByVersion hands out the function by name only.
TEST_F(CudaEmuPtx, TensorMapsAreRefusedWhereTheDriverRefusesThem) {
    DeviceBuffer<std::uint16_t> t(64 * 100 * 2);
    struct Map {
        void* address;
        cuuint64_t dims[3] = {64, 100, 2};
        cuuint64_t strides[2] = {128, 128 * 100};
        cuuint32_t box[3] = {64, 64, 1};
        cuuint32_t element_strides[3] = {1, 1, 1};
        CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
        CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
    };
    auto encode = [](const Map& m) {
        CUtensorMap map;
        return tensor_map_encode_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, m.address, m.dims,
                                       m.strides, m.box, m.element_strides, m.interleave, m.swizzle,
                                       CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    const Map good{t.get()};
    EXPECT_EQ(encode(good), CUDA_SUCCESS);
    // Each row: the good map with one field changed, and the answer.
    const struct {
        const char* what;
        void (*change)(Map&);
        CUresult want;
    } bad[] = {
        {"an address not 16-byte aligned",
         [](Map& m) { m.address = static_cast<unsigned char*>(m.address) + 8; },
         CUDA_ERROR_INVALID_VALUE},
        {"a stride not a multiple of 16", [](Map& m) { m.strides[0] = 120; },
         CUDA_ERROR_INVALID_VALUE},
        {"a dimension of 0", [](Map& m) { m.dims[1] = 0; }, CUDA_ERROR_INVALID_VALUE},
        {"a box dimension past 256", [](Map& m) { m.box[1] = 257; }, CUDA_ERROR_INVALID_VALUE},
        {"an inner box wider than the swizzle", [](Map& m) { m.box[0] = 128; },
         CUDA_ERROR_INVALID_VALUE},
        {"an inner box of 8 bytes", [](Map& m) { m.box[0] = 4; }, CUDA_ERROR_INVALID_VALUE},
        {"an element stride past 8", [](Map& m) { m.element_strides[1] = 9; },
         CUDA_ERROR_INVALID_VALUE},
        {"element strides other than 1", [](Map& m) { m.element_strides[1] = 2; },
         CUDA_ERROR_NOT_SUPPORTED},
        {"interleave", [](Map& m) { m.interleave = CU_TENSOR_MAP_INTERLEAVE_16B; },
         CUDA_ERROR_NOT_SUPPORTED},
    };
    for (const auto& row : bad) {
        Map m = good;
        row.change(m);
        EXPECT_EQ(encode(m), row.want) << row.what;
    }

    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                               cudaEnableDefault, &found),
              cudaSuccess);
    EXPECT_EQ(found, cudaDriverEntryPointSuccess);
    EXPECT_EQ(fn, reinterpret_cast<void*>(&tensor_map_encode_tiled));
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &found),
              cudaSuccess);
    EXPECT_EQ(found, cudaDriverEntryPointSymbolNotFound);
    EXPECT_EQ(fn, nullptr);
}

}  // namespace
}  // namespace napkin::emu
