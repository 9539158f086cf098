// matmul through cuBLASLt against the CPU's OpenBLAS path (kernels/cpu/matmul.cpp): forward with
// and without bias, the fused GELU epilogue (with and without its AUX output, shapes that take
// the fused and the fallback path), backward accumulating into pre-filled gradients, TF32, and a
// call without a workspace. Odd sizes exercise cuBLASLt's unaligned leading dimensions.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/activation.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct MatmulTestShape {
    std::int64_t M, N, K;
};
constexpr MatmulTestShape kMatmulTestShapes[] = {{1, 1, 1},     {7, 13, 5},     {64, 96, 80},
                                                 {33, 50, 257}, {128, 768, 64}, {5, 8, 3}};

// A GEMM output element sums K products: the fp32 accumulation order differs between OpenBLAS
// and cuBLAS, which the absolute part covers (kernel_test_util.h's for_sum_of).
template <class T>
Tolerance gemm_tolerance(std::int64_t K) {
    return for_sum_of(tolerance<T>(), K);
}

template <class T>
class MatmulCuda : public ::testing::Test {};
TYPED_TEST_SUITE(MatmulCuda, StorageTypes);

TYPED_TEST(MatmulCuda, ForwardMatchesCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const MatmulTestShape& s : kMatmulTestShapes) {
        for (bool with_bias : {false, true}) {
            SCOPED_TRACE(case_name<T>(s.M, s.N, s.K) + (with_bias ? " bias" : ""));
            const auto inp = random_storage<T>(rng, s.M * s.K),
                       w = random_storage<T>(rng, s.N * s.K);
            const auto bias = random_storage<T>(rng, s.N);
            std::vector<T> out(static_cast<std::size_t>(s.M * s.N));
            std::vector<float> scratch(
                static_cast<std::size_t>(cpu::matmul_scratch_floats(s.M, s.N, s.K)));
            cpu::matmul_forward<T>({out.data(), inp.data(), w.data(),
                                    with_bias ? bias.data() : nullptr, s.M, s.N, s.K,
                                    scratch.data()});

            DeviceBuffer<T> inp_d(inp), w_d(w), bias_d(bias), out_d(out.size());
            out_d.poison();
            cuda::matmul_forward<T>(
                {out_d.get(), inp_d.get(), w_d.get(), with_bias ? bias_d.get() : nullptr, s.M, s.N,
                 s.K, lt.workspace},
                lt.launch);
            expect_match("out", out_d.download(), out, gemm_tolerance<T>(s.K));
        }
    }
}

TYPED_TEST(MatmulCuda, GeluEpilogueMatchesCpuMatmulThenGelu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const MatmulTestShape& s :
         kMatmulTestShapes) {  // N % 8 == 0 takes the fused AUX path, others the fallback
        for (bool keep_pre : {false, true}) {
            for (bool with_bias : {false, true}) {
                SCOPED_TRACE(case_name<T>(s.M, s.N, s.K) + (keep_pre ? " aux" : "") +
                             (with_bias ? " bias" : ""));
                const auto inp = random_storage<T>(rng, s.M * s.K, 0.5),
                           w = random_storage<T>(rng, s.N * s.K, 0.5);
                const auto bias = random_storage<T>(rng, s.N);
                std::vector<T> pre(static_cast<std::size_t>(s.M * s.N)), out(pre.size());
                std::vector<float> scratch(
                    static_cast<std::size_t>(cpu::matmul_scratch_floats(s.M, s.N, s.K)));
                cpu::matmul_forward<T>({pre.data(), inp.data(), w.data(),
                                        with_bias ? bias.data() : nullptr, s.M, s.N, s.K,
                                        scratch.data()});
                cpu::gelu_forward<T>({out.data(), pre.data(), s.M * s.N});

                DeviceBuffer<T> inp_d(inp), w_d(w), bias_d(bias), out_d(out.size()),
                    pre_d(pre.size());
                out_d.poison();
                pre_d.poison();
                cuda::matmul_gelu_forward<T>(
                    {out_d.get(), keep_pre ? pre_d.get() : nullptr, inp_d.get(), w_d.get(),
                     with_bias ? bias_d.get() : nullptr, s.M, s.N, s.K, lt.workspace},
                    lt.launch);
                // cuBLASLt's GELU is its own formula, and the fused path applies it before the
                // rounding to T that the CPU's two steps take in between: 1e-3 more absolute.
                Tolerance tol = gemm_tolerance<T>(s.K);
                tol.abs += 1e-3;
                expect_match("gelu out", out_d.download(), out, tol);
                if (keep_pre)
                    expect_match("pre_gelu", pre_d.download(), pre, gemm_tolerance<T>(s.K));
            }
        }
    }
}

TYPED_TEST(MatmulCuda, BackwardAccumulatesLikeCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const MatmulTestShape& s : kMatmulTestShapes) {
        SCOPED_TRACE(case_name<T>(s.M, s.N, s.K));
        const auto inp = random_storage<T>(rng, s.M * s.K), w = random_storage<T>(rng, s.N * s.K);
        const auto dout = random_storage<T>(rng, s.M * s.N);
        const auto dinp0 = random_storage<T>(rng, s.M * s.K),
                   dw0 = random_storage<T>(rng, s.N * s.K);
        const auto db0 = random_storage<T>(rng, s.N);
        std::vector<T> dinp = dinp0, dw = dw0, db = db0;
        std::vector<float> scratch(
            static_cast<std::size_t>(cpu::matmul_scratch_floats(s.M, s.N, s.K)));
        cpu::matmul_backward<T>({dinp.data(), dw.data(), db.data(), dout.data(), inp.data(),
                                 w.data(), s.M, s.N, s.K, scratch.data()});

        DeviceBuffer<T> inp_d(inp), w_d(w), dout_d(dout), dinp_d(dinp0), dw_d(dw0), db_d(db0);
        cuda::matmul_backward<T>({dinp_d.get(), dw_d.get(), db_d.get(), dout_d.get(), inp_d.get(),
                                  w_d.get(), s.M, s.N, s.K, lt.workspace},
                                 lt.launch);
        expect_match("dinp", dinp_d.download(), dinp, gemm_tolerance<T>(s.N));
        expect_match("dweight", dw_d.download(), dw, gemm_tolerance<T>(s.M));
        expect_match("dbias", db_d.download(), db, gemm_tolerance<T>(s.M));

        // Frozen weight: only dinp.
        dinp_d.upload(dinp0);
        dw_d.upload(dw0);
        cuda::matmul_backward<T>({dinp_d.get(), nullptr, nullptr, dout_d.get(), inp_d.get(),
                                  w_d.get(), s.M, s.N, s.K, lt.workspace},
                                 lt.launch);
        expect_match("dinp (frozen)", dinp_d.download(), dinp, gemm_tolerance<T>(s.N));
        expect_match("dweight untouched", dw_d.download(), dw0, Tolerance{});
    }
}

TEST(MatmulCudaFp32, Tf32AndNoWorkspace) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt with_ws, without_ws(0);
    with_ws.launch.tf32 = true;
    for (const MatmulTestShape& s : kMatmulTestShapes) {
        SCOPED_TRACE(case_name<float>(s.M, s.N, s.K));
        const auto inp = random_storage<float>(rng, s.M * s.K),
                   w = random_storage<float>(rng, s.N * s.K);
        std::vector<float> out(static_cast<std::size_t>(s.M * s.N));
        cpu::matmul_forward<float>({out.data(), inp.data(), w.data(), nullptr, s.M, s.N, s.K});
        DeviceBuffer<float> inp_d(inp), w_d(w), out_d(out.size());
        out_d.poison();
        cuda::matmul_forward<float>(
            {out_d.get(), inp_d.get(), w_d.get(), nullptr, s.M, s.N, s.K, without_ws.workspace},
            without_ws.launch);
        expect_match("fp32, no workspace", out_d.download(), out, gemm_tolerance<float>(s.K));
        // TF32 rounds the inputs to 10 mantissa bits (2^-11 relative): the products' errors add
        // like a random walk over K.
        out_d.poison();
        cuda::matmul_forward<float>(
            {out_d.get(), inp_d.get(), w_d.get(), nullptr, s.M, s.N, s.K, with_ws.workspace},
            with_ws.launch);
        const double walk = 4.0 * std::sqrt(static_cast<double>(s.K)) * 0x1p-10;
        expect_match("tf32", out_d.download(), out, Tolerance{walk, 1e-3});
    }
}

}  // namespace
}  // namespace napkin
