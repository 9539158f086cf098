// The fused, chunked head + cross-entropy on the CPU: only `chunk` rows of fp32 logits exist at
// any time (the seeds' chunked / cut cross-entropy), and the head's gradients are taken chunk
// by chunk, so the (B*T, Vp) logits tensor is never held.
#include <cblas.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "core/check.h"
#include "core/half.h"
#include "kernels/cross_entropy.h"

namespace napkin::cpu {

namespace {

template <class T>
void widen(float* dst, const T* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

blasint bi(std::int64_t v) { return static_cast<blasint>(v); }

}  // namespace

template <class T>
float head_cross_entropy(const HeadCrossEntropyArgs<T>& args) {
    const auto& [losses, dx, dw, x, w, targets, M, C, V, Vp, chunk, dloss, scratch, gemm_scratch] =
        args;
    NAPKIN_ASSERT(chunk > 0 && V <= Vp, "head_cross_entropy: chunk " << chunk << ", V " << V << ", Vp " << Vp);
    for (std::int64_t m = 0; m < M; ++m) {
        if (!(targets[m] >= 0 && targets[m] < V)) {
            throw UsageError("token id " + std::to_string(targets[m]) + " at row " + std::to_string(m) +
                             " is outside the vocabulary [0, " + std::to_string(V) + ")");
        }
    }
    constexpr bool kFloat = std::is_same_v<T, float>;
    float* logits = scratch;  // (chunk, Vp)
    const float* wf = nullptr;
    float* dwf = nullptr;
    float* xf = nullptr;
    float* dxf = nullptr;
    if constexpr (kFloat) {
        wf = w;
        dwf = dw;
    } else {
        float* p = scratch + chunk * Vp;
        widen(p, w, Vp * C);
        wf = p;
        dwf = p + Vp * C;
        xf = dwf + Vp * C;
        dxf = xf + chunk * C;
        if (dw != nullptr) {
#pragma omp parallel for if (Vp * C > 65536)
            for (std::int64_t i = 0; i < Vp * C; ++i) dwf[i] = 0.0f;
        }
    }

    double total = 0.0;
    for (std::int64_t r0 = 0; r0 < M; r0 += chunk) {
        const std::int64_t R = std::min(chunk, M - r0);
        const float* xr = nullptr;
        if constexpr (kFloat) {
            xr = x + r0 * C;
        } else {
            widen(xf, x + r0 * C, R * C);
            xr = xf;
        }
        // logits (R, Vp) = x (R, C) @ w (Vp, C)^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(R), bi(Vp), bi(C), 1.0f, xr, bi(C), wf, bi(C), 0.0f,
                    logits, bi(Vp));
        double chunk_total = 0.0;
#pragma omp parallel for reduction(+ : chunk_total)
        for (std::int64_t m = 0; m < R; ++m) {
            float* row = logits + m * Vp;
            const std::int32_t target = targets[r0 + m];
            float maxv = -INFINITY;
            for (std::int64_t v = 0; v < V; ++v) maxv = std::max(maxv, row[v]);
            double sum = 0.0;
            for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - maxv));
            const float lse = maxv + static_cast<float>(std::log(sum));
            const float loss = lse - row[target];
            losses[r0 + m] = loss;
            chunk_total += loss;
            for (std::int64_t v = 0; v < V; ++v) row[v] = std::exp(row[v] - lse) * dloss;
            row[target] -= dloss;
            for (std::int64_t v = V; v < Vp; ++v) row[v] = 0.0f;
        }
        total += chunk_total;
        // dx (R, C) = dlogits (R, Vp) @ w (Vp, C)
        float* dxr = nullptr;
        if constexpr (kFloat) {
            dxr = dx + r0 * C;
        } else {
            dxr = dxf;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(R), bi(C), bi(Vp), 1.0f, logits, bi(Vp), wf, bi(C),
                    0.0f, dxr, bi(C));
        if constexpr (!kFloat) {
            for (std::int64_t i = 0; i < R * C; ++i) dx[r0 * C + i] = from_float<T>(dxf[i]);
        }
        // dw (Vp, C) += dlogits^T (Vp, R) @ x (R, C)
        if (dw != nullptr) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(Vp), bi(C), bi(R), 1.0f, logits, bi(Vp), xr,
                        bi(C), 1.0f, dwf, bi(C));
        }
    }
    if constexpr (!kFloat) {
        if (dw != nullptr) {
#pragma omp parallel for if (Vp * C > 65536)
            for (std::int64_t i = 0; i < Vp * C; ++i) dw[i] = from_float<T>(to_float(dw[i]) + dwf[i]);
        }
    }
    return static_cast<float>(total / static_cast<double>(M));
}

#define NAPKIN_INSTANTIATE_CE(T) \
    template float head_cross_entropy<T>(const HeadCrossEntropyArgs<T>&);
NAPKIN_INSTANTIATE_CE(float)
NAPKIN_INSTANTIATE_CE(bf16_t)
NAPKIN_INSTANTIATE_CE(f16_t)

}  // namespace napkin::cpu
