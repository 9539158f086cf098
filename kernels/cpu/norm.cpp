// LayerNorm and RMSNorm on the CPU (declared in kernels/norm.h). Rows are independent, so the
// per-row work is one OpenMP iteration per row. The parameter gradients sum over rows: threads
// own blocks of kColumnBlock columns and walk every row, so each dweight/dbias element has one
// writer and a fixed summation order (race-free and deterministic, no allocation).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/half.h"
#include "kernels/norm.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 15;  // elements below which threads cost more than they save
constexpr std::int64_t kColumnBlock = 64;

// dweight (C) += sum over rows of dout * xhat, dbias (C) += sum over rows of dout, with
// xhat = (inp - mean) * rstd (mean null for RMSNorm). Either output may be null.
template <class T>
void norm_parameter_grads(T* dweight, T* dbias, const T* dout, const T* inp, const float* mean,
                          const float* rstd, std::int64_t N, std::int64_t C) {
    if (dweight == nullptr && dbias == nullptr) return;
    const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t c0 = blk * kColumnBlock;
        const std::int64_t cn = std::min(kColumnBlock, C - c0);
        float dw[kColumnBlock] = {};  // fp32 sums over rows, whatever T is
        float db[kColumnBlock] = {};
        for (std::int64_t n = 0; n < N; ++n) {
            const T* x = inp + n * C + c0;    // (cn)
            const T* dy = dout + n * C + c0;  // (cn)
            const float m = mean != nullptr ? mean[n] : 0.0f;
            const float s = rstd[n];
            for (std::int64_t j = 0; j < cn; ++j) {
                const float g = to_float(dy[j]);
                dw[j] += g * (to_float(x[j]) - m) * s;
                db[j] += g;
            }
        }
        for (std::int64_t j = 0; j < cn; ++j) {
            if (dweight != nullptr)
                dweight[c0 + j] = from_float<T>(to_float(dweight[c0 + j]) + dw[j]);
            if (dbias != nullptr) dbias[c0 + j] = from_float<T>(to_float(dbias[c0 + j]) + db[j]);
        }
    }
}

}  // namespace

namespace {

// One row of layernorm_forward from the sum of its x (C): writes y (C), mean and rstd.
template <class T>
void layernorm_row(T* y, float* mean, float* rstd, const T* x, float sum, const T* weight,
                   const T* bias, std::int64_t C, float eps) {
    const float inv_c = 1.0f / static_cast<float>(C);
    const float m = sum * inv_c;
    float var = 0.0f;  // two passes: no cancellation when |mean| >> std
    for (std::int64_t c = 0; c < C; ++c) {
        const float d = to_float(x[c]) - m;
        var += d * d;
    }
    const float s = 1.0f / std::sqrt(var * inv_c + eps);
    for (std::int64_t c = 0; c < C; ++c) {
        float v = (to_float(x[c]) - m) * s * to_float(weight[c]);
        if (bias != nullptr) v += to_float(bias[c]);
        y[c] = from_float<T>(v);
    }
    *mean = m;
    *rstd = s;
}

}  // namespace

template <class T>
void layernorm_forward(const LayernormForwardArgs<T>& args) {
    const auto& [out, mean, rstd, inp, weight, bias, N, C, eps] = args;
    NAPKIN_ASSERT(N >= 0 && C > 0, "layernorm_forward: N " << N << ", C " << C);
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;  // (C)
        float sum = 0.0f;
        for (std::int64_t c = 0; c < C; ++c)
            sum += to_float(x[c]);
        layernorm_row(out + n * C, mean + n, rstd + n, x, sum, weight, bias, C, eps);
    }
}

// The rounded sum is what the norm reads, as after residual_forward.
template <class T>
void residual_layernorm_forward(const ResidualLayernormForwardArgs<T>& args) {
    const auto& [out, mean, rstd, x, a, b, weight, bias, N, C, eps] = args;
    NAPKIN_ASSERT(N >= 0 && C > 0, "residual_layernorm_forward: N " << N << ", C " << C);
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        T* xr = x + n * C;  // (C)
        float sum = 0.0f;
        for (std::int64_t c = 0; c < C; ++c) {
            xr[c] = from_float<T>(to_float(a[n * C + c]) + to_float(b[n * C + c]));
            sum += to_float(xr[c]);
        }
        layernorm_row(out + n * C, mean + n, rstd + n, xr, sum, weight, bias, C, eps);
    }
}

template <class T>
void layernorm_backward(const LayernormBackwardArgs<T>& args) {
    const auto& [dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch,
                 scratch_bytes] = args;  // no scratch: parameter gradients in one stage
    NAPKIN_ASSERT(N >= 0 && C > 0, "layernorm_backward: N " << N << ", C " << C);
    const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;    // (C)
        const T* dy = dout + n * C;  // (C)
        T* dx = dinp + n * C;        // (C)
        const float m = mean[n];
        const float s = rstd[n];
        // dx = s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * weight
        float dnorm_mean = 0.0f;
        float dnorm_xhat_mean = 0.0f;
        for (std::int64_t c = 0; c < C; ++c) {
            const float xhat = (to_float(x[c]) - m) * s;
            const float dnorm = to_float(dy[c]) * to_float(weight[c]);
            dnorm_mean += dnorm;
            dnorm_xhat_mean += dnorm * xhat;
        }
        dnorm_mean *= inv_c;
        dnorm_xhat_mean *= inv_c;
        for (std::int64_t c = 0; c < C; ++c) {
            const float xhat = (to_float(x[c]) - m) * s;
            const float dnorm = to_float(dy[c]) * to_float(weight[c]);
            const float g = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
            dx[c] = from_float<T>(to_float(dx[c]) + g);
        }
    }
    norm_parameter_grads(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template <class T>
void rmsnorm_forward(const RmsnormForwardArgs<T>& args) {
    const auto& [out, rstd, inp, weight, N, C, eps] = args;
    NAPKIN_ASSERT(N >= 0 && C > 0, "rmsnorm_forward: N " << N << ", C " << C);
    const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;  // (C)
        T* y = out + n * C;        // (C)
        float sum_sq = 0.0f;
        for (std::int64_t c = 0; c < C; ++c) {
            const float v = to_float(x[c]);
            sum_sq += v * v;
        }
        const float s = 1.0f / std::sqrt(sum_sq * inv_c + eps);
        for (std::int64_t c = 0; c < C; ++c)
            y[c] = from_float<T>(to_float(x[c]) * s * to_float(weight[c]));
        rstd[n] = s;
    }
}

template <class T>
void rmsnorm_backward(const RmsnormBackwardArgs<T>& args) {
    const auto& [dinp, dweight, dout, inp, weight, rstd, N, C, scratch, scratch_bytes] = args;
    NAPKIN_ASSERT(N >= 0 && C > 0, "rmsnorm_backward: N " << N << ", C " << C);
    const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for if (N * C > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* x = inp + n * C;    // (C)
        const T* dy = dout + n * C;  // (C)
        T* dx = dinp + n * C;        // (C)
        const float s = rstd[n];
        float dnorm_xhat_mean = 0.0f;
        for (std::int64_t c = 0; c < C; ++c) {
            dnorm_xhat_mean += to_float(dy[c]) * to_float(weight[c]) * to_float(x[c]) * s;
        }
        dnorm_xhat_mean *= inv_c;
        for (std::int64_t c = 0; c < C; ++c) {
            const float xhat = to_float(x[c]) * s;
            const float dnorm = to_float(dy[c]) * to_float(weight[c]);
            dx[c] = from_float<T>(to_float(dx[c]) + (dnorm - xhat * dnorm_xhat_mean) * s);
        }
    }
    norm_parameter_grads<T>(dweight, nullptr, dout, inp, nullptr, rstd, N, C);
}

#define NAPKIN_NORM_INSTANTIATE(T)                                        \
    template void layernorm_forward<T>(const LayernormForwardArgs<T>&);   \
    template void layernorm_backward<T>(const LayernormBackwardArgs<T>&); \
    template void rmsnorm_forward<T>(const RmsnormForwardArgs<T>&);       \
    template void rmsnorm_backward<T>(const RmsnormBackwardArgs<T>&);     \
    template void residual_layernorm_forward<T>(const ResidualLayernormForwardArgs<T>&);
NAPKIN_NORM_INSTANTIATE(float)
NAPKIN_NORM_INSTANTIATE(bf16_t)
NAPKIN_NORM_INSTANTIATE(f16_t)
#undef NAPKIN_NORM_INSTANTIATE

}  // namespace napkin::cpu
