// The emulated cuBLASLt's backward epilogues (tests/cuda_emu/cublaslt_emu.cpp) as cublasLt.h
// documents them: DGELU multiplies the product by gelu' of the AUX input (leading dimension a
// multiple of 8, at least D's rows), DGELU_BGRAD also writes the row sums of that result through
// BIAS_POINTER, BGRADA and BGRADB the sums of op(A)'s rows and op(B)'s columns over k. What the
// library refuses (an AUX leading dimension off the rule, a missing pointer) is refused, so the
// callers' unfused paths run on the emulator as they would on a GPU.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/cuda_emu/emu_buffer.h"
#include "tests/cuda_emu/emu_state.h"

namespace napkin::emu {
namespace {

using Floats = Buffer<float>;

// GPT-2's gelu' in double: the emulator's fp32 formula must land within a few ulps of it.
double gelu_grad(double x) {
    const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    const double t = std::tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// One fp32 GEMM D (m, n) = A (m, k) @ B (k, n), column-major, no transposes, with an epilogue.
struct Gemm {
    std::int64_t m = 8, n = 3, k = 2;
    std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    float* bias = nullptr;
    float* aux = nullptr;
    std::int64_t aux_ld = 0;

    cublasStatus_t run(const float* a, const float* b, float* d) const {
        cublasLtHandle_t handle = nullptr;
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
        EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                  CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof epilogue);
        if (bias != nullptr)
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias);
        if (aux != nullptr) {
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                           sizeof aux);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                           sizeof aux_ld);
        }
        const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, u(m), u(k), m);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, u(k), u(n), k);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, u(m), u(n), m);
        const float alpha = 1.0f, beta = 0.0f;
        const cublasStatus_t st = cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, ld, d,
                                                 ld, nullptr, nullptr, 0, nullptr);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(op);
        cublasLtDestroy(handle);
        return st;
    }
};

class CudaEmuEpilogue : public ::testing::Test {
protected:
    void SetUp() override { reset_for_test(); }
};

// A (8, 2) of rows (i, 1), B (2, 3) of columns (1, j): the product is i + j, exact.
std::vector<float> a_values() {
    std::vector<float> a(16);
    for (int i = 0; i < 8; ++i) {
        a[static_cast<std::size_t>(i)] = static_cast<float>(i);
        a[static_cast<std::size_t>(8 + i)] = 1.0f;
    }
    return a;
}
const std::vector<float> kB = {1, 0, 1, 1, 1, 2};

TEST_F(CudaEmuEpilogue, DgeluScalesByGeluGradientOfAuxAndSumsTheRows) {
    Floats a(a_values()), b(kB), d(std::vector<float>(24, NAN)), bias(std::vector<float>(8, NAN));
    std::vector<float> pre(24);
    for (std::size_t i = 0; i < pre.size(); ++i)
        pre[i] = -3.0f + 0.25f * static_cast<float>(i);
    Floats aux(pre);
    Gemm g;
    g.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    g.aux = aux.get();
    g.aux_ld = 8;
    g.bias = bias.get();
    ASSERT_EQ(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS);
    const std::vector<float> out = d.host(), sums = bias.host();
    for (int i = 0; i < 8; ++i) {
        double row = 0.0;
        for (int j = 0; j < 3; ++j) {
            const std::size_t e = static_cast<std::size_t>(i + 8 * j);
            const double want = (i + j) * gelu_grad(pre[e]);
            EXPECT_NEAR(out[e], want, 1e-5 * (1.0 + std::fabs(want))) << i << ", " << j;
            row += out[e];
        }
        EXPECT_NEAR(sums[static_cast<std::size_t>(i)], row, 1e-5 * (1.0 + std::fabs(row))) << i;
    }
}

TEST_F(CudaEmuEpilogue, BgradSumsTheOperandOverK) {
    Floats a(a_values()), b(kB), d(std::vector<float>(24, NAN));
    Floats bias_a(std::vector<float>(8, NAN)), bias_b(std::vector<float>(3, NAN));
    Gemm g;
    g.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    g.bias = bias_a.get();
    ASSERT_EQ(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 8; ++i)
        EXPECT_EQ(bias_a.host()[static_cast<std::size_t>(i)], static_cast<float>(i + 1));
    EXPECT_EQ(d.host()[1 + 8 * 2], 3.0f) << "D is the plain product";
    g.epilogue = CUBLASLT_EPILOGUE_BGRADB;  // the columns of B (k, n): 1, 2, 3
    g.bias = bias_b.get();
    ASSERT_EQ(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(bias_b.host(), (std::vector<float>{1, 2, 3}));
}

TEST_F(CudaEmuEpilogue, RefusesWhatCublasLtRefuses) {
    Floats a(a_values()), b(kB), d(std::vector<float>(24, 0.0f)), aux(std::vector<float>(32, 0));
    Floats bias(std::vector<float>(8, 0.0f));
    Gemm g;
    g.epilogue = CUBLASLT_EPILOGUE_DGELU;
    g.aux = aux.get();
    g.aux_ld = 4;  // below m = 8, and not the rule's multiple of 8 anyway
    EXPECT_NE(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS) << "AUX ld 4";
    g.aux = nullptr;
    g.aux_ld = 8;
    EXPECT_NE(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS) << "DGELU without AUX";
    g.epilogue = CUBLASLT_EPILOGUE_BGRADB;  // no BIAS_POINTER
    EXPECT_NE(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS) << "BGRADB without bias";
    g.m = 6;  // A as (6, 2) with ld 6: an AUX of ld 8 would be fine, one of ld 6 is not
    g.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    g.aux = aux.get();
    g.aux_ld = 6;
    g.bias = bias.get();
    EXPECT_NE(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS) << "AUX ld 6";
    g.aux_ld = 8;
    EXPECT_EQ(g.run(a.get(), b.get(), d.get()), CUBLAS_STATUS_SUCCESS) << "AUX ld 8";
}

}  // namespace
}  // namespace napkin::emu
