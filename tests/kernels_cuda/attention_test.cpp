// Causal attention, naive and flash, forward and backward: the CUDA kernels against the CPU's
// (kernels/cpu/attention.cpp) with MHA, GQA and MQA layouts, odd sequence lengths (partial
// tiles), odd head dimensions and the largest one (256). Forward outputs (out, P, lse, and the
// naive dropout's mask and Pd) are poisoned first; backward accumulates into a pre-filled dqkv.
// Flash has two implementations: attention_flash_forward/backward (the dispatch) on every case and
// type, and each by name for bf16 and fp16: the SIMT kernels on the same cases, the tensor-core
// kernels on the shapes they take (HD a multiple of 16 up to 128: mma.sync at HD 64 and 128, WMMA
// at the others), with shapes of several tiles for the mma.sync ones and a bitwise-determinism
// check of both; each of the three again with dropout on P against the CPU's flash dropout (the
// same keep bits, drawn in the kernels) and against the GPU's naive dropout. The mma.sync kernels'
// candidate tiles (bench/attention_fa2_candidates.h, which attention_bench --sweep times) are held
// to the CPU too, bf16, each on small shapes of several tiles for its head dimension.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "bench/attention_fa2_candidates.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct AttentionTestCase {
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
};
constexpr AttentionTestCase kAttentionTestCases[] = {
    {1, 1, 1, 1, 1},     {2, 7, 4, 2, 8},    {1, 33, 2, 1, 64}, {2, 65, 6, 3, 24},
    {1, 100, 4, 4, 128}, {1, 40, 2, 2, 256}, {1, 17, 2, 1, 5},  {1, 129, 3, 1, 32}};

struct Tensors {
    std::int64_t qkv_n, out_n, heads_T;
};

Tensors sizes(const AttentionTestCase& c) {
    return {c.B * c.T * (c.NH + 2 * c.KVH) * c.HD, c.B * c.T * c.NH * c.HD, c.B * c.NH * c.T};
}

template <class T>
class AttentionCuda : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionCuda, StorageTypes);

TYPED_TEST(AttentionCuda, NaiveMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c : kAttentionTestCases) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD));
        const Tensors n = sizes(c);
        const auto qkv = random_storage<E>(rng, n.qkv_n), dout = random_storage<E>(rng, n.out_n);
        const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
        std::vector<E> out(static_cast<std::size_t>(n.out_n)),
            p(static_cast<std::size_t>(n.heads_T * c.T));
        std::vector<E> dqkv = dqkv0;
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu::attention_naive_backward_scratch_floats(c.B, c.T, c.NH)));
        cpu::attention_naive_forward<E>(
            {out.data(), p.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD});
        cpu::attention_naive_backward<E>({dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                          p.data(), c.B, c.T, c.NH, c.KVH, c.HD});

        DeviceBuffer<E> qkv_d(qkv), dout_d(dout), out_d(out.size()), p_d(p.size()), dqkv_d(dqkv0);
        DeviceBuffer<float> scratch_d(scratch.size());
        out_d.poison();
        p_d.poison();
        scratch_d.poison();
        cuda::attention_naive_forward<E>(
            {out_d.get(), p_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD}, {});
        expect_match("out", out_d.download(), out, for_sum_of(tolerance<E>(), c.T + c.HD));
        expect_match("P", p_d.download(), p, for_sum_of(tolerance<E>(), c.HD));
        // Backward from the CPU's P, so that only the backward is compared.
        p_d.upload(p);
        cuda::attention_naive_backward<E>({dqkv_d.get(), scratch_d.get(), dout_d.get(), qkv_d.get(),
                                           p_d.get(), c.B, c.T, c.NH, c.KVH, c.HD},
                                          {});
        expect_match("dqkv", dqkv_d.download(), dqkv,
                     for_sum_of(tolerance<E>(), (c.NH / c.KVH) * c.T * c.HD));
    }
}

// Naive attention with dropout on P (AttentionDropout): the mask byte for byte the CPU's (it
// depends on indices only), P, Pd and out within the forward's tolerances (Pd and out scaled by
// 1 / (1 - p)), zeros above the diagonal in P, the mask and Pd exactly, dropped elements of Pd
// exactly zero; the backward from the CPU's P, mask and Pd, dqkv as without dropout (scaled).
TYPED_TEST(AttentionCuda, NaiveDropoutMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const float prob : {0.1f, 0.5f}) {
        for (const AttentionTestCase& c : kAttentionTestCases) {
            SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD) + " p " + std::to_string(prob));
            const Tensors n = sizes(c);
            const std::size_t np = static_cast<std::size_t>(n.heads_T * c.T);
            const auto qkv = random_storage<E>(rng, n.qkv_n),
                       dout = random_storage<E>(rng, n.out_n);
            const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
            std::vector<E> out(static_cast<std::size_t>(n.out_n)), p(np), pd(np), dqkv = dqkv0;
            std::vector<std::uint8_t> mask(np);
            std::vector<float> scratch(static_cast<std::size_t>(
                cpu::attention_naive_backward_scratch_floats(c.B, c.T, c.NH)));
            const AttentionDropout<E> cpu_drop{prob, rng(), mask.data(), pd.data()};
            cpu::attention_naive_forward<E>(
                {out.data(), p.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD, &cpu_drop});
            cpu::attention_naive_backward<E>({dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                              p.data(), c.B, c.T, c.NH, c.KVH, c.HD, &cpu_drop});

            DeviceBuffer<E> qkv_d(qkv), dout_d(dout), out_d(out.size()), p_d(np), pd_d(np),
                dqkv_d(dqkv0);
            DeviceBuffer<std::uint8_t> mask_d(np);
            DeviceBuffer<float> scratch_d(scratch.size());
            out_d.poison();
            p_d.poison();
            pd_d.poison();
            mask_d.poison();
            scratch_d.poison();
            const AttentionDropout<E> drop{prob, cpu_drop.seed, mask_d.get(), pd_d.get()};
            cuda::attention_naive_forward<E>(
                {out_d.get(), p_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, &drop}, {});
            const double keep_scale = 1.0 / (1.0 - static_cast<double>(prob));
            Tolerance out_tol = for_sum_of(tolerance<E>(), c.T + c.HD),
                      pd_tol = for_sum_of(tolerance<E>(), c.HD);
            out_tol.abs *= keep_scale;
            pd_tol.abs *= keep_scale;
            const std::vector<std::uint8_t> mask_gpu = mask_d.download();
            EXPECT_EQ(mask_gpu, mask) << "mask";
            const std::vector<E> p_gpu = p_d.download(), pd_gpu = pd_d.download();
            expect_match("P", p_gpu, p, for_sum_of(tolerance<E>(), c.HD));
            expect_match("Pd", pd_gpu, pd, pd_tol);
            expect_match("out", out_d.download(), out, out_tol);
            std::size_t kept = 0, causal = 0;
            for (std::size_t at = 0; at < np; ++at) {
                const bool above =
                    static_cast<std::int64_t>(at) % c.T > static_cast<std::int64_t>(at) / c.T % c.T;
                if (above) {
                    ASSERT_EQ(to_float(p_gpu[at]), 0.0f) << at;
                    ASSERT_EQ(mask_gpu[at], 0) << at;
                } else {
                    ++causal;
                    kept += mask_gpu[at];
                }
                if (mask_gpu[at] == 0) {
                    ASSERT_EQ(to_float(pd_gpu[at]), 0.0f) << at;
                }
            }
            // Enough elements that a mask of all ones or all zeros would show.
            if (causal >= 1000) {
                EXPECT_GT(kept, 0u);
                EXPECT_LT(kept, causal);
            }

            // Backward from the CPU's P, mask and Pd, so that only the backward is compared.
            p_d.upload(p);
            pd_d.upload(pd);
            mask_d.upload(mask);
            cuda::attention_naive_backward<E>(
                {dqkv_d.get(), scratch_d.get(), dout_d.get(), qkv_d.get(), p_d.get(), c.B, c.T,
                 c.NH, c.KVH, c.HD, &drop},
                {});
            Tolerance dqkv_tol = for_sum_of(tolerance<E>(), (c.NH / c.KVH) * c.T * c.HD);
            dqkv_tol.abs *= keep_scale;
            expect_match("dqkv", dqkv_d.download(), dqkv, dqkv_tol);
        }
    }
}

// What rounding P and dS to 16 bits before the tensor cores multiply them can add to each
// element of dqkv, a bound computed from the data: dq_i sums dS_ij k_j, dk_j sums dS_ij q_i and
// dv_j sums P_ij dout_i over the group's heads, each term's 16-bit factor off by at most half an
// ulp (2^-9 relative in bf16, 2^-12 in fp16; 2^-8 and 2^-11 for headroom), so an element is off
// by at most that times the sum of its terms' magnitudes. That sum is far above the element
// itself where terms cancel: with two keys dS_i0 = -dS_i1, and dq_i = dS_i0 (k_0 - k_1) can be
// small next to the rounding of either term (seed 4026343183 at bf16 (2, 33, 2, 2, 128): dq off
// by 0.0146 against the model's 0.0119). With dropout the kept terms' factor 1 / (1 - p) bounds
// them all. Computed in double from the inputs, out and lse the GPU was given.
template <class E>
Vec flash_backward_slack(const AttentionTestCase& c, const std::vector<E>& qkv,
                         const std::vector<E>& dout, const std::vector<E>& out,
                         const std::vector<float>& lse, double keep_scale) {
    const double u = std::is_same_v<E, bf16_t> ? 0x1p-8 : 0x1p-11;
    const std::int64_t B = c.B, T = c.T, HD = c.HD, NH = c.NH, KVH = c.KVH, group = NH / KVH;
    const std::int64_t row = (NH + 2 * KVH) * HD, orow = NH * HD;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
    const Vec q = as_seen(qkv), o = as_seen(out), g = as_seen(dout);
    Vec m(qkv.size(), 0.0);
    std::vector<double> dp(static_cast<std::size_t>(T)), p(static_cast<std::size_t>(T));
    for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < NH; ++h) {
            const std::int64_t kv = h / group;
            for (std::int64_t i = 0; i < T; ++i) {
                const double* qi = &q[static_cast<std::size_t>((b * T + i) * row + h * HD)];
                const double* gi = &g[static_cast<std::size_t>((b * T + i) * orow + h * HD)];
                const double* oi = &o[static_cast<std::size_t>((b * T + i) * orow + h * HD)];
                double d = 0.0;
                for (std::int64_t e = 0; e < HD; ++e)
                    d += gi[e] * oi[e];
                const double l = lse[static_cast<std::size_t>((b * NH + h) * T + i)];
                for (std::int64_t j = 0; j <= i; ++j) {
                    const double* kj =
                        &q[static_cast<std::size_t>((b * T + j) * row + (NH + kv) * HD)];
                    const double* vj =
                        &q[static_cast<std::size_t>((b * T + j) * row + (NH + KVH + kv) * HD)];
                    double s = 0.0, pv = 0.0;
                    for (std::int64_t e = 0; e < HD; ++e) {
                        s += qi[e] * kj[e];
                        pv += gi[e] * vj[e];
                    }
                    p[static_cast<std::size_t>(j)] = std::exp(s * scale - l) * keep_scale;
                    dp[static_cast<std::size_t>(j)] = p[static_cast<std::size_t>(j)] *
                                                      (std::fabs(pv) * keep_scale + std::fabs(d)) *
                                                      scale;  // |dS_ij| at most
                }
                for (std::int64_t j = 0; j <= i; ++j) {
                    const double ds = dp[static_cast<std::size_t>(j)],
                                 pj = p[static_cast<std::size_t>(j)];
                    double* mq = &m[static_cast<std::size_t>((b * T + i) * row + h * HD)];
                    double* mk = &m[static_cast<std::size_t>((b * T + j) * row + (NH + kv) * HD)];
                    double* mv =
                        &m[static_cast<std::size_t>((b * T + j) * row + (NH + KVH + kv) * HD)];
                    const double* kj =
                        &q[static_cast<std::size_t>((b * T + j) * row + (NH + kv) * HD)];
                    for (std::int64_t e = 0; e < HD; ++e) {
                        mq[e] += ds * std::fabs(kj[e]);
                        mk[e] += ds * std::fabs(qi[e]);
                        mv[e] += pj * std::fabs(gi[e]);
                    }
                }
            }
        }
    for (double& x : m)
        x *= u;
    return m;
}

// The flash forward and backward `fwd`, `bwd` (the dispatch or one implementation) against the
// CPU on case c; with `vs_naive`, the GPU's naive forward as well.
// qkv ~ N(0, stddev^2): larger spreads the scores, so that rows' maxima move by more over the
// key tiles. The outputs grow with the values (out as stddev, the backward's terms dS q, dS k
// with dS = P (dout . v - D) as stddev^2), and with them the error of rounding P and dS to 16
// bits before the tensor cores multiply them: the absolute tolerances grow by those factors.
// With `dropout_p` > 0, dropout on P on both sides from one 64-bit seed (its high half set, so a
// seed cut to 32 bits would draw other bits): the kept terms grow by 1 / (1 - p), and so do the
// absolute tolerances; the naive forward then draws its mask from the same seed.
template <class E, class Forward, class Backward>
void check_flash(std::mt19937& rng, const AttentionTestCase& c, Forward fwd, Backward bwd,
                 bool vs_naive, double stddev = 1.0, float dropout_p = 0.0f) {
    SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD) + " qkv stddev " +
                 std::to_string(stddev) + " dropout " + std::to_string(dropout_p));
    const Tensors n = sizes(c);
    const auto qkv = random_storage<E>(rng, n.qkv_n, stddev);
    const auto dout = random_storage<E>(rng, n.out_n);
    const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
    const std::uint64_t dropout_seed = (std::uint64_t{rng()} << 32) | rng();
    const AttentionDropout<E> flash_drop{dropout_p, dropout_seed, nullptr, nullptr};
    const AttentionDropout<E>* drop = dropout_p > 0.0f ? &flash_drop : nullptr;
    const double keep_scale = 1.0 / (1.0 - static_cast<double>(dropout_p));
    std::vector<E> out(static_cast<std::size_t>(n.out_n)), dqkv = dqkv0;
    std::vector<float> lse(static_cast<std::size_t>(n.heads_T));
    cpu::attention_flash_forward<E>(
        {out.data(), lse.data(), qkv.data(), c.B, c.T, c.NH, c.KVH, c.HD, drop});
    cpu::attention_flash_backward<E>({dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(),
                                      c.B, c.T, c.NH, c.KVH, c.HD, drop});

    DeviceBuffer<E> qkv_d(qkv), dout_d(dout), out_d(out.size()), dqkv_d(dqkv0);
    DeviceBuffer<float> lse_d(lse.size());
    out_d.poison();
    lse_d.poison();
    fwd({out_d.get(), lse_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, drop}, {});
    Tolerance out_tol = for_sum_of(tolerance<E>(), c.T + c.HD);
    out_tol.abs *= stddev * keep_scale;
    expect_match("out", out_d.download(), out, out_tol);
    expect_match("lse", lse_d.download(), lse, for_sum_of(Tolerance{1e-5, 1e-5}, c.T + c.HD));
    // Backward from the CPU's out and lse.
    out_d.upload(out);
    lse_d.upload(lse);
    bwd({dqkv_d.get(), dout_d.get(), out_d.get(), qkv_d.get(), lse_d.get(), c.B, c.T, c.NH, c.KVH,
         c.HD, drop},
        {});
    Tolerance dqkv_tol = for_sum_of(tolerance<E>(), (c.NH / c.KVH) * c.T * c.HD);
    dqkv_tol.abs *= stddev * stddev * keep_scale;
    // With dropout the kept P terms are scaled by 1 / (1 - p) before their 16-bit rounding: the
    // first keys' dK and dV, which sum P near 1 from every query of the group, carry the largest
    // rounding error, past the element-wise model in one draw (seed 3604360644, bf16 MQA
    // (1, 100, 4, 1, 64), p 0.1: dV of key 0 off by 0.0195 against 0.0182 allowed).
    if (dropout_p > 0.0f) dqkv_tol.abs *= 1.5;
    const Vec slack = flash_backward_slack(c, qkv, dout, out, lse, keep_scale);
    expect_match("dqkv", dqkv_d.download(), dqkv, dqkv_tol, &slack);
    if (!vs_naive) return;

    // The flash and naive paths agree with each other on the GPU too (with dropout: the same
    // bits, the naive kernel's from its mask).
    fwd({out_d.get(), lse_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, drop}, {});
    const std::size_t np = static_cast<std::size_t>(n.heads_T * c.T);
    DeviceBuffer<E> naive_out(out.size()), p_d(np), pd_d(np);
    DeviceBuffer<std::uint8_t> mask_d(np);
    naive_out.poison();
    const AttentionDropout<E> naive_drop{dropout_p, dropout_seed, mask_d.get(), pd_d.get()};
    cuda::attention_naive_forward<E>({naive_out.get(), p_d.get(), qkv_d.get(), c.B, c.T, c.NH,
                                      c.KVH, c.HD, drop != nullptr ? &naive_drop : nullptr},
                                     {});
    Tolerance naive_tol = for_sum_of(tolerance<E>(), c.T + c.HD);
    naive_tol.abs *= keep_scale;
    expect_match("flash vs naive out", out_d.download(), naive_out.download(), naive_tol);
}

TYPED_TEST(AttentionCuda, FlashMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_flash<E>(rng, c, cuda::attention_flash_forward<E>, cuda::attention_flash_backward<E>,
                       true);
}

// Flash attention with dropout on P through the dispatch (for 16-bit types the tensor cores where
// HD is a multiple of 16, the SIMT kernels elsewhere; fp32 always SIMT): out, lse and dqkv
// against the CPU's flash dropout, out against the GPU's naive dropout.
TYPED_TEST(AttentionCuda, FlashDropoutMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const float prob : {0.1f, 0.5f}) {
        for (const AttentionTestCase& c : kAttentionTestCases)
            check_flash<E>(rng, c, cuda::attention_flash_forward<E>,
                           cuda::attention_flash_backward<E>, true, 1.0, prob);
    }
}

// The tensor-core path's shapes: HD 16, 32, 48, 64, 80 and 128 (2, 4 and 8 fragments compiled,
// used partly); T = 1, within one 64-row tile, exactly one, and past two (tails); MHA, GQA
// (groups of 2 and 3) and MQA.
constexpr AttentionTestCase kMmaCases[] = {
    {1, 1, 2, 1, 64},  {2, 17, 4, 2, 16},  {1, 100, 4, 1, 64}, {1, 130, 2, 2, 128},
    {2, 64, 3, 3, 32}, {1, 129, 6, 2, 48}, {1, 33, 2, 1, 80}};

template <class T>
class AttentionFlash16 : public ::testing::Test {};
using SixteenBitTypes = ::testing::Types<bf16_t, f16_t>;
TYPED_TEST_SUITE(AttentionFlash16, SixteenBitTypes);

// The SIMT kernels by name: for 16-bit types the dispatch takes them only where the tensor-core
// path does not apply, so they are held to the CPU here on every case.
TYPED_TEST(AttentionFlash16, SimtMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c : kAttentionTestCases)
        check_flash<E>(rng, c, cuda::attention_flash_simt_forward<E>,
                       cuda::attention_flash_simt_backward<E>, false);
}

TYPED_TEST(AttentionFlash16, SimtDropoutMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const float prob : {0.1f, 0.5f}) {
        for (const AttentionTestCase& c : kAttentionTestCases)
            check_flash<E>(rng, c, cuda::attention_flash_simt_forward<E>,
                           cuda::attention_flash_simt_backward<E>, true, 1.0, prob);
    }
}

TYPED_TEST(AttentionFlash16, TensorCoresMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c : kMmaCases) {
        ASSERT_TRUE(cuda::attention_flash_mma_supported<E>(c.HD, {}));
        check_flash<E>(rng, c, cuda::attention_flash_mma_forward<E>,
                       cuda::attention_flash_mma_backward<E>, true);
    }
    // Scores of standard deviation about 9 (q . k / sqrt(HD) with q, k ~ N(0, 9)): a row's max
    // climbs by more than 2^8 from tile to tile, which the forward's lazy rescaling of its output
    // must follow.
    for (const AttentionTestCase& c :
         {AttentionTestCase{1, 200, 2, 1, 64}, AttentionTestCase{1, 130, 2, 2, 128}})
        check_flash<E>(rng, c, cuda::attention_flash_mma_forward<E>,
                       cuda::attention_flash_mma_backward<E>, false, 3.0);
}

// With dropout: the keep bits drawn where the kernels hold P's (query, key) coordinates, P zeroed
// where dropped before the tensor cores and 1 / (1 - p) applied to out and dV in fp32; the
// spread scores again, so that the lazy rescaling runs with dropped terms.
TYPED_TEST(AttentionFlash16, TensorCoresDropoutMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const float prob : {0.1f, 0.5f}) {
        for (const AttentionTestCase& c : kMmaCases)
            check_flash<E>(rng, c, cuda::attention_flash_mma_forward<E>,
                           cuda::attention_flash_mma_backward<E>, true, 1.0, prob);
        check_flash<E>(rng, AttentionTestCase{1, 200, 2, 1, 64},
                       cuda::attention_flash_mma_forward<E>, cuda::attention_flash_mma_backward<E>,
                       false, 3.0, prob);
    }
}

// The mma.sync kernels' shapes (HD 64 and 128; kernels/cuda/attention_fa2_*.cu): several query
// and key tiles, so that the cp.async stages wrap around (forward: 128 queries a block at HD 64,
// 64 at 128; 64-key tiles), T not a multiple of any tile, B > 1, groups of 1 (MHA), 3 and 4
// (MQA), and one tile exactly.
constexpr AttentionTestCase kMmaSyncCases[] = {
    {2, 200, 6, 2, 64}, {1, 257, 4, 1, 128}, {3, 70, 2, 2, 64}, {1, 64, 8, 2, 128}};

TYPED_TEST(AttentionFlash16, MmaSyncShapesMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c : kMmaSyncCases) {
        check_flash<E>(rng, c, cuda::attention_flash_mma_forward<E>,
                       cuda::attention_flash_mma_backward<E>, false);
        check_flash<E>(rng, c, cuda::attention_flash_mma_forward<E>,
                       cuda::attention_flash_mma_backward<E>, false, 1.0, 0.3f);
    }
}

// The candidate tiles of the mma.sync kernels, bf16, one test each (the engine's own among them):
// a forward candidate with the engine's backward, a backward one after the engine's forward (each
// compared on its own: check_flash runs the backward from the CPU's out and lse). Shapes: T past
// a block's rows for every candidate (256 queries a block at most), not a multiple of any tile;
// MQA, GQA and MHA, B > 1; with and without dropout; for the wgmma candidates a longer T too.
// Small, for the emulator.
class AttentionFa2Candidates : public ::testing::TestWithParam<std::size_t> {};

TEST_P(AttentionFa2Candidates, MatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = bf16_t;
    const bench::Fa2Candidate& tiles = bench::fa2_candidates()[GetParam()];
    if (tiles.sm90a && !bench::fa2_sm90a_unavailable().empty())
        GTEST_SKIP() << tiles.name << ": " << bench::fa2_sm90a_unavailable();
    SCOPED_TRACE(std::string(tiles.name) + ": " + tiles.tiles);
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const auto fwd = tiles.fwd != nullptr ? tiles.fwd : cuda::attention_flash_mma_forward<E>;
    const auto bwd = tiles.bwd != nullptr ? tiles.bwd : cuda::attention_flash_mma_backward<E>;
    std::vector<AttentionTestCase> cases =
        tiles.HD == 64 ? std::vector<AttentionTestCase>{{1, 291, 2, 1, 64}, {2, 77, 3, 3, 64}}
                       : std::vector<AttentionTestCase>{{1, 150, 4, 2, 128}, {2, 33, 2, 2, 128}};
    // The wgmma candidates pipeline up to 128 keys a tile through 3 stages: a block that sees
    // more than 4 key tiles, so that every stage is loaded again while the others are read.
    if (tiles.sm90a)
        cases.push_back(tiles.HD == 64 ? AttentionTestCase{1, 600, 1, 1, 64}
                                       : AttentionTestCase{1, 330, 1, 1, 128});
    for (const AttentionTestCase& c : cases) {
        check_flash<E>(rng, c, fwd, bwd, false);
        check_flash<E>(rng, c, fwd, bwd, false, 1.0, 0.3f);
    }
}

INSTANTIATE_TEST_SUITE_P(Tiles, AttentionFa2Candidates,
                         ::testing::Range<std::size_t>(0, bench::fa2_candidates().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& param) {
                             std::string name = bench::fa2_candidates()[param.param].name;
                             for (char& ch : name)
                                 if (ch == '-') ch = '_';
                             return name;
                         });

// The row statistics' kernel of the -rs and -kpp candidates (bench::row_stats) against the CPU:
// per (b, h), lse log2(e) of each row and +inf in the padding to a multiple of 64 rows, then
// D = dout . out of each row and 0 in the padding; bf16, HD 64 and 128, T not a multiple of 64,
// B and NH above one. The buffer starts poisoned, so a row left unwritten fails.
TEST(AttentionFa2RowStats, MatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = bf16_t;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c :
         {AttentionTestCase{2, 70, 3, 1, 64}, AttentionTestCase{1, 129, 2, 2, 128}}) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD));
        const Tensors n = sizes(c);
        const auto dout = random_storage<E>(rng, n.out_n), out = random_storage<E>(rng, n.out_n);
        const Vec lse_v = random_normal(rng, n.heads_T, 3.0, 1.0);
        const std::vector<float> lse(lse_v.begin(), lse_v.end());
        const AttentionDims dims{c.B, c.T, c.NH, c.KVH, c.HD};
        const std::int64_t floats = bench::row_stats_floats(dims);
        const std::int64_t Tp = (c.T + 63) / 64 * 64;
        ASSERT_EQ(floats, c.B * c.NH * 2 * Tp);
        DeviceBuffer<E> dout_d(dout), out_d(out);
        DeviceBuffer<float> lse_d(lse), stats_d(static_cast<std::size_t>(floats));
        stats_d.poison();
        bench::row_stats(stats_d.get(), dout_d.get(), out_d.get(), lse_d.get(), dims, {});
        const std::vector<float> got = stats_d.download();
        Vec want(static_cast<std::size_t>(floats)), gotv(got.begin(), got.end());
        const Vec g = as_seen(dout), o = as_seen(out);
        for (std::int64_t bh = 0; bh < c.B * c.NH; ++bh)
            for (std::int64_t i = 0; i < Tp; ++i) {
                const std::int64_t b = bh / c.NH, h = bh % c.NH;
                double d = 0.0;
                for (std::int64_t e = 0; e < c.HD && i < c.T; ++e) {
                    const auto at =
                        static_cast<std::size_t>((b * c.T + i) * c.NH * c.HD + h * c.HD + e);
                    d += g[at] * o[at];
                }
                const auto row = static_cast<std::size_t>(bh * 2 * Tp + i);
                want[row] = i < c.T
                                ? lse[static_cast<std::size_t>(bh * c.T + i)] * 1.4426950408889634
                                : INFINITY;
                want[row + static_cast<std::size_t>(Tp)] = i < c.T ? d : 0.0;
                if (i >= c.T) {  // the padding exactly: +inf is outside any tolerance's reach
                    EXPECT_EQ(got[row], INFINITY) << "lse row " << i << " of head " << bh;
                    EXPECT_EQ(got[row + static_cast<std::size_t>(Tp)], 0.0f) << "D row " << i;
                    gotv[row] = want[row] = 0.0;  // compared above
                }
            }
        expect_close("row stats", gotv, want, for_sum_of(Tolerance{1e-5, 1e-5}, c.HD));
    }
}

// NAPKIN_ATTENTION_CANDIDATES' list (bench/attention_fa2_candidates.h): a forward, a backward's
// both passes or one of them, per head dimension; each bad entry refused naming itself. Host
// parsing only (no device needed).
TEST(AttentionFa2Selection, ParsesNamesAndRefusesBadLists) {
    const bench::Fa2Selection s =
        bench::parse_fa2_selection(" f64-wgmma-pp,b64-rs@1 , b64-wgmma-qpp@2,b128-wgmma-kpp");
    ASSERT_NE(s.forward[0], nullptr);
    EXPECT_STREQ(s.forward[0]->name, "f64-wgmma-pp");
    EXPECT_EQ(s.forward[1], nullptr);
    EXPECT_STREQ(s.pass[0][0]->name, "b64-rs");
    EXPECT_STREQ(s.pass[0][1]->name, "b64-wgmma-qpp");
    EXPECT_EQ(s.pass[1][0], s.pass[1][1]);
    EXPECT_STREQ(s.pass[1][0]->name, "b128-wgmma-kpp");
    EXPECT_EQ(bench::describe(s),
              "HD 64: forward f64-wgmma-pp, pass 1 b64-rs, pass 2 b64-wgmma-qpp; HD 128: forward "
              "engine, pass 1 b128-wgmma-kpp, pass 2 b128-wgmma-kpp");
    const auto refused = [](const std::string& list, const std::string& why) {
        try {
            bench::parse_fa2_selection(list);
            ADD_FAILURE() << list << ": accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos)
                << list << ": " << e.what();
        }
    };
    refused("", "expected candidate names, got none");
    refused("f64,,b64", "an empty entry");
    refused("f64-nope", "unknown candidate \"f64-nope\" (expected one of: f64, ");
    refused("f64-w8@1", "f64-w8 is a forward");
    refused("b64@3", "expected @1 (pass 1: dK, dV) or @2 (pass 2: dQ)");
    refused("f64,f64-w8", "HD 64's forward is given twice (f64 and f64-w8)");
    refused("b64-wgmma-kpp,b64-rs@1", "HD 64's pass 1 is given twice (b64-wgmma-kpp and b64-rs)");
}

// One writer per element and fixed orders: two runs give the same bits (on the emulator, under
// two differently shuffled schedules), forward and backward, without dropout and with it; the
// WMMA kernels (HD 32) and the mma.sync ones (HD 64 and 128).
TYPED_TEST(AttentionFlash16, TensorCoresAreDeterministic) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using E = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const AttentionTestCase& c :
         {AttentionTestCase{2, 100, 4, 2, 32}, AttentionTestCase{1, 150, 4, 2, 64},
          AttentionTestCase{1, 90, 3, 1, 128}}) {
        SCOPED_TRACE(case_name<E>(c.B, c.T, c.NH, c.KVH, c.HD));
        const Tensors n = sizes(c);
        const auto qkv = random_storage<E>(rng, n.qkv_n), dout = random_storage<E>(rng, n.out_n);
        const auto dqkv0 = random_storage<E>(rng, n.qkv_n, 0.1);
        const AttentionDropout<E> dropout{0.25f, (std::uint64_t{rng()} << 32) | rng(), nullptr,
                                          nullptr};
        for (const AttentionDropout<E>* drop :
             {static_cast<const AttentionDropout<E>*>(nullptr), &dropout}) {
            SCOPED_TRACE(drop != nullptr ? "dropout" : "no dropout");
            DeviceBuffer<E> qkv_d(qkv), dout_d(dout);
            std::vector<std::vector<E>> outs, dqkvs;
            for (int run = 0; run < 2; ++run) {
                DeviceBuffer<E> out_d(static_cast<std::size_t>(n.out_n)), dqkv_d(dqkv0);
                DeviceBuffer<float> lse_d(static_cast<std::size_t>(n.heads_T));
                out_d.poison();
                cuda::attention_flash_mma_forward<E>(
                    {out_d.get(), lse_d.get(), qkv_d.get(), c.B, c.T, c.NH, c.KVH, c.HD, drop}, {});
                cuda::attention_flash_mma_backward<E>(
                    {dqkv_d.get(), dout_d.get(), out_d.get(), qkv_d.get(), lse_d.get(), c.B, c.T,
                     c.NH, c.KVH, c.HD, drop},
                    {});
                outs.push_back(out_d.download());
                dqkvs.push_back(dqkv_d.download());
            }
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(E)), 0)
                << "out";
            EXPECT_EQ(std::memcmp(dqkvs[0].data(), dqkvs[1].data(), dqkvs[0].size() * sizeof(E)), 0)
                << "dqkv";
        }
    }
}

// Which shapes the dispatch sends to the tensor cores, and what the kernels refuse by name
// (host-side checks: no device needed).
TYPED_TEST(AttentionFlash16, TensorCoresTakeWhatTheySupport) {
    using E = TypeParam;
    alignas(16) static E buffer[16];
    const void* aligned = buffer;
    const void* misaligned = buffer + 1;
    for (std::int64_t hd : {16, 32, 48, 64, 80, 96, 112, 128})
        EXPECT_TRUE(cuda::attention_flash_mma_supported<E>(hd, {aligned, aligned})) << hd;
    for (std::int64_t hd : {1, 8, 24, 100, 144, 256})
        EXPECT_FALSE(cuda::attention_flash_mma_supported<E>(hd, {aligned})) << hd;
    EXPECT_FALSE(cuda::attention_flash_mma_supported<E>(64, {aligned, misaligned}));
    EXPECT_FALSE(cuda::attention_flash_mma_supported<float>(64, {aligned}));
    EXPECT_ANY_THROW(
        cuda::attention_flash_mma_forward<E>({buffer, nullptr, buffer, 1, 1, 1, 1, 24}, {}));
}

// A dropout probability outside [0, 1) is refused by both implementations before any launch
// (host-side checks: no device needed).
TYPED_TEST(AttentionFlash16, DropoutOutsideZeroToOneIsRefused) {
    using E = TypeParam;
    alignas(16) static E buffer[64];
    float lse[1] = {};
    for (const float prob : {1.0f, -0.1f}) {
        SCOPED_TRACE(prob);
        const AttentionDropout<E> drop{prob, 1, nullptr, nullptr};
        EXPECT_ANY_THROW(
            cuda::attention_flash_mma_forward<E>({buffer, lse, buffer, 1, 1, 1, 1, 16, &drop}, {}));
        EXPECT_ANY_THROW(cuda::attention_flash_mma_backward<E>(
            {buffer, buffer, buffer, buffer, lse, 1, 1, 1, 1, 16, &drop}, {}));
        EXPECT_ANY_THROW(cuda::attention_flash_simt_forward<E>(
            {buffer, lse, buffer, 1, 1, 1, 1, 16, &drop}, {}));
        EXPECT_ANY_THROW(cuda::attention_flash_simt_backward<E>(
            {buffer, buffer, buffer, buffer, lse, 1, 1, 1, 1, 16, &drop}, {}));
    }
}

}  // namespace
}  // namespace napkin
