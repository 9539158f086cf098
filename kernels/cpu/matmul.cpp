// matmul on the CPU: OpenBLAS sgemm for the products (row-major, fp32 accumulate); 16-bit
// storage and fp8 codes are widened into the caller's scratch, multiplied in fp32 and narrowed
// back (fp8: after scaling by the operands' scale_inv).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "kernels/cpu/gelu.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

namespace napkin::cpu {

namespace {

template <class T>
void widen(float* dst, const T* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

// dst (C, R) = src (R, C) transposed, widened.
template <class T>
void widen_transposed(float* dst, const T* src, std::int64_t R, std::int64_t C) {
#pragma omp parallel for if (R * C > 65536)
    for (std::int64_t c = 0; c < C; ++c)
        for (std::int64_t r = 0; r < R; ++r)
            dst[c * R + r] = to_float(src[r * C + c]);
}

// dst += src (narrowing the sum back to T).
template <class T>
void accumulate(T* dst, const float* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = from_float<T>(to_float(dst[i]) + src[i]);
}

// out (M, N) = beta * out + a (M, K) @ b (N, K)^T
void gemm_nt(float* out, const float* a, const float* b, std::int64_t M, std::int64_t N, std::int64_t K, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M), static_cast<blasint>(N),
                static_cast<blasint>(K), 1.0f, a, static_cast<blasint>(K), b, static_cast<blasint>(K), beta, out,
                static_cast<blasint>(N));
}

// dinp (M, K) = beta * dinp + dout (M, N) @ weight (N, K)
void gemm_nn(float* out, const float* a, const float* b, std::int64_t M, std::int64_t N, std::int64_t K, float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(K),
                static_cast<blasint>(N), 1.0f, a, static_cast<blasint>(N), b, static_cast<blasint>(K), beta, out,
                static_cast<blasint>(K));
}

// dweight (N, K) = beta * dweight + dout^T (N, M) @ inp (M, K)
void gemm_tn(float* out, const float* dout, const float* inp, std::int64_t M, std::int64_t N, std::int64_t K,
             float beta) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(N), static_cast<blasint>(K),
                static_cast<blasint>(M), 1.0f, dout, static_cast<blasint>(N), inp, static_cast<blasint>(K), beta, out,
                static_cast<blasint>(K));
}

void scale_in_place(float* p, float s, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        p[i] *= s;
}

// dbias (N) += column sums of dout (M, N). round_sum: the sum is rounded into T before the add,
// as CUDA's epilogues hand it over (they write their bias gradient, kernels/cuda/matmul.cu).
template <class T>
void bias_sums(T* dbias, const T* dout, std::int64_t M, std::int64_t N, bool round_sum = false) {
#pragma omp parallel for if (M * N > 65536)
    for (std::int64_t n = 0; n < N; ++n) {
        float sum = 0.0f;
        for (std::int64_t m = 0; m < M; ++m) sum += to_float(dout[m * N + n]);
        if (round_sum) sum = to_float(from_float<T>(sum));
        dbias[n] = from_float<T>(to_float(dbias[n]) + sum);
    }
}

}  // namespace

template <class T>
void matmul_forward(const MatmulForwardArgs<T>& args) {
    const auto& [out, inp, weight, bias, M, N, K, scratch] = args;
    if constexpr (std::is_same_v<T, float>) {
        gemm_nt(out, inp, weight, M, N, K, 0.0f);
        if (bias != nullptr) {
#pragma omp parallel for if (M * N > 65536)
            for (std::int64_t m = 0; m < M; ++m) {
                for (std::int64_t n = 0; n < N; ++n) out[m * N + n] += bias[n];
            }
        }
    } else {
        float* a = scratch;
        float* b = a + M * K;
        float* c = b + N * K;
        widen(a, inp, M * K);
        widen(b, weight, N * K);
        gemm_nt(c, a, b, M, N, K, 0.0f);
#pragma omp parallel for if (M * N > 65536)
        for (std::int64_t m = 0; m < M; ++m) {
            for (std::int64_t n = 0; n < N; ++n) {
                out[m * N + n] = from_float<T>(c[m * N + n] + (bias != nullptr ? to_float(bias[n]) : 0.0f));
            }
        }
    }
}

template <class T>
void matmul_backward(const MatmulBackwardArgs<T>& args) {
    const auto& [dinp, dweight, dbias, dout, inp, weight, M, N, K, scratch, bias_epilogue] = args;
    if constexpr (std::is_same_v<T, float>) {
        if (dinp != nullptr) gemm_nn(dinp, dout, weight, M, N, K, 1.0f);
        if (dweight != nullptr) gemm_tn(dweight, dout, inp, M, N, K, 1.0f);
    } else {
        // Scratch: dout widened (M*N), then the operand (weight N*K or inp M*K), then the product.
        float* g = scratch;
        widen(g, dout, M * N);
        float* operand = g + M * N;
        if (dinp != nullptr) {
            float* product = operand + N * K;
            widen(operand, weight, N * K);
            gemm_nn(product, g, operand, M, N, K, 0.0f);
            accumulate(dinp, product, M * K);
        }
        if (dweight != nullptr) {
            float* product = operand + M * K;
            widen(operand, inp, M * K);
            gemm_tn(product, g, operand, M, N, K, 0.0f);
            accumulate(dweight, product, N * K);
        }
    }
    if (dbias != nullptr) bias_sums(dbias, dout, M, N, bias_epilogue && dweight != nullptr);
}

// The fp32 product of a (a_n elements) and b (b_n) by gemm(c, a, b), one of the three above:
// for float in `out` itself, else the operands widened into scratch and the product after them.
// Returns where it is.
template <class T, class Gemm>
float* fp32_product(T* out, const T* a, std::int64_t a_n, const T* b, std::int64_t b_n,
                    float* scratch, const Gemm& gemm) {
    if constexpr (std::is_same_v<T, float>) {
        gemm(out, a, b);
        return out;
    } else {
        float* wa = scratch;
        float* wb = wa + a_n;
        widen(wa, a, a_n);
        widen(wb, b, b_n);
        gemm(wb + b_n, wa, wb);
        return wb + b_n;
    }
}

template <class T>
void matmul_gelu_forward(const MatmulGeluForwardArgs<T>& args) {
    const auto& [out, pre_gelu, inp, weight, bias, M, N, K, scratch] = args;
    float* c = fp32_product(
        out, inp, M * K, weight, N * K, scratch,
        [&](float* y, const float* x, const float* w) { gemm_nt(y, x, w, M, N, K, 0.0f); });
    const std::int64_t n = M * N;
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
        const float x = c[i] + (bias != nullptr ? to_float(bias[i % N]) : 0.0f);
        if (pre_gelu != nullptr) pre_gelu[i] = from_float<T>(x);
        out[i] = from_float<T>(gelu_value(x));  // c may be out itself (float): x read first
    }
}

template <class T>
void matmul_gelu_backward(const MatmulGeluBackwardArgs<T>& args) {
    const auto& [dpre, dpre_bias, dweight, dbias, dout, inp, weight, pre_gelu, M, N, K, scratch] =
        args;
    matmul_backward<T>({nullptr, dweight, dbias, dout, inp, weight, M, N, K, scratch, true});
    // The input gradient's fp32 product (M, K): in dpre itself for float, else in scratch.
    float* product = fp32_product(
        dpre, dout, M * N, weight, N * K, scratch,
        [&](float* y, const float* g, const float* w) { gemm_nn(y, g, w, M, N, K, 0.0f); });
#pragma omp parallel for if (M * K > 65536)
    for (std::int64_t i = 0; i < M * K; ++i) {
        product[i] *= gelu_grad(to_float(pre_gelu[i]));
        dpre[i] = from_float<T>(product[i]);
    }
    // The fc's bias gradient from the unrounded values, rows in order (as the emulated
    // DGELU_BGRAD sums them), rounded into T and then added (the epilogue writes it).
    if (dpre_bias == nullptr) return;
#pragma omp parallel for if (M * K > 65536)
    for (std::int64_t k = 0; k < K; ++k) {
        float sum = 0.0f;
        for (std::int64_t m = 0; m < M; ++m)
            sum += product[m * K + k];
        dpre_bias[k] = from_float<T>(to_float(dpre_bias[k]) + to_float(from_float<T>(sum)));
    }
}

void matmul_fp8_forward(const MatmulFp8ForwardArgs& args) {
    const auto& [out, inp, inp_scale, weight, weight_scale, bias, M, N, K, scratch] = args;
    float* a = scratch;
    float* b = a + M * K;
    float* c = b + N * K;
    widen(a, inp, M * K);
    widen(b, weight, N * K);
    gemm_nt(c, a, b, M, N, K, 0.0f);
    const float s = inp_scale[kFp8ScaleInv] * weight_scale[kFp8ScaleInv];
#pragma omp parallel for if (M * N > 65536)
    for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t n = 0; n < N; ++n) {
            const float bias_n = bias != nullptr ? to_float(bias[n]) : 0.0f;
            out[m * N + n] = bf16_t(c[m * N + n] * s + bias_n);
        }
    }
}

void matmul_fp8_backward(const MatmulFp8BackwardArgs& args) {
    const auto& [dinp, dweight, dbias, dout, dout8, dout8_t, dout_scale, inp, inp_scale, weight_t,
                 weight_scale, M, N, K, scratch] = args;
    // Scratch as the 16-bit path: dout8 widened (M*N), the operand, then the product. The
    // weight is widened back into its (N, K) layout: the same sgemm as on (N, K) codes.
    float* g = scratch;
    float* operand = g + M * N;
    if (dinp != nullptr || dweight != nullptr) widen(g, dout8, M * N);
    if (dinp != nullptr) {
        float* product = operand + N * K;
        widen_transposed(operand, weight_t, K, N);
        gemm_nn(product, g, operand, M, N, K, 0.0f);
        scale_in_place(product, dout_scale[kFp8ScaleInv] * weight_scale[kFp8ScaleInv], M * K);
        accumulate(dinp, product, M * K);
    }
    if (dweight != nullptr) {
        float* product = operand + M * K;
        widen(operand, inp, M * K);
        gemm_tn(product, g, operand, M, N, K, 0.0f);
        scale_in_place(product, dout_scale[kFp8ScaleInv] * inp_scale[kFp8ScaleInv], N * K);
        accumulate(dweight, product, N * K);
    }
    if (dbias != nullptr) bias_sums(dbias, dout, M, N);
}

double sgemm_peak_flops(int n, int reps) {
    std::vector<float> a(static_cast<std::size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size());
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        gemm_nt(c.data(), a.data(), b.data(), n, n, n, 0.0f);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s);
    }
    return best;
}

#define NAPKIN_INSTANTIATE_MATMUL(T)                                       \
    template void matmul_forward<T>(const MatmulForwardArgs<T>&);          \
    template void matmul_backward<T>(const MatmulBackwardArgs<T>&);        \
    template void matmul_gelu_forward<T>(const MatmulGeluForwardArgs<T>&); \
    template void matmul_gelu_backward<T>(const MatmulGeluBackwardArgs<T>&);
NAPKIN_INSTANTIATE_MATMUL(float)
NAPKIN_INSTANTIATE_MATMUL(bf16_t)
NAPKIN_INSTANTIATE_MATMUL(f16_t)

}  // namespace napkin::cpu
