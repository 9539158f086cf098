// LayerNorm and RMSNorm: the CUDA kernels against the CPU's (kernels/cpu/norm.cpp) at several
// shapes, odd ones and rows longer than a block included; forward into poisoned outputs and
// statistics, backward accumulating into pre-filled gradients (parameter gradients optional);
// the residual add fused with the layernorm.
#include "kernels/norm.h"

#include <gtest/gtest.h>

#include "kernels/residual.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

// {N, C, offset}: C = 768 and up to 2048 take the warp-per-row kernels (16-byte vectors, C a
// multiple of 8 in bf16/fp16, at most 1024 in fp32), the rest and the pointers one element off
// (offset 1) the block-per-row kernels.
constexpr std::int64_t kShapes[][3] = {{1, 1, 0},   {3, 7, 0},    {17, 768, 0}, {17, 768, 1},
                                       {9, 16, 0},  {3, 1024, 0}, {3, 2048, 0}, {5, 1025, 0},
                                       {64, 33, 0}, {2, 4099, 0}};

template <class T>
class NormCuda : public ::testing::Test {};
TYPED_TEST_SUITE(NormCuda, StorageTypes);

TYPED_TEST(NormCuda, LayernormMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& s : kShapes) {
        const std::int64_t N = s[0], C = s[1];
        const auto offset = static_cast<std::size_t>(s[2]);
        for (bool with_bias : {true, false}) {
            SCOPED_TRACE(case_name<T>(N, C) + (with_bias ? " bias" : "") + " offset " +
                         std::to_string(offset));
            const auto x = to_storage<T>(random_normal(rng, N * C, 0.5, 2.0));
            const auto w = random_storage<T>(rng, C), b = random_storage<T>(rng, C);
            const auto dout = random_storage<T>(rng, N * C);
            const auto dx0 = random_storage<T>(rng, N * C), dw0 = random_storage<T>(rng, C);
            const auto db0 = random_storage<T>(rng, C);
            const T* bias = with_bias ? b.data() : nullptr;
            std::vector<T> out(x.size()), dx = dx0, dw = dw0, db = db0;
            std::vector<float> mean(static_cast<std::size_t>(N)), rstd(mean.size());
            cpu::layernorm_forward<T>(
                {out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C});
            cpu::layernorm_backward<T>({dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                        w.data(), mean.data(), rstd.data(), N, C});

            DeviceBuffer<T> x_d(x, offset), w_d(w, offset), b_d(b, offset), out_d(x.size(), offset),
                dout_d(dout, offset), dx_d(dx0, offset), dw_d(dw0), db_d(db0);
            DeviceBuffer<float> mean_d(mean.size()), rstd_d(rstd.size());
            out_d.poison();
            mean_d.poison();
            rstd_d.poison();
            cuda::layernorm_forward<T>({out_d.get(), mean_d.get(), rstd_d.get(), x_d.get(),
                                        w_d.get(), with_bias ? b_d.get() : nullptr, N, C},
                                       {});
            expect_match("out", out_d.download(), out, for_sum_of(tolerance<T>(), C));
            expect_match("mean", mean_d.download(), mean, for_sum_of(tolerance<float>(), C));
            expect_match("rstd", rstd_d.download(), rstd, for_sum_of(tolerance<float>(), C));
            // Backward from the CPU's statistics, so that only the backward is compared.
            mean_d.upload(mean);
            rstd_d.upload(rstd);
            cuda::layernorm_backward<T>({dx_d.get(), dw_d.get(), db_d.get(), dout_d.get(),
                                         x_d.get(), w_d.get(), mean_d.get(), rstd_d.get(), N, C},
                                        {});
            expect_match("dinp", dx_d.download(), dx, for_sum_of(tolerance<T>(), C));
            expect_match("dweight", dw_d.download(), dw, for_sum_of(tolerance<T>(), N));
            expect_match("dbias", db_d.download(), db, for_sum_of(tolerance<T>(), N));
        }
    }
}

TYPED_TEST(NormCuda, RmsnormMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& s : kShapes) {
        const std::int64_t N = s[0], C = s[1];
        const auto offset = static_cast<std::size_t>(s[2]);
        for (bool with_dw : {true, false}) {
            SCOPED_TRACE(case_name<T>(N, C) + (with_dw ? "" : " frozen") + " offset " +
                         std::to_string(offset));
            const auto x = random_storage<T>(rng, N * C, 2.0), w = random_storage<T>(rng, C);
            const auto dout = random_storage<T>(rng, N * C);
            const auto dx0 = random_storage<T>(rng, N * C), dw0 = random_storage<T>(rng, C);
            std::vector<T> out(x.size()), dx = dx0, dw = dw0;
            std::vector<float> rstd(static_cast<std::size_t>(N));
            cpu::rmsnorm_forward<T>({out.data(), rstd.data(), x.data(), w.data(), N, C});
            cpu::rmsnorm_backward<T>({dx.data(), with_dw ? dw.data() : nullptr, dout.data(),
                                      x.data(), w.data(), rstd.data(), N, C});

            DeviceBuffer<T> x_d(x, offset), w_d(w, offset), out_d(x.size(), offset),
                dout_d(dout, offset), dx_d(dx0, offset), dw_d(dw0);
            DeviceBuffer<float> rstd_d(rstd.size());
            out_d.poison();
            rstd_d.poison();
            cuda::rmsnorm_forward<T>({out_d.get(), rstd_d.get(), x_d.get(), w_d.get(), N, C}, {});
            expect_match("out", out_d.download(), out, for_sum_of(tolerance<T>(), C));
            expect_match("rstd", rstd_d.download(), rstd, for_sum_of(tolerance<float>(), C));
            rstd_d.upload(rstd);
            cuda::rmsnorm_backward<T>({dx_d.get(), with_dw ? dw_d.get() : nullptr, dout_d.get(),
                                       x_d.get(), w_d.get(), rstd_d.get(), N, C},
                                      {});
            expect_match("dinp", dx_d.download(), dx, for_sum_of(tolerance<T>(), C));
            expect_match("dweight", dw_d.download(), dw, for_sum_of(tolerance<T>(), N));
        }
    }
}

// The two-pass backward's parameter gradients in two stages (scratch given, as the engine lends
// the GEMM workspace): chunks of 64 rows, a last one short, and a scratch with room for only 3
// chunks (longer chunks); against the CPU, and the same bits on a second run (a fixed order, no
// atomics). One chunk's worth of rows and too little scratch take the one-stage path, checked the
// same way.
TYPED_TEST(NormCuda, ParameterGradientsInChunksMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    struct Case {
        std::int64_t N, C, scratch_chunks;  // scratch for this many 64-row chunks (0: all)
    };
    for (const Case& c : {Case{300, 40, 0}, Case{1000, 100, 0}, Case{1000, 100, 3}, Case{65, 7, 0},
                          Case{64, 33, 0}, Case{500, 9, 1}}) {
        const std::int64_t N = c.N, C = c.C;
        SCOPED_TRACE(case_name<T>(N, C) + " scratch for " + std::to_string(c.scratch_chunks) +
                     " chunks");
        const auto x = to_storage<T>(random_normal(rng, N * C, 0.5, 2.0));
        const auto w = random_storage<T>(rng, C);
        const auto dout = random_storage<T>(rng, N * C);
        const auto dw0 = random_storage<T>(rng, C), db0 = random_storage<T>(rng, C);
        std::vector<T> out(x.size()), dx(x.size()), dw = dw0, db = db0;
        std::vector<float> mean(static_cast<std::size_t>(N)), rstd(mean.size());
        cpu::layernorm_forward<T>({out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                   static_cast<const T*>(nullptr), N, C});
        cpu::layernorm_backward<T>({dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                    w.data(), mean.data(), rstd.data(), N, C});
        const std::int64_t chunks = c.scratch_chunks == 0 ? (N + 63) / 64 : c.scratch_chunks;
        const std::size_t bytes = static_cast<std::size_t>(2 * chunks * C) * sizeof(float);
        DeviceBuffer<T> x_d(x), w_d(w), dout_d(dout), dx_d(dx.size());
        DeviceBuffer<float> mean_d(mean), rstd_d(rstd);
        DeviceBuffer<float> scratch(bytes / sizeof(float));
        std::vector<std::vector<T>> dws, dbs;
        for (int run = 0; run < 2; ++run) {
            DeviceBuffer<T> dw_d(dw0), db_d(db0);
            scratch.poison();
            cuda::layernorm_backward_two_pass<T>(
                {dx_d.get(), dw_d.get(), db_d.get(), dout_d.get(), x_d.get(), w_d.get(),
                 mean_d.get(), rstd_d.get(), N, C, scratch.get(), bytes},
                {});
            dws.push_back(dw_d.download());
            dbs.push_back(db_d.download());
            expect_match("dweight", dws.back(), dw, for_sum_of(tolerance<T>(), N));
            expect_match("dbias", dbs.back(), db, for_sum_of(tolerance<T>(), N));
        }
        expect_same_bits("dweight, second run", dws[1], dws[0]);
        expect_same_bits("dbias, second run", dbs[1], dbs[0]);
        // RMSNorm's weight gradient through the same path.
        std::vector<T> rdx(x.size()), rdw = dw0;
        std::vector<float> rrstd(static_cast<std::size_t>(N));
        cpu::rmsnorm_forward<T>({out.data(), rrstd.data(), x.data(), w.data(), N, C});
        cpu::rmsnorm_backward<T>(
            {rdx.data(), rdw.data(), dout.data(), x.data(), w.data(), rrstd.data(), N, C});
        DeviceBuffer<T> rdw_d(dw0);
        rstd_d.upload(rrstd);
        cuda::rmsnorm_backward_two_pass<T>({dx_d.get(), rdw_d.get(), dout_d.get(), x_d.get(),
                                            w_d.get(), rstd_d.get(), N, C, scratch.get(), bytes},
                                           {});
        expect_match("rmsnorm dweight", rdw_d.download(), rdw, for_sum_of(tolerance<T>(), N));
    }
}

// The one-pass backward's scratch: 2 ceil(N / R) C floats, R from N alone.
TEST(NormCudaScratch, RowsPerBlockAndScratchFollowN) {
    EXPECT_EQ(cuda::norm_backward_rows_per_block(1), 16);
    EXPECT_EQ(cuda::norm_backward_rows_per_block(8192), 16);
    EXPECT_EQ(cuda::norm_backward_rows_per_block(8193), 24);
    EXPECT_EQ(cuda::norm_backward_rows_per_block(64 * 1024), 128);
    EXPECT_EQ(cuda::norm_backward_scratch_bytes(64 * 1024, 768), 2u * 512 * 768 * 4);
    EXPECT_EQ(cuda::norm_backward_scratch_bytes(1000, 768), 2u * 63 * 768 * 4);
    for (std::int64_t N : {1, 15, 16, 17, 8191, 8193, 65536, 1000003})
        EXPECT_LE(cuda::norm_backward_scratch_bytes(N, 1) / 8,
                  static_cast<std::size_t>(cuda::kNormBackwardBlocks));
}

// One layernorm (or RMSNorm: mean null) backward through layernorm_backward (or rmsnorm_'s) and
// through the two-pass path, from the same inputs into copies of the same gradients.
template <class T>
struct NormOnePassGrads {
    std::vector<T> dx, dw, db;
};

template <class T>
struct NormOnePassCase {
    std::int64_t N, C;
    bool rms, with_dw, with_db;
    std::size_t scratch_bytes;
    const std::vector<T>&x, &w, &dout, &dx0, &dw0, &db0;
    const std::vector<float>&mean, &rstd;
};

template <class T>
NormOnePassGrads<T> norm_one_pass_run(const NormOnePassCase<T>& c, bool two_pass) {
    DeviceBuffer<T> x_d(c.x), w_d(c.w), dout_d(c.dout), dx_d(c.dx0), dw_d(c.dw0), db_d(c.db0);
    DeviceBuffer<float> mean_d(c.mean), rstd_d(c.rstd);
    DeviceBuffer<float> scratch(std::max<std::size_t>(c.scratch_bytes / sizeof(float), 1));
    scratch.poison();
    T* dw = c.with_dw ? dw_d.get() : nullptr;
    T* db = c.with_db ? db_d.get() : nullptr;
    if (c.rms) {
        const RmsnormBackwardArgs<T> a{
            dx_d.get(),   dw,  dout_d.get(), x_d.get(),     w_d.get(),
            rstd_d.get(), c.N, c.C,          scratch.get(), c.scratch_bytes};
        two_pass ? cuda::rmsnorm_backward_two_pass<T>(a, {}) : cuda::rmsnorm_backward<T>(a, {});
    } else {
        const LayernormBackwardArgs<T> a{
            dx_d.get(),   dw,           db,  dout_d.get(), x_d.get(),     w_d.get(),
            mean_d.get(), rstd_d.get(), c.N, c.C,          scratch.get(), c.scratch_bytes};
        two_pass ? cuda::layernorm_backward_two_pass<T>(a, {}) : cuda::layernorm_backward<T>(a, {});
    }
    return {dx_d.download(), dw_d.download(), db_d.download()};
}

// The one-pass backward (inp and dout read once) against the CPU: LayerNorm with both parameter
// gradients, with the bias frozen, with the weight frozen, and RMSNorm; N not a multiple of
// the rows per block (and past 8192 rows, where a block's warps take several rows each), C = 768,
// 1024, 2048 (fp32: the two-pass fallback), gradients accumulated into random ones, the scratch
// poisoned. The same bits on a second run. Odd C (not whole vectors) and a scratch one float
// short fall back to the two passes: bit for bit layernorm_backward_two_pass.
TYPED_TEST(NormCuda, OnePassBackwardMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    struct Shape {
        std::int64_t N, C;
        bool short_scratch;
    };
    const bool vec16 = sizeof(T) == 2;
    for (const Shape& s : {Shape{100, 768, false}, Shape{37, 1024, false}, Shape{9, 2048, false},
                           Shape{8203, 16, false}, Shape{50, 771, false}, Shape{40, 768, true}}) {
        const std::int64_t N = s.N, C = s.C;
        const bool one_pass = !s.short_scratch && C % (vec16 ? 8 : 4) == 0 &&
                              C * static_cast<std::int64_t>(sizeof(T)) <= cuda::kNormWarpRowBytes;
        const auto x = to_storage<T>(random_normal(rng, N * C, 0.5, 2.0));
        const auto w = random_storage<T>(rng, C), b = random_storage<T>(rng, C);
        const auto dout = random_storage<T>(rng, N * C);
        const auto dx0 = random_storage<T>(rng, N * C), dw0 = random_storage<T>(rng, C);
        const auto db0 = random_storage<T>(rng, C);
        const std::size_t bytes =
            cuda::norm_backward_scratch_bytes(N, C) - (s.short_scratch ? 4 : 0);
        for (int variant = 0; variant < 4; ++variant) {
            const bool rms = variant == 3, with_dw = variant != 2;
            const bool with_db = variant == 0 || variant == 2;
            SCOPED_TRACE(case_name<T>(N, C) + (rms ? " rmsnorm" : " layernorm") +
                         (with_dw ? " dw" : "") + (with_db ? " db" : "") +
                         (one_pass ? " one pass" : " two passes"));
            std::vector<T> out(x.size()), dx = dx0, dw = dw0, db = db0;
            std::vector<float> mean(static_cast<std::size_t>(N)), rstd(mean.size());
            if (rms) {
                cpu::rmsnorm_forward<T>({out.data(), rstd.data(), x.data(), w.data(), N, C});
                cpu::rmsnorm_backward<T>({dx.data(), with_dw ? dw.data() : nullptr, dout.data(),
                                          x.data(), w.data(), rstd.data(), N, C});
            } else {
                cpu::layernorm_forward<T>(
                    {out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C});
                cpu::layernorm_backward<T>({dx.data(), with_dw ? dw.data() : nullptr,
                                            with_db ? db.data() : nullptr, dout.data(), x.data(),
                                            w.data(), mean.data(), rstd.data(), N, C});
            }
            const NormOnePassCase<T> c{N, C,    rms, with_dw, with_db, bytes, x,
                                       w, dout, dx0, dw0,     db0,     mean,  rstd};
            const NormOnePassGrads<T> got = norm_one_pass_run(c, false);
            expect_match("dinp", got.dx, dx, for_sum_of(tolerance<T>(), C));
            expect_match("dweight", got.dw, dw, for_sum_of(tolerance<T>(), N));
            expect_match("dbias", got.db, db, for_sum_of(tolerance<T>(), N));
            const NormOnePassGrads<T> again = norm_one_pass_run(c, false);
            expect_same_bits("dinp, second run", again.dx, got.dx);
            expect_same_bits("dweight, second run", again.dw, got.dw);
            expect_same_bits("dbias, second run", again.db, got.db);
            if (!one_pass) {
                const NormOnePassGrads<T> two = norm_one_pass_run(c, true);
                expect_same_bits("dinp vs two passes", got.dx, two.dx);
                expect_same_bits("dweight vs two passes", got.dw, two.dw);
                expect_same_bits("dbias vs two passes", got.db, two.db);
            }
        }
    }
}

// The residual add fused with the layernorm: against the CPU's fused kernel within the
// layernorm's tolerance (the sum x exactly: one rounding of the same fp32 add), and bit for bit
// against the GPU's own residual_forward then layernorm_forward, which the engine replaces by it.
template <class T>
void check_residual_layernorm(std::mt19937& rng, std::int64_t N, std::int64_t C,
                              std::size_t offset) {
    SCOPED_TRACE(case_name<T>(N, C) + " offset " + std::to_string(offset));
    const auto a = to_storage<T>(random_normal(rng, N * C, 0.5, 2.0));
    const auto b = random_storage<T>(rng, N * C), w = random_storage<T>(rng, C),
               bias = random_storage<T>(rng, C);
    std::vector<T> x(a.size()), out(a.size());
    std::vector<float> mean(static_cast<std::size_t>(N)), rstd(mean.size());
    cpu::residual_layernorm_forward<T>({out.data(), mean.data(), rstd.data(), x.data(), a.data(),
                                        b.data(), w.data(), bias.data(), N, C});

    DeviceBuffer<T> a_d(a, offset), b_d(b, offset), w_d(w, offset), bias_d(bias, offset),
        x_d(a.size(), offset), out_d(a.size(), offset), x2_d(a.size(), offset),
        out2_d(a.size(), offset);
    DeviceBuffer<float> mean_d(mean.size()), rstd_d(mean.size()), mean2_d(mean.size()),
        rstd2_d(mean.size());
    for (auto* p : {&x_d, &out_d, &x2_d, &out2_d})
        p->poison();
    for (auto* p : {&mean_d, &rstd_d, &mean2_d, &rstd2_d})
        p->poison();
    cuda::residual_layernorm_forward<T>({out_d.get(), mean_d.get(), rstd_d.get(), x_d.get(),
                                         a_d.get(), b_d.get(), w_d.get(), bias_d.get(), N, C},
                                        {});
    expect_same_bits("x", x_d.download(), x);
    expect_match("out", out_d.download(), out, for_sum_of(tolerance<T>(), C));
    expect_match("mean", mean_d.download(), mean, for_sum_of(tolerance<float>(), C));
    expect_match("rstd", rstd_d.download(), rstd, for_sum_of(tolerance<float>(), C));

    cuda::residual_forward<T>({x2_d.get(), a_d.get(), b_d.get(), N * C}, {});
    cuda::layernorm_forward<T>(
        {out2_d.get(), mean2_d.get(), rstd2_d.get(), x2_d.get(), w_d.get(), bias_d.get(), N, C},
        {});
    expect_same_bits("x vs residual_forward", x_d.download(), x2_d.download());
    expect_same_bits("out vs layernorm_forward", out_d.download(), out2_d.download());
    expect_same_bits("mean vs layernorm_forward", mean_d.download(), mean2_d.download());
    expect_same_bits("rstd vs layernorm_forward", rstd_d.download(), rstd2_d.download());
}

TYPED_TEST(NormCuda, ResidualLayernormMatchesCpuAndTheUnfusedPair) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& s : kShapes)
        check_residual_layernorm<TypeParam>(rng, s[0], s[1], static_cast<std::size_t>(s[2]));
}

}  // namespace
}  // namespace napkin
