// The MLP's GEMMs with GELU in cuBLASLt's epilogues (kernels/cuda/matmul.cu) against their CPU
// twins (kernels/cpu/matmul.cpp): matmul_gelu_forward (GELU_AUX_BIAS) and matmul_gelu_backward
// (DGELU_BGRAD on the input gradient, BGRADB on the weight gradient), fused where the AUX
// leading dimension is a multiple of 8 and unfused otherwise, outputs poisoned, gradients
// pre-filled (they accumulate). The operands are multiples of 2^-6 up to 1/2, so every GEMM sum
// is exact in fp32 whatever its order: the fused paths then match the twins bit for bit, which
// shows where the rounding happens (GELU of the fp32 sum, not of the rounded pre-activation).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <type_traits>

#include "kernels/activation.h"
#include "kernels/matmul.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct MatmulGeluTestShape {
    std::int64_t M, N, K;
};

// Values k / 64, |k| <= 32: products are multiples of 2^-12 up to 1/4, so a sum of a hundred is
// exact in fp32 (24 bits) but needs more than bf16's 8 or fp16's 11.
template <class T>
std::vector<T> exact_storage(std::mt19937& rng, std::int64_t n) {
    std::uniform_int_distribution<int> k(-32, 32);
    Vec v(static_cast<std::size_t>(n));
    for (double& x : v)
        x = k(rng) / 64.0;
    return to_storage<T>(v);
}

template <class T>
std::vector<float> cpu_scratch(const MatmulGeluTestShape& s) {
    return std::vector<float>(static_cast<std::size_t>(cpu::matmul_scratch_floats(s.M, s.N, s.K)));
}

// Each test's fresh operands, its seed in the failures' trace.
template <class T>
class MatmulGeluCuda : public ::testing::Test {
protected:
    void SetUp() override { NAPKIN_SKIP_WITHOUT_GPU(); }
    const unsigned seed_ = fresh_seed();
    std::mt19937 rng_{seed_};
    std::string seed_trace() const { return "seed " + std::to_string(seed_); }
};
TYPED_TEST_SUITE(MatmulGeluCuda, StorageTypes);

// Fused (N % 8 == 0): the twin's bits. Unfused (cuBLASLt declines AUX with N % 8 != 0): the
// bits of matmul_forward then gelu_forward, which for 16-bit storage differ from the twin's.
TYPED_TEST(MatmulGeluCuda, ForwardEpilogueRoundsAsItsCpuTwin) {
    using T = TypeParam;
    SCOPED_TRACE(this->seed_trace());
    std::mt19937& rng = this->rng_;
    CublasLt lt;
    for (const MatmulGeluTestShape& s :
         {MatmulGeluTestShape{7, 16, 40}, MatmulGeluTestShape{33, 64, 96},
          MatmulGeluTestShape{5, 13, 40}}) {
        const bool fused = s.N % 8 == 0;
        SCOPED_TRACE(case_name<T>(s.M, s.N, s.K) + (fused ? " fused" : " unfused"));
        const auto inp = exact_storage<T>(rng, s.M * s.K), w = exact_storage<T>(rng, s.N * s.K);
        const auto bias = exact_storage<T>(rng, s.N);
        const auto n = static_cast<std::size_t>(s.M * s.N);
        std::vector<T> twin_out(n), twin_pre(n), pair_out(n), pair_pre(n);
        auto scratch = cpu_scratch<T>(s);
        cpu::matmul_gelu_forward<T>({twin_out.data(), twin_pre.data(), inp.data(), w.data(),
                                     bias.data(), s.M, s.N, s.K, scratch.data()});
        cpu::matmul_forward<T>(
            {pair_pre.data(), inp.data(), w.data(), bias.data(), s.M, s.N, s.K, scratch.data()});
        cpu::gelu_forward<T>({pair_out.data(), pair_pre.data(), s.M * s.N});

        DeviceBuffer<T> inp_d(inp), w_d(w), bias_d(bias), out_d(n), pre_d(n);
        out_d.poison();
        pre_d.poison();
        cuda::matmul_gelu_forward<T>({out_d.get(), pre_d.get(), inp_d.get(), w_d.get(),
                                      bias_d.get(), s.M, s.N, s.K, lt.workspace},
                                     lt.launch);
        expect_match("pre_gelu", pre_d.download(), twin_pre, Tolerance{});
        expect_match("out", out_d.download(), fused ? twin_out : pair_out, Tolerance{});
        // The two roundings are different functions (except in fp32, where nothing rounds).
        const bool same = as_seen(twin_out) == as_seen(pair_out);
        EXPECT_EQ(same, (std::is_same_v<T, float>));
    }
}

// Inputs of the backward: dout (M, N), the proj's weight (N, K), its input gelu(pre) (M, K),
// the pre-activation (M, K); gradients pre-filled.
template <class T>
struct BackwardCase {
    std::vector<T> dout, w, inp, pre, dpre_bias0, dw0, db0;
    BackwardCase(std::mt19937& rng, const MatmulGeluTestShape& s)
        : dout(exact_storage<T>(rng, s.M * s.N)),
          w(exact_storage<T>(rng, s.N * s.K)),
          inp(exact_storage<T>(rng, s.M * s.K)),
          pre(random_storage<T>(rng, s.M * s.K, 2.0)),
          dpre_bias0(random_storage<T>(rng, s.K)),
          dw0(random_storage<T>(rng, s.N * s.K)),
          db0(random_storage<T>(rng, s.N)) {}
};

// The unfused sequence the engine runs without the epilogues: the proj's backward into a zeroed
// dnarrow, gelu_backward into a zeroed dwide, the fc's bias gradient from dwide.
template <class T>
void unfused_backward(const BackwardCase<T>& c, const MatmulGeluTestShape& s, std::vector<T>& dpre,
                      std::vector<T>& dpre_bias, std::vector<T>& dw, std::vector<T>& db) {
    auto scratch = cpu_scratch<T>(s);
    std::vector<T> dact(static_cast<std::size_t>(s.M * s.K), from_float<T>(0.0f));
    cpu::matmul_backward<T>({dact.data(), dw.data(), db.data(), c.dout.data(), c.inp.data(),
                             c.w.data(), s.M, s.N, s.K, scratch.data(),
                             /*bias_grad_epilogue=*/true});
    std::fill(dpre.begin(), dpre.end(), from_float<T>(0.0f));
    cpu::gelu_backward<T>({dpre.data(), c.pre.data(), dact.data(), s.M * s.K});
    cpu::matmul_backward<T>({nullptr, nullptr, dpre_bias.data(), dpre.data(), nullptr, nullptr, s.M,
                             s.K, 0, scratch.data()});
}

TYPED_TEST(MatmulGeluCuda, BackwardEpiloguesMatchTheirCpuTwin) {
    using T = TypeParam;
    SCOPED_TRACE(this->seed_trace());
    std::mt19937& rng = this->rng_;
    CublasLt lt;
    for (const MatmulGeluTestShape& s :
         {MatmulGeluTestShape{7, 13, 16}, MatmulGeluTestShape{40, 24, 64},
          MatmulGeluTestShape{5, 8, 3}, MatmulGeluTestShape{9, 16, 13}}) {
        const bool fused = s.K % 8 == 0;
        SCOPED_TRACE(case_name<T>(s.M, s.N, s.K) + (fused ? " fused" : " unfused"));
        const BackwardCase<T> c(rng, s);
        std::vector<T> dpre(static_cast<std::size_t>(s.M * s.K));
        std::vector<T> dpre_bias = c.dpre_bias0, dw = c.dw0, db = c.db0;
        if (fused) {
            auto scratch = cpu_scratch<T>(s);
            cpu::matmul_gelu_backward<T>({dpre.data(), dpre_bias.data(), dw.data(), db.data(),
                                          c.dout.data(), c.inp.data(), c.w.data(), c.pre.data(),
                                          s.M, s.N, s.K, scratch.data()});
        } else {
            unfused_backward(c, s, dpre, dpre_bias, dw, db);
        }

        DeviceBuffer<T> dout_d(c.dout), w_d(c.w), inp_d(c.inp), pre_d(c.pre), dpre_d(dpre.size()),
            dpre_bias_d(c.dpre_bias0), dw_d(c.dw0), db_d(c.db0);
        dpre_d.poison();
        cuda::matmul_gelu_backward<T>(
            {dpre_d.get(), dpre_bias_d.get(), dw_d.get(), db_d.get(), dout_d.get(), inp_d.get(),
             w_d.get(), pre_d.get(), s.M, s.N, s.K, lt.workspace},
            lt.launch);
        // The sums are exact or taken in the same order on both sides: bit for bit, but for the
        // fc bias's sums of inexact values by the kernel (its own order) when unfused.
        expect_match("dpre", dpre_d.download(), dpre, Tolerance{});
        expect_match("dpre_bias (fc bias)", dpre_bias_d.download(), dpre_bias,
                     fused ? Tolerance{} : for_sum_of(tolerance<T>(), s.M));
        expect_match("dweight", dw_d.download(), dw, Tolerance{});
        expect_match("dbias", db_d.download(), db, Tolerance{});
    }
}

// Without a workspace the bias gradients have no scratch: DGELU alone, the sums by kernels.
TYPED_TEST(MatmulGeluCuda, BackwardWithoutWorkspaceSumsTheBiasesByKernel) {
    using T = TypeParam;
    SCOPED_TRACE(this->seed_trace());
    std::mt19937& rng = this->rng_;
    CublasLt lt(0);
    const MatmulGeluTestShape s{12, 24, 32};
    const BackwardCase<T> c(rng, s);
    std::vector<T> dpre(static_cast<std::size_t>(s.M * s.K));
    std::vector<T> dpre_bias = c.dpre_bias0, dw = c.dw0, db = c.db0;
    auto scratch = cpu_scratch<T>(s);
    cpu::matmul_gelu_backward<T>({dpre.data(), nullptr, dw.data(), nullptr, c.dout.data(),
                                  c.inp.data(), c.w.data(), c.pre.data(), s.M, s.N, s.K,
                                  scratch.data()});
    // The fc bias from the rounded dpre in one rounding, the proj's from dout: the kernels' sums.
    cpu::matmul_backward<T>({nullptr, nullptr, dpre_bias.data(), dpre.data(), nullptr, nullptr, s.M,
                             s.K, 0, scratch.data()});
    cpu::matmul_backward<T>({nullptr, nullptr, db.data(), c.dout.data(), nullptr, nullptr, s.M, s.N,
                             0, scratch.data()});

    DeviceBuffer<T> dout_d(c.dout), w_d(c.w), inp_d(c.inp), pre_d(c.pre), dpre_d(dpre.size()),
        dpre_bias_d(c.dpre_bias0), dw_d(c.dw0), db_d(c.db0);
    dpre_d.poison();
    cuda::matmul_gelu_backward<T>(
        {dpre_d.get(), dpre_bias_d.get(), dw_d.get(), db_d.get(), dout_d.get(), inp_d.get(),
         w_d.get(), pre_d.get(), s.M, s.N, s.K, nullptr},
        lt.launch);
    expect_match("dpre", dpre_d.download(), dpre, Tolerance{});
    expect_match("dpre_bias (fc bias)", dpre_bias_d.download(), dpre_bias,
                 for_sum_of(tolerance<T>(), s.M));
    expect_match("dweight", dw_d.download(), dw, Tolerance{});
    expect_match("dbias", db_d.download(), db, Tolerance{});
}

}  // namespace
}  // namespace napkin
