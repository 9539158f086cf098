// The fp8 GEMMs through cuBLASLt (kernels/cuda/matmul.cu) against the CPU's
// (kernels/cpu/matmul.cpp) on the same fp8 operands: forward with and without bias, backward
// accumulating into pre-filled bf16 gradients (the transposes into the TN form the fp8 kernels need
// included), and the shapes cuBLASLt's fp8 kernels refuse, refused before any launch.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "core/fp8.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct MatmulFp8TestShape {
    std::int64_t M, N, K;
};
constexpr MatmulFp8TestShape kMatmulFp8TestShapes[] = {
    {16, 16, 16}, {32, 48, 64}, {64, 96, 80}, {128, 768, 64}, {48, 16, 256}};

// Both sides multiply the same exact fp8 products; only the fp32 accumulation order differs
// (for_sum_of, over terms of up to the operands' size), then one rounding to bf16.
Tolerance fp8_tolerance(std::int64_t terms, double term_size) {
    Tolerance t = tolerance<bf16_t>();
    t.abs = t.abs * term_size + static_cast<double>(terms) * 0x1p-23 * term_size;
    return t;
}

template <class Q>
struct Operand {
    std::vector<Q> codes;
    std::vector<float> scale = std::vector<float>(kFp8ScaleFloats);
};

template <class Q>
Operand<Q> operand(std::mt19937& rng, std::int64_t n, double stddev) {
    const auto x = random_storage<bf16_t>(rng, n, stddev);
    Operand<Q> o;
    o.codes.resize(static_cast<std::size_t>(n));
    cpu::quantize<Q, bf16_t>({o.codes.data(), o.scale.data(), x.data(), n});
    return o;
}

TEST(MatmulFp8Cuda, ForwardAndBackwardMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const MatmulFp8TestShape& s : kMatmulFp8TestShapes) {
        for (bool with_bias : {false, true}) {
            SCOPED_TRACE(case_name<bf16_t>(s.M, s.N, s.K) + (with_bias ? " bias" : ""));
            const auto x = operand<f8e4m3_t>(rng, s.M * s.K, 1.0);
            const auto w = operand<f8e4m3_t>(rng, s.N * s.K, 0.02);
            const auto bias = random_storage<bf16_t>(rng, s.N);
            const auto dout = random_storage<bf16_t>(rng, s.M * s.N, 1.0);
            Operand<f8e5m2_t> g;
            g.codes.resize(dout.size());
            cpu::quantize<f8e5m2_t, bf16_t>(
                {g.codes.data(), g.scale.data(), dout.data(), s.M * s.N});
            std::vector<float> scratch(
                static_cast<std::size_t>(cpu::matmul_scratch_floats(s.M, s.N, s.K)));

            std::vector<bf16_t> out(static_cast<std::size_t>(s.M * s.N));
            cpu::matmul_fp8_forward({out.data(), x.codes.data(), x.scale.data(), w.codes.data(),
                                     w.scale.data(), with_bias ? bias.data() : nullptr, s.M, s.N,
                                     s.K, scratch.data()});
            // Small prefills: the products dominate what is compared.
            const auto dx0 = random_storage<bf16_t>(rng, s.M * s.K, 0.01),
                       dw0 = random_storage<bf16_t>(rng, s.N * s.K, 0.01);
            const auto db0 = random_storage<bf16_t>(rng, s.N, 0.01);
            std::vector<bf16_t> dx = dx0, dw = dw0, db = db0;
            // The transposed codes the backward's casts write (quantize_transpose).
            std::vector<f8e4m3_t> wt(w.codes.size());
            cpu::transpose_fp8({wt.data(), w.codes.data(), s.N, s.K});
            std::vector<f8e5m2_t> gt(g.codes.size());
            cpu::transpose_fp8({gt.data(), g.codes.data(), s.M, s.N});
            cpu::matmul_fp8_backward({dx.data(), dw.data(), with_bias ? db.data() : nullptr,
                                      dout.data(), g.codes.data(), nullptr, g.scale.data(),
                                      x.codes.data(), x.scale.data(), wt.data(), w.scale.data(),
                                      s.M, s.N, s.K, scratch.data()});

            DeviceBuffer<f8e4m3_t> x_d(x.codes), w_d(w.codes), wt_d(wt);
            DeviceBuffer<f8e5m2_t> g_d(g.codes);
            DeviceBuffer<float> xs_d(x.scale), ws_d(w.scale), gs_d(g.scale);
            DeviceBuffer<bf16_t> bias_d(bias), dout_d(dout), out_d(out.size()), dx_d(dx0),
                dw_d(dw0), db_d(db0);
            // The backward's scratch: the workspace, then dout8^T's place and inp8^T's
            // (poisoned); dout8^T is copied into its place, as the engine's cast writes it.
            DeviceBuffer<float> scratch_d((cuda::kMatmulWorkspaceBytes +
                                           cuda::matmul_fp8_backward_scratch_bytes(s.M, s.N, s.K)) /
                                          sizeof(float));
            out_d.poison();
            scratch_d.poison();
            cuda::matmul_fp8_forward(
                {out_d.get(), x_d.get(), xs_d.get(), w_d.get(), ws_d.get(),
                 with_bias ? bias_d.get() : nullptr, s.M, s.N, s.K, lt.workspace},
                lt.launch);
            f8e5m2_t* gt_in_scratch = cuda::matmul_fp8_dout_t(scratch_d.get());
            NAPKIN_CUDA_CHECK(
                cudaMemcpy(gt_in_scratch, gt.data(), gt.size(), cudaMemcpyHostToDevice));
            cuda::matmul_fp8_backward(
                {dx_d.get(), dw_d.get(), with_bias ? db_d.get() : nullptr, dout_d.get(), g_d.get(),
                 gt_in_scratch, gs_d.get(), x_d.get(), xs_d.get(), wt_d.get(), ws_d.get(), s.M, s.N,
                 s.K, scratch_d.get()},
                lt.launch);
            expect_match("out", out_d.download(), out, fp8_tolerance(s.K, 0.02 * std::sqrt(s.K)));
            // dinp's terms are dout (~1) x weight (~0.02), dweight's dout x inp (~1).
            expect_match("dinp", dx_d.download(), dx, fp8_tolerance(s.N, 0.02 * std::sqrt(s.N)));
            expect_match("dweight", dw_d.download(), dw, fp8_tolerance(s.M, std::sqrt(s.M)));
            if (with_bias)
                expect_match("dbias", db_d.download(), db, fp8_tolerance(s.M, std::sqrt(s.M)));
        }
    }
}

// cuBLASLt's fp8 kernels want every dimension a multiple of 16: anything else is refused with
// a message (NAPKIN_CUDA_REQUIRE's InternalError) before a launch, not left to the library.
TEST(MatmulFp8Cuda, ShapesOffSixteenAreRefused) {
    NAPKIN_SKIP_WITHOUT_GPU();
    CublasLt lt;
    DeviceBuffer<f8e4m3_t> a(64 * 64), b(64 * 64);
    DeviceBuffer<float> scale(std::vector<float>{1.0f, 1.0f});
    DeviceBuffer<bf16_t> out(64 * 64);
    for (const MatmulFp8TestShape& s :
         {MatmulFp8TestShape{8, 16, 16}, MatmulFp8TestShape{16, 24, 16},
          MatmulFp8TestShape{16, 16, 40}}) {
        EXPECT_THROW(cuda::matmul_fp8_forward({out.get(), a.get(), scale.get(), b.get(),
                                               scale.get(), nullptr, s.M, s.N, s.K, lt.workspace},
                                              lt.launch),
                     InternalError)
            << s.M << " " << s.N << " " << s.K;
    }
}

}  // namespace
}  // namespace napkin
