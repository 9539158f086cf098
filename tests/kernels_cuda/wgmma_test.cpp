// kernels/cuda/wgmma.cuh through the probe kernel (wgmma_probe.h) against a CPU product: every
// combination of type, N, B's major, A's source, accumulation and warpgroups a block. On an sm_90
// GPU this is the hardware's word on the header's descriptors, swizzle and register layouts (and
// so on the emulator's, which runs the same cases); elsewhere on a GPU it skips. The misuses are
// the emulator's to catch (a GPU's result is undefined).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels_cuda/cuda_test_util.h"
#include "tests/kernels_cuda/wgmma_probe.h"

namespace napkin::test {
namespace {

using cuda::probe::WgmmaCase;
using cuda::probe::WgmmaMisuse;

#define NAPKIN_SKIP_WITHOUT_WGMMA()                                                 \
    do {                                                                            \
        NAPKIN_SKIP_WITHOUT_GPU();                                                  \
        if (const std::string why = cuda::probe::wgmma_unavailable(); !why.empty()) \
            GTEST_SKIP() << why;                                                    \
    } while (0)

struct WgmmaInputs {
    std::vector<std::uint16_t> a, b;  // bits
    std::vector<float> c;
};

std::uint16_t wgmma_bits(float v, bool bf16) {
    return static_cast<std::uint16_t>(bf16 ? bits_of(bf16_t(v)) : bits_of(f16_t(v)));
}
float wgmma_value(std::uint16_t bits, bool bf16) {
    return bf16 ? to_float(std::bit_cast<bf16_t>(bits)) : to_float(std::bit_cast<f16_t>(bits));
}

WgmmaInputs draw_wgmma(const WgmmaCase& c, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::size_t m = 64 * static_cast<std::size_t>(c.warpgroups),
                      n = static_cast<std::size_t>(c.n);
    WgmmaInputs in;
    for (std::size_t i = 0; i < m * 64; ++i)
        in.a.push_back(wgmma_bits(u(rng), c.bf16));
    for (std::size_t i = 0; i < n * 64; ++i)
        in.b.push_back(wgmma_bits(u(rng), c.bf16));
    for (std::size_t i = 0; i < m * n; ++i)
        in.c.push_back(u(rng));
    return in;
}

// D = A B (+ C) in double; B(k, j) from the case's storage.
std::vector<float> wgmma_reference(const WgmmaCase& c, const WgmmaInputs& in) {
    const int m = 64 * c.warpgroups, n = c.n;
    std::vector<float> d(static_cast<std::size_t>(m * n));
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double s = c.accumulate ? in.c[static_cast<std::size_t>(i * n + j)] : 0.0;
            for (int k = 0; k < 64; ++k) {
                const std::size_t bi = c.b_n_major ? static_cast<std::size_t>(k * n + j)
                                                   : static_cast<std::size_t>(j * 64 + k);
                s += double{wgmma_value(in.a[static_cast<std::size_t>(i * 64 + k)], c.bf16)} *
                     wgmma_value(in.b[bi], c.bf16);
            }
            d[static_cast<std::size_t>(i * n + j)] = static_cast<float>(s);
        }
    return d;
}

struct WgmmaRun {
    cudaError_t error = cudaSuccess;
    std::string failure;  // the launch's message
    std::vector<float> d;
};

WgmmaRun run_wgmma(const WgmmaCase& c, const WgmmaInputs& in) {
    DeviceBuffer<std::uint16_t> a(in.a.size()), b(in.b.size());
    DeviceBuffer<float> cin(in.c.size()), d(in.c.size());
    a.upload(in.a);
    b.upload(in.b);
    cin.upload(in.c);
    d.poison();
    WgmmaRun r;
    r.error = cuda::probe::wgmma_product(c, a.get(), b.get(), cin.get(), d.get(), &r.failure);
    cudaGetLastError();
    if (r.error == cudaSuccess) r.d = d.download();
    return r;
}

std::string describe_wgmma(const WgmmaCase& c) {
    return std::string(c.bf16 ? "bf16" : "f16") + " N " + std::to_string(c.n) +
           (c.b_n_major ? ", B N-major" : ", B K-major") +
           (c.a_registers ? ", A from registers"
            : c.cp_async  ? ", A from shared memory (cp.async)"
                          : ", A from shared memory") +
           (c.accumulate ? ", + C" : "") + ", " + std::to_string(c.warpgroups) + " warpgroup(s)";
}

TEST(Wgmma, ProductsMatchTheCpu) {
    NAPKIN_SKIP_WITHOUT_WGMMA();
    std::uint32_t seed = fresh_seed();
    for (bool bf16 : {true, false})
        for (int n : {32, 64, 128})
            for (bool n_major : {false, true})
                for (bool registers : {false, true})
                    for (bool accumulate : {false, true}) {
                        if (n == 32 && n_major) continue;  // K-major B only at N 32
                        WgmmaCase c;
                        c.bf16 = bf16, c.n = n, c.b_n_major = n_major, c.a_registers = registers;
                        c.accumulate = accumulate;
                        c.warpgroups = accumulate ? 2 : 1;
                        c.cp_async = registers == accumulate;  // half the cases: A by cp.async
                        SCOPED_TRACE(describe_wgmma(c) + ", seed " + std::to_string(seed));
                        const WgmmaInputs in = draw_wgmma(c, seed++);
                        const WgmmaRun r = run_wgmma(c, in);
                        ASSERT_EQ(r.error, cudaSuccess) << cudaGetErrorString(r.error);
                        const std::vector<float> want = wgmma_reference(c, in);
                        std::size_t bad = 0;
                        for (std::size_t i = 0; i < want.size(); ++i) {
                            // 64 exact products summed in fp32: far below 1e-4 of the sum.
                            if (std::fabs(r.d[i] - want[i]) <= 1e-4f * (1.0f + std::fabs(want[i])))
                                continue;
                            if (bad++ < 4)
                                ADD_FAILURE() << "D(" << i / static_cast<std::size_t>(n) << ", "
                                              << i % static_cast<std::size_t>(n) << ") = " << r.d[i]
                                              << ", the CPU's " << want[i];
                        }
                        EXPECT_EQ(bad, 0u);
                    }
}

// The emulator's checks: each misuse fails the launch, or leaves NaN where the kernel read
// accumulators still in flight.
class WgmmaMisuses : public ::testing::Test {
protected:
    void SetUp() override {
        NAPKIN_SKIP_WITHOUT_WGMMA();
        if (!cuda::probe::wgmma_emulated()) GTEST_SKIP() << "the misuses are the emulator's checks";
    }
    static WgmmaRun misuse(WgmmaMisuse how, int threads = 0) {
        WgmmaCase c;
        c.misuse = how;
        c.threads = threads;
        return run_wgmma(c, draw_wgmma(c, 7));
    }
};

TEST_F(WgmmaMisuses, WithoutAFenceTheLaunchFails) {
    const WgmmaRun r = misuse(WgmmaMisuse::kNoFence);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("without a wgmma.fence"), std::string::npos) << r.failure;
}

TEST_F(WgmmaMisuses, AccumulatorsReadBeforeTheWaitAreNaN) {
    const WgmmaRun r = misuse(WgmmaMisuse::kNoWait);
    ASSERT_EQ(r.error, cudaSuccess);
    for (float v : r.d)
        ASSERT_TRUE(std::isnan(v));
}

TEST_F(WgmmaMisuses, ATileOverwrittenInFlightFailsTheLaunch) {
    const WgmmaRun r = misuse(WgmmaMisuse::kOverwriteInFlight);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("changed before its wgmma.wait_group"), std::string::npos)
        << r.failure;
}

TEST_F(WgmmaMisuses, HalfAWarpgroupFailsTheLaunch) {
    const WgmmaRun r = misuse(WgmmaMisuse::kNone, 64);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("not whole warpgroups"), std::string::npos) << r.failure;
}

TEST_F(WgmmaMisuses, AWaitForProductsTheWarpgroupNeverIssuedFailsTheLaunch) {
    const WgmmaRun r = misuse(WgmmaMisuse::kOneWarpIssues);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("never issued"), std::string::npos) << r.failure;
}

TEST_F(WgmmaMisuses, AnOperandPastTheSharedMemoryFailsTheLaunch) {
    const WgmmaRun r = misuse(WgmmaMisuse::kPastTheEnd);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("past the launch's"), std::string::npos) << r.failure;
}

TEST_F(WgmmaMisuses, CpAsyncDataReadWithoutAProxyFenceFailsTheLaunch) {
    const WgmmaRun r = misuse(WgmmaMisuse::kNoProxyFence);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("which issued no fence.proxy.async"), std::string::npos) << r.failure;
}

TEST_F(WgmmaMisuses, TheSameCaseRunsCleanly) {
    EXPECT_EQ(misuse(WgmmaMisuse::kNone).error, cudaSuccess);
}

// ---- TMA (kernels/cuda/tma.cuh) ----

using cuda::probe::TmaCase;
using cuda::probe::TmaMisuse;

// A tensor of 2 batches x 100 rows x 192 columns, every element distinct.
constexpr int kTmaBatches = 2, kTmaRows = 100, kTmaCols = 192;

std::vector<std::uint16_t> draw_tma_tensor(std::uint32_t seed) {
    std::vector<std::uint16_t> t(static_cast<std::size_t>(kTmaBatches) * kTmaRows * kTmaCols);
    std::mt19937 rng(seed);
    for (std::uint16_t& v : t)  // never 0 (a row past the end) nor 0xffff (the emulator's poison)
        v = static_cast<std::uint16_t>(1 + rng() % 0xfffe);
    return t;
}

struct TmaRun {
    cudaError_t error = cudaSuccess;
    std::string failure;
    std::vector<std::uint16_t> tile;  // the shared tile's bytes as they lay
};

TmaRun run_tma(const TmaCase& c, const std::vector<std::uint16_t>& tensor) {
    DeviceBuffer<std::uint16_t> t(tensor.size()), tile(static_cast<std::size_t>(c.rows) * 64);
    t.upload(tensor);
    tile.poison();
    TmaRun r;
    r.error =
        cuda::probe::tma_tile(c, t.get(), kTmaBatches, kTmaRows, kTmaCols, tile.get(), &r.failure);
    cudaGetLastError();
    if (r.error == cudaSuccess) r.tile = tile.download();
    return r;
}

// The box's element (r, col) lies at chunk (col / 8) ^ (r % 8) of its 128-byte row, the layout
// wgmma's 128-byte-swizzled descriptors read; rows past the tensor's end are zeros.
TEST(Tma, TheBoxLandsSwizzledAndZeroPastTheEnd) {
    NAPKIN_SKIP_WITHOUT_WGMMA();
    const std::uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<std::uint16_t> tensor = draw_tma_tensor(seed);
    const TmaCase cases[] = {{64, 0, 0, 0, TmaMisuse::kNone},
                             {128, 16, 64, 1, TmaMisuse::kNone},
                             {64, 72, 128, 1, TmaMisuse::kNone},  // 28 rows inside, 36 past
                             {8, 96, 0, 0, TmaMisuse::kNone}};
    for (const TmaCase& c : cases) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " from (" + std::to_string(c.batch) + ", " +
                     std::to_string(c.row0) + ", " + std::to_string(c.col0) + ")");
        const TmaRun r = run_tma(c, tensor);
        ASSERT_EQ(r.error, cudaSuccess) << r.failure;
        std::size_t bad = 0;
        for (int row = 0; row < c.rows; ++row)
            for (int col = 0; col < 64; ++col) {
                const int src_row = c.row0 + row;
                const std::uint16_t want =
                    src_row < kTmaRows
                        ? tensor[(static_cast<std::size_t>(c.batch) * kTmaRows + src_row) *
                                     kTmaCols +
                                 static_cast<std::size_t>(c.col0 + col)]
                        : 0;
                const std::size_t at =
                    static_cast<std::size_t>(row) * 64 + ((col / 8) ^ (row % 8)) * 8 + col % 8;
                if (r.tile[at] != want && bad++ < 4)
                    ADD_FAILURE() << "box (" << row << ", " << col << ") = " << r.tile[at]
                                  << ", the tensor's " << want;
            }
        EXPECT_EQ(bad, 0u);
    }
}

class TmaMisuses : public ::testing::Test {
protected:
    void SetUp() override {
        NAPKIN_SKIP_WITHOUT_WGMMA();
        if (!cuda::probe::wgmma_emulated()) GTEST_SKIP() << "the misuses are the emulator's checks";
    }
    static TmaRun misuse(TmaMisuse how) {
        TmaCase c;
        c.misuse = how;
        return run_tma(c, draw_tma_tensor(11));
    }
};

TEST_F(TmaMisuses, ATileReadWithoutTheWaitIsPoison) {
    const TmaRun r = misuse(TmaMisuse::kNoWait);
    ASSERT_EQ(r.error, cudaSuccess) << r.failure;
    for (std::uint16_t v : r.tile)
        ASSERT_EQ(v, 0xffff);
}

TEST_F(TmaMisuses, CopiesBringingMoreThanAnnouncedFailTheLaunch) {
    const TmaRun r = misuse(TmaMisuse::kShortExpect);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("16 bytes more than its expect_tx announced"), std::string::npos)
        << r.failure;
}

TEST_F(TmaMisuses, APhaseNobodyCompletesFailsTheLaunch) {
    const TmaRun r = misuse(TmaMisuse::kNoArrive);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("never completes (1 of 1 arrivals missing"), std::string::npos)
        << r.failure;
}

TEST_F(TmaMisuses, AnUnalignedSwizzledDestinationFailsTheLaunch) {
    const TmaRun r = misuse(TmaMisuse::kUnaligned);
    EXPECT_NE(r.error, cudaSuccess);
    EXPECT_NE(r.failure.find("is not 1024-byte aligned"), std::string::npos) << r.failure;
}

TEST_F(TmaMisuses, TheSameCaseRunsCleanly) {
    const TmaRun r = misuse(TmaMisuse::kNone);
    EXPECT_EQ(r.error, cudaSuccess) << r.failure;
}

}  // namespace
}  // namespace napkin::test
