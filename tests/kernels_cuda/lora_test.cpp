// lora through cuBLASLt against the CPU's OpenBLAS path (kernels/cpu/lora.cpp): the forward into
// a pre-filled out (h poisoned), the backward into pre-filled gradients (dh poisoned), with and
// without dinp, for one adapter, swiglu's two and a fused qkv's three, equal and unequal (GQA)
// parts, odd sizes (unaligned leading dimensions and part offsets), rank above N, and a part with
// no rows (the empty sum in dh).
#include "kernels/lora.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct LoraTestCase {
    std::int64_t M, N, K, r;
    int parts;
    std::int64_t n_first;
};
constexpr LoraTestCase kLoraTestCases[] = {
    {1, 1, 1, 1, 1, 0},        // the smallest
    {7, 5, 9, 3, 1, 0},        // odd sizes, one adapter
    {13, 4, 17, 8, 1, 0},      // rank above N
    {9, 10, 6, 3, 2, 5},       // swiglu's gate | up, equal
    {33, 50, 257, 16, 2, 20},  // two unequal parts, a long K
    {5, 12, 7, 4, 3, 0},       // qkv with equal parts
    {6, 16, 8, 2, 3, 8},       // qkv under GQA: q 8 rows, k and v 4 each
    {37, 99, 45, 5, 3, 51},    // GQA at odd sizes: q 51, k and v 24 (odd offsets, odd r)
    {64, 96, 80, 8, 3, 48},    // GQA, aligned
    {4, 6, 5, 2, 3, 6},        // q takes every row: k and v have none (dh's columns are 0)
};

LoraShape shape_of(const LoraTestCase& c) {
    LoraShape s;
    s.M = c.M;
    s.N = c.N;
    s.K = c.K;
    s.r = c.r;
    s.parts = c.parts;
    s.n_first = c.n_first;
    return s;
}

std::string case_name_of(const LoraTestCase& c, const char* dtype) {
    return std::string(dtype) + " M " + std::to_string(c.M) + " N " + std::to_string(c.N) + " K " +
           std::to_string(c.K) + " r " + std::to_string(c.r) + " parts " + std::to_string(c.parts) +
           " n_first " + std::to_string(c.n_first);
}

// The relative size of the one rounding into T of an intermediate the next product reads (h in
// the forward, dh in the backward): each side's stored value lies within half an ulp of its
// fp32 result, and the fp32 results differ by their summation order, so where one side rounds
// up and the other down they differ by up to an ulp, 2^-7 (bf16) or 2^-10 (fp16) of the value.
// An output element then differs by that times the sum of the magnitudes the intermediate meets,
// which the CPU's fp32 kernel run on |inputs| gives. fp32 keeps h in fp32: its order differences
// are in for_sum_of's absolute part.
template <class T>
double intermediate_rounding() {
    if constexpr (std::is_same_v<T, bf16_t>) return 0x1p-7;
    if constexpr (std::is_same_v<T, f16_t>) return 0x1p-10;
    return 0.0;
}

std::vector<float> abs_of(const Vec& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = static_cast<float>(std::fabs(v[i]));
    return out;
}

Vec scaled(const std::vector<float>& v, double f) {
    Vec out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = static_cast<double>(v[i]) * f;
    return out;
}

template <class T>
void expect_within(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                   Tolerance tol, const Vec& slack) {
    expect_close(what, as_seen(gpu), as_seen(cpu), tol, &slack);
}

template <class T>
class LoraCuda : public ::testing::Test {};
TYPED_TEST_SUITE(LoraCuda, StorageTypes);

TYPED_TEST(LoraCuda, ForwardMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const LoraTestCase& c : kLoraTestCases) {
        SCOPED_TRACE(case_name_of(c, dtype_name<T>()));
        const LoraShape s = shape_of(c);
        const std::int64_t PR = s.parts * s.r;
        const float scale = 2.0f / static_cast<float>(s.r);  // alpha 2
        const auto x = random_storage<T>(rng, s.M * s.K), a = random_storage<T>(rng, PR * s.K, 0.5),
                   b = random_storage<T>(rng, s.N * s.r, 0.5),
                   out0 = random_storage<T>(rng, s.M * s.N);
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu::lora_scratch_floats(s, !std::is_same_v<T, float>)) + 1);
        std::vector<T> out = out0, h = nan_filled<T>(s.M * PR);
        cpu::lora_forward<T>(
            {out.data(), h.data(), x.data(), a.data(), b.data(), s, scale, scratch.data()});
        // The magnitudes each element sums: h and out of |x|, |a|, |b| from nothing.
        std::vector<float> h_mag(h.size()), out_mag(out.size(), 0.0f);
        cpu::lora_forward<float>({out_mag.data(), h_mag.data(), abs_of(as_seen(x)).data(),
                                  abs_of(as_seen(a)).data(), abs_of(as_seen(b)).data(), s, scale,
                                  nullptr});

        DeviceBuffer<T> x_d(x), a_d(a), b_d(b), out_d(out0), h_d(h.size());
        h_d.poison();
        cuda::lora_forward<T>(
            {out_d.get(), h_d.get(), x_d.get(), a_d.get(), b_d.get(), s, scale, lt.workspace},
            lt.launch);
        const Vec no_slack(h.size(), 0.0);
        expect_within("h", h_d.download(), h, for_sum_of(tolerance<T>(), s.K), no_slack);
        expect_within("out", out_d.download(), out, for_sum_of(tolerance<T>(), s.K + s.r),
                      scaled(out_mag, intermediate_rounding<T>()));
    }
}

TYPED_TEST(LoraCuda, BackwardAccumulatesLikeCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const LoraTestCase& c : kLoraTestCases) {
        SCOPED_TRACE(case_name_of(c, dtype_name<T>()));
        const LoraShape s = shape_of(c);
        const std::int64_t PR = s.parts * s.r;
        const float scale = 2.0f / static_cast<float>(s.r);
        const auto x = random_storage<T>(rng, s.M * s.K), a = random_storage<T>(rng, PR * s.K, 0.5),
                   b = random_storage<T>(rng, s.N * s.r, 0.5), h = random_storage<T>(rng, s.M * PR),
                   dout = random_storage<T>(rng, s.M * s.N);
        const auto dx0 = random_storage<T>(rng, s.M * s.K), da0 = random_storage<T>(rng, PR * s.K),
                   db0 = random_storage<T>(rng, s.N * s.r);
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu::lora_scratch_floats(s, !std::is_same_v<T, float>)) + 1);
        std::vector<T> dx = dx0, da = da0, db = db0, dh = nan_filled<T>(s.M * PR);
        cpu::lora_backward<T>({dx.data(), da.data(), db.data(), dh.data(), dout.data(), x.data(),
                               h.data(), a.data(), b.data(), s, scale, scratch.data()});
        // The magnitudes: the same backward on |inputs| into zeros (dh_mag is |dout| @ |b|).
        std::vector<float> dx_mag(dx.size(), 0.0f), da_mag(da.size(), 0.0f),
            db_mag(db.size(), 0.0f), dh_mag(dh.size());
        cpu::lora_backward<float>({dx_mag.data(), da_mag.data(), db_mag.data(), dh_mag.data(),
                                   abs_of(as_seen(dout)).data(), abs_of(as_seen(x)).data(),
                                   abs_of(as_seen(h)).data(), abs_of(as_seen(a)).data(),
                                   abs_of(as_seen(b)).data(), s, scale, nullptr});

        DeviceBuffer<T> x_d(x), a_d(a), b_d(b), h_d(h), dout_d(dout), dx_d(dx0), da_d(da0),
            db_d(db0), dh_d(dh.size());
        dh_d.poison();
        cuda::lora_backward<T>({dx_d.get(), da_d.get(), db_d.get(), dh_d.get(), dout_d.get(),
                                x_d.get(), h_d.get(), a_d.get(), b_d.get(), s, scale, lt.workspace},
                               lt.launch);
        const double eps = intermediate_rounding<T>();
        const Vec no_slack_dh(dh.size(), 0.0), no_slack_db(db.size(), 0.0);
        expect_within("dh", dh_d.download(), dh, for_sum_of(tolerance<T>(), s.N), no_slack_dh);
        expect_within("db", db_d.download(), db, for_sum_of(tolerance<T>(), s.M), no_slack_db);
        const std::vector<T> da_gpu = da_d.download();
        expect_within("da", da_gpu, da, for_sum_of(tolerance<T>(), s.M), scaled(da_mag, eps));
        expect_within("dinp", dx_d.download(), dx, for_sum_of(tolerance<T>(), PR),
                      scaled(dx_mag, eps));

        // Nothing upstream: dinp null, the adapters' gradients the same bits as with it.
        const std::vector<T> db_gpu = db_d.download();
        da_d.upload(da0);
        db_d.upload(db0);
        dh_d.poison();
        cuda::lora_backward<T>({nullptr, da_d.get(), db_d.get(), dh_d.get(), dout_d.get(),
                                x_d.get(), h_d.get(), a_d.get(), b_d.get(), s, scale, lt.workspace},
                               lt.launch);
        EXPECT_EQ(as_seen(da_d.download()), as_seen(da_gpu)) << "da without dinp";
        EXPECT_EQ(as_seen(db_d.download()), as_seen(db_gpu)) << "db without dinp";
    }
}

// A fresh adapter (B = 0) leaves out as it was, bit for bit, whatever A and the input hold.
TYPED_TEST(LoraCuda, ZeroBLeavesOutUnchanged) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    const LoraTestCase c = {37, 99, 45, 5, 3, 51};
    const LoraShape s = shape_of(c);
    const std::int64_t PR = s.parts * s.r;
    const auto x = random_storage<T>(rng, s.M * s.K), a = random_storage<T>(rng, PR * s.K),
               out0 = random_storage<T>(rng, s.M * s.N);
    const std::vector<T> b(static_cast<std::size_t>(s.N * s.r), from_float<T>(0.0f));
    DeviceBuffer<T> x_d(x), a_d(a), b_d(b), out_d(out0), h_d(static_cast<std::size_t>(s.M * PR));
    h_d.poison();
    cuda::lora_forward<T>(
        {out_d.get(), h_d.get(), x_d.get(), a_d.get(), b_d.get(), s, 0.4f, lt.workspace},
        lt.launch);
    EXPECT_EQ(as_seen(out_d.download()), as_seen(out0));
}

}  // namespace
}  // namespace napkin
