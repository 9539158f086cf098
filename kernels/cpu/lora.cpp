// lora on the CPU: each product one OpenBLAS sgemm with leading dimensions, so that a part's
// rows of out (or dout) and its columns of h are used in place. 16-bit storage is widened into
// the caller's scratch, multiplied in fp32 and rounded where kernels/lora.h says.
#include <cblas.h>

#include <type_traits>

#include "core/check.h"
#include "core/half.h"
#include "kernels/lora.h"

namespace napkin::cpu {

namespace {

blasint bi(std::int64_t v) {
    return static_cast<blasint>(v);
}

// c (m, n; ldc) = alpha * a (m, k; lda) @ b (n, k; ldb)^T + beta * c
void gemm_nt(float* c, std::int64_t ldc, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
             float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(m), bi(n), bi(k), alpha, a, bi(lda), b,
                bi(ldb), beta, c, bi(ldc));
}

// c (m, n; ldc) = alpha * a (m, k; lda) @ b (k, n; ldb) + beta * c
void gemm_nn(float* c, std::int64_t ldc, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
             float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(m), bi(n), bi(k), alpha, a, bi(lda),
                b, bi(ldb), beta, c, bi(ldc));
}

// c (m, n; ldc) = alpha * a (k, m; lda)^T @ b (k, n; ldb) + beta * c
void gemm_tn(float* c, std::int64_t ldc, const float* a, std::int64_t lda, const float* b,
             std::int64_t ldb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
             float beta) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(m), bi(n), bi(k), alpha, a, bi(lda), b,
                bi(ldb), beta, c, bi(ldc));
}

template <class T>
void widen(float* dst, const T* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = to_float(src[i]);
}

// dst = T(src), and src takes the rounded values (the next product reads what was stored).
template <class T>
void round_into(T* dst, float* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
        dst[i] = from_float<T>(src[i]);
        src[i] = to_float(dst[i]);
    }
}

// dst = T(dst + src): one rounding of the fp32 sum, as cuBLASLt's beta = 1.
template <class T>
void accumulate(T* dst, const float* src, std::int64_t n) {
#pragma omp parallel for if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = from_float<T>(to_float(dst[i]) + src[i]);
}

// The operands as fp32: the tensors themselves for float, widened copies carved from scratch
// otherwise.
template <class T>
const float* as_f32(const T* p, std::int64_t n, float*& scratch) {
    if constexpr (std::is_same_v<T, float>) {
        (void)n;
        (void)scratch;
        return p;
    } else {
        float* out = scratch;
        scratch += n;
        widen(out, p, n);
        return out;
    }
}

// Positive sizes (BLAS refuses a zero leading dimension), one to three parts whose rows tile N.
void check_shape(const LoraShape& s, const char* op) {
    const bool parts_ok = s.parts >= 1 && s.parts <= 3 && lora_part_rows(s, 0) > 0 &&
                          lora_part_rows(s, 0) <= s.N &&
                          (s.parts == 1 ? lora_part_rows(s, 0) == s.N
                                        : (s.N - lora_part_rows(s, 0)) % (s.parts - 1) == 0);
    NAPKIN_ASSERT(s.M >= 0 && s.N > 0 && s.K > 0 && s.r > 0 && parts_ok,
                  op << ": M " << s.M << ", N " << s.N << ", K " << s.K << ", r " << s.r << ", parts "
                     << s.parts << ", n_first " << s.n_first);
}

}  // namespace

template <class T>
void lora_forward(const LoraForwardArgs<T>& args) {
    const auto& [out, h, inp, a, b, s, scale, scratch_start] = args;
    float* scratch = scratch_start;  // carved from the front as operands are widened
    check_shape(s, "lora_forward");
    const std::int64_t M = s.M, N = s.N, K = s.K, r = s.r, PR = s.parts * s.r;
    const float* x = as_f32(inp, M * K, scratch);
    const float* af = as_f32(a, PR * K, scratch);
    const float* bf = as_f32(b, N * r, scratch);
    if constexpr (std::is_same_v<T, float>) {
        gemm_nt(h, PR, x, K, af, K, M, PR, K, 1.0f, 0.0f);
        for (int p = 0; p < s.parts; ++p) {
            const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
            gemm_nt(out + off, N, h + p * r, PR, bf + off * r, r, M, rows, r, scale, 1.0f);
        }
    } else {
        float* hf = scratch;
        float* prod = hf + M * PR;
        gemm_nt(hf, PR, x, K, af, K, M, PR, K, 1.0f, 0.0f);
        round_into(h, hf, M * PR);
        for (int p = 0; p < s.parts; ++p) {
            const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
            gemm_nt(prod + off, N, hf + p * r, PR, bf + off * r, r, M, rows, r, scale, 0.0f);
        }
        accumulate(out, prod, M * N);
    }
}

template <class T>
void lora_backward(const LoraBackwardArgs<T>& args) {
    const auto& [dinp, da, db, dh, dout, inp, h, a, b, s, scale, scratch_start] = args;
    float* scratch = scratch_start;  // carved from the front as operands are widened
    check_shape(s, "lora_backward");
    const std::int64_t M = s.M, N = s.N, K = s.K, r = s.r, PR = s.parts * s.r;
    const float* g = as_f32(dout, M * N, scratch);
    const float* bf = as_f32(b, N * r, scratch);
    const float* hf = as_f32(h, M * PR, scratch);
    const float* x = as_f32(inp, M * K, scratch);
    const float* af = as_f32(a, PR * K, scratch);
    if constexpr (std::is_same_v<T, float>) {
        for (int p = 0; p < s.parts; ++p) {
            const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
            // dh_p (M, r) = scale * dout_p (M, rows; ld N) @ b_p (rows, r)
            gemm_nn(dh + p * r, PR, g + off, N, bf + off * r, r, M, r, rows, scale, 0.0f);
            // db_p (rows, r) += scale * dout_p^T @ h_p (M, r; ld PR)
            gemm_tn(db + off * r, r, g + off, N, hf + p * r, PR, rows, r, M, scale, 1.0f);
        }
        gemm_tn(da, K, dh, PR, x, K, PR, K, M, 1.0f, 1.0f);  // da += dh^T @ inp
        if (dinp != nullptr)
            gemm_nn(dinp, K, dh, PR, af, K, M, K, PR, 1.0f, 1.0f);  // dinp += dh @ a
    } else {
        float* dhf = scratch;
        float* prod = dhf + M * PR;  // the larger of db (N r), da (PR K) and dinp (M K)
        for (int p = 0; p < s.parts; ++p) {
            const std::int64_t off = lora_part_offset(s, p), rows = lora_part_rows(s, p);
            gemm_nn(dhf + p * r, PR, g + off, N, bf + off * r, r, M, r, rows, scale, 0.0f);
            gemm_tn(prod + off * r, r, g + off, N, hf + p * r, PR, rows, r, M, scale, 0.0f);
        }
        accumulate(db, prod, N * r);
        round_into(dh, dhf, M * PR);
        gemm_tn(prod, K, dhf, PR, x, K, PR, K, M, 1.0f, 0.0f);
        accumulate(da, prod, PR * K);
        if (dinp != nullptr) {
            gemm_nn(prod, K, dhf, PR, af, K, M, K, PR, 1.0f, 0.0f);
            accumulate(dinp, prod, M * K);
        }
    }
}

#define NAPKIN_LORA_INSTANTIATE(T)                            \
    template void lora_forward<T>(const LoraForwardArgs<T>&); \
    template void lora_backward<T>(const LoraBackwardArgs<T>&);
NAPKIN_LORA_INSTANTIATE(float)
NAPKIN_LORA_INSTANTIATE(bf16_t)
NAPKIN_LORA_INSTANTIATE(f16_t)
#undef NAPKIN_LORA_INSTANTIATE

}  // namespace napkin::cpu
