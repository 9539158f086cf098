// Causal self-attention on the CPU (declared in kernels/attention.h), two implementations:
//   naive: S row by row, softmax, P kept (B, NH, T, T); backward reads P.
//   flash: online softmax over key blocks, keeps lse (B, NH, T); backward recomputes S.
// OpenMP splits query rows (forward, dq) or key rows / key blocks (dk, dv). A kv head serves
// NH / KVH query heads, so the dk, dv of a key are summed over that group's query heads inside
// one iteration: one writer per element, a fixed order, no atomics (deterministic).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/dropout.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kMaxHD = kAttentionMaxHeadDim;
// Keys per online-softmax step of the flash forward: the block's scores live on the stack.
constexpr std::int64_t kFlashKeyBlock = 64;
// Keys whose dk, dv one flash backward iteration owns: 2 * 32 * kMaxHD floats = 64 KiB of stack.
constexpr std::int64_t kFlashBackwardKeyBlock = 32;
// Multiply-adds below which threads cost more than they save.
constexpr std::int64_t kParallelMinWork = 1 << 15;

// Offsets of one token's heads in the packed buffers and of one attention row.
struct Layout {
    std::int64_t T = 0, HD = 0;
    int NH = 0, KVH = 0, group = 0;  // group = NH / KVH query heads per kv head
    std::int64_t qkv_row = 0;        // (NH + 2*KVH) * HD
    std::int64_t out_row = 0;        // NH * HD
    std::int64_t work = 0;           // about B * NH * T * T * HD / 2 multiply-adds

    std::int64_t q(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * qkv_row + h * HD;
    }
    std::int64_t k(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + (NH + g) * HD;
    }
    std::int64_t v(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + (NH + KVH + g) * HD;
    }
    std::int64_t o(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * out_row + h * HD;
    }
    // Index of row (b, h, t) in (B, NH, T): lse[row], P and dS rows start at row * T.
    std::int64_t row(std::int64_t b, int h, std::int64_t t) const { return (b * NH + h) * T + t; }
    bool parallel() const { return work > kParallelMinWork; }
};

Layout make_layout(const char* op, std::int64_t B, std::int64_t T, int NH, int KVH,
                   std::int64_t HD) {
    NAPKIN_ASSERT(B >= 0 && T >= 0, op << ": B " << B << ", T " << T);
    NAPKIN_ASSERT(NH >= 1 && KVH >= 1 && NH % KVH == 0,
                  op << ": KVH " << KVH << " must divide NH " << NH);
    NAPKIN_ASSERT(HD >= 1 && HD <= kMaxHD, op << ": HD " << HD << " outside [1, " << kMaxHD << "]");
    Layout l;
    l.T = T;
    l.HD = HD;
    l.NH = NH;
    l.KVH = KVH;
    l.group = NH / KVH;
    l.qkv_row = (NH + 2ll * KVH) * HD;
    l.out_row = NH * HD;
    l.work = B * NH * T * T * HD / 2;
    return l;
}

template <class Elem>
void load(float* dst, const Elem* src, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = to_float(src[i]);
}

// a (n) . b (n) in kDotLanes independent partial sums (a fixed order the compiler can keep in
// vector registers without -ffast-math), then the lanes and the tail.
constexpr std::int64_t kDotLanes = 8;

template <class Elem>
float dot(const float* a, const Elem* b, std::int64_t n) {
    float lanes[kDotLanes] = {};
    std::int64_t i = 0;
    for (; i + kDotLanes <= n; i += kDotLanes) {
        for (std::int64_t k = 0; k < kDotLanes; ++k)
            lanes[k] += a[i + k] * to_float(b[i + k]);
    }
    float s = 0.0f;
    for (std::int64_t k = 0; k < kDotLanes; ++k)
        s += lanes[k];
    for (; i < n; ++i)
        s += a[i] * to_float(b[i]);
    return s;
}

// acc (n) += w * x (n)
template <class Elem>
void axpy(float* acc, float w, const Elem* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        acc[i] += w * to_float(x[i]);
}

// dst (n) += src (n), narrowed to Elem once.
template <class Elem>
void add_to(Elem* dst, const float* src, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = from_float<Elem>(to_float(dst[i]) + src[i]);
}

template <class Elem>
void store(Elem* dst, const float* src, float mul, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = from_float<Elem>(src[i] * mul);
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// naive

template <class Elem>
void attention_naive_forward(const AttentionNaiveForwardArgs<Elem>& args) {
    const auto& [out, p, qkv, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    const Layout l = make_layout("attention_naive_forward", B, T, NH, KVH, HD);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    NAPKIN_ASSERT(dropout == nullptr || (dropout->p >= 0.0f && dropout->p < 1.0f),
                  "attention_naive_forward: dropout p " << dropout->p);
    const std::uint32_t threshold = dropout != nullptr ? dropout_threshold(dropout->p) : 0;
    const float keep_scale = dropout != nullptr ? 1.0f / (1.0f - dropout->p) : 1.0f;
    const std::int64_t rows = B * NH * T;
#pragma omp parallel if (l.parallel())
    {
        std::vector<float> s(static_cast<std::size_t>(T));  // (T) this row's scores, then exp
#pragma omp for schedule(dynamic, 8)
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t b = r / (NH * T);
            const int h = static_cast<int>(r / T % NH);
            const std::int64_t t = r % T;
            const int g = h / l.group;
            float q[kMaxHD];    // (HD)
            float acc[kMaxHD];  // (HD) out row in fp32
            load(q, qkv + l.q(b, t, h), HD);
            float mx = -std::numeric_limits<float>::infinity();
            for (std::int64_t j = 0; j <= t; ++j) {
                s[j] = dot(q, qkv + l.k(b, j, g), HD) * scale;
                mx = std::max(mx, s[j]);
            }
            float sum = 0.0f;
            for (std::int64_t j = 0; j <= t; ++j) {
                s[j] = std::exp(s[j] - mx);
                sum += s[j];
            }
            const float inv = 1.0f / sum;  // sum >= 1: the max term is exp(0)
            std::fill(acc, acc + HD, 0.0f);
            const std::int64_t row = l.row(b, h, t) * T;
            Elem* prow = p + row;  // (T)
            for (std::int64_t j = 0; j <= t; ++j) {
                float pj = s[j] * inv;
                prow[j] = from_float<Elem>(pj);
                if (dropout != nullptr) {
                    const auto at = static_cast<std::uint64_t>(row + j);
                    const bool keep = dropout_keep(dropout->seed, at, threshold);
                    dropout->mask[at] = keep ? 1 : 0;
                    pj = keep ? pj * keep_scale : 0.0f;
                    dropout->dropped[at] = from_float<Elem>(pj);
                }
                axpy(acc, pj, qkv + l.v(b, j, g), HD);
            }
            for (std::int64_t j = t + 1; j < T; ++j) {
                prow[j] = from_float<Elem>(0.0f);
                if (dropout != nullptr) {
                    dropout->mask[row + j] = 0;
                    dropout->dropped[row + j] = from_float<Elem>(0.0f);
                }
            }
            store(out + l.o(b, t, h), acc, 1.0f, HD);
        }
    }
}

template <class Elem>
void attention_naive_backward(const AttentionNaiveBackwardArgs<Elem>& args) {
    const auto& [dqkv, scratch, dout, qkv, p, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    const Layout l = make_layout("attention_naive_backward", B, T, NH, KVH, HD);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    const float keep_scale = dropout != nullptr ? 1.0f / (1.0f - dropout->p) : 1.0f;
    const Elem* pv = dropout != nullptr ? dropout->dropped : p;  // what multiplied V: Pd or P

    // Pass 1, one query row (b, h, t) per iteration: dP_j = dout_t . v_j, D = sum_j P_j dP_j,
    // dS_j = P_j (dP_j - D) * scale into scratch (B, NH, T, T), dq_t += sum_j dS_j k_j.
    const std::int64_t rows = B * NH * T;
#pragma omp parallel for schedule(dynamic, 8) if (l.parallel())
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t b = r / (NH * T);
        const int h = static_cast<int>(r / T % NH);
        const std::int64_t t = r % T;
        const int g = h / l.group;
        float go[kMaxHD];  // (HD) dout row
        float dq[kMaxHD];  // (HD)
        load(go, dout + l.o(b, t, h), HD);
        const Elem* prow = p + l.row(b, h, t) * T;  // (T)
        float* ds = scratch + l.row(b, h, t) * T;   // (T) dP, then dS
        const std::uint8_t* mrow = dropout != nullptr ? dropout->mask + l.row(b, h, t) * T : nullptr;
        float D = 0.0f;
        for (std::int64_t j = 0; j <= t; ++j) {
            ds[j] = dot(go, qkv + l.v(b, j, g), HD);  // dP (dPd through the dropout mask)
            if (mrow != nullptr) ds[j] = mrow[j] != 0 ? ds[j] * keep_scale : 0.0f;
            D += to_float(prow[j]) * ds[j];
        }
        std::fill(dq, dq + HD, 0.0f);
        for (std::int64_t j = 0; j <= t; ++j) {
            ds[j] = to_float(prow[j]) * (ds[j] - D) * scale;
            axpy(dq, ds[j], qkv + l.k(b, j, g), HD);
        }
        add_to(dqkv + l.q(b, t, h), dq, HD);
    }

    // Pass 2, one key row (b, g, j) per iteration, over the query heads of group g and the
    // queries t >= j that see it: dk_j += sum dS_tj q_t, dv_j += sum P_tj dout_t.
    const std::int64_t keys = B * KVH * T;
#pragma omp parallel for schedule(dynamic, 8) if (l.parallel())
    for (std::int64_t r = 0; r < keys; ++r) {
        const std::int64_t b = r / (KVH * T);
        const int g = static_cast<int>(r / T % KVH);
        const std::int64_t j = r % T;
        float dk[kMaxHD];  // (HD)
        float dv[kMaxHD];  // (HD)
        std::fill(dk, dk + HD, 0.0f);
        std::fill(dv, dv + HD, 0.0f);
        for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
            for (std::int64_t t = j; t < T; ++t) {
                const std::int64_t at = l.row(b, h, t) * T + j;
                axpy(dk, scratch[at], qkv + l.q(b, t, h), HD);
                axpy(dv, to_float(pv[at]), dout + l.o(b, t, h), HD);
            }
        }
        add_to(dqkv + l.k(b, j, g), dk, HD);
        add_to(dqkv + l.v(b, j, g), dv, HD);
    }
}

// ----------------------------------------------------------------------------------------------
// flash

template <class Elem>
void attention_flash_forward(const AttentionFlashForwardArgs<Elem>& args) {
    const auto& [out, lse, qkv, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    const Layout l = make_layout("attention_flash_forward", B, T, NH, KVH, HD);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    NAPKIN_ASSERT(dropout == nullptr || (dropout->p >= 0.0f && dropout->p < 1.0f),
                  "attention_flash_forward: dropout p " << dropout->p);
    const std::uint32_t threshold = dropout != nullptr ? dropout_threshold(dropout->p) : 0;
    const float keep_scale = dropout != nullptr ? 1.0f / (1.0f - dropout->p) : 1.0f;
    const std::int64_t rows = B * NH * T;
#pragma omp parallel for schedule(dynamic, 8) if (l.parallel())
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t b = r / (NH * T);
        const int h = static_cast<int>(r / T % NH);
        const std::int64_t i = r % T;
        const int g = h / l.group;
        float q[kMaxHD];          // (HD)
        float acc[kMaxHD];        // (HD) sum_j exp(s_ij - m) v_j
        float s[kFlashKeyBlock];  // (block) scores
        load(q, qkv + l.q(b, i, h), HD);
        std::fill(acc, acc + HD, 0.0f);
        float m = -std::numeric_limits<float>::infinity();  // running max
        float sum = 0.0f;                                   // running sum of exp(s - m)
        for (std::int64_t j0 = 0; j0 <= i; j0 += kFlashKeyBlock) {
            const std::int64_t n = std::min(kFlashKeyBlock, i + 1 - j0);
            float block_max = -std::numeric_limits<float>::infinity();
            for (std::int64_t j = 0; j < n; ++j) {
                s[j] = dot(q, qkv + l.k(b, j0 + j, g), HD) * scale;
                block_max = std::max(block_max, s[j]);
            }
            const float m_new = std::max(m, block_max);
            const float correction = std::exp(m - m_new);  // 0 on the first block (m = -inf)
            sum *= correction;
            for (std::int64_t d = 0; d < HD; ++d)
                acc[d] *= correction;
            for (std::int64_t j = 0; j < n; ++j) {
                const float e = std::exp(s[j] - m_new);
                sum += e;  // the softmax's own sum: dropout comes after it
                float w = e;
                if (dropout != nullptr) {
                    const auto at = static_cast<std::uint64_t>(l.row(b, h, i) * T + j0 + j);
                    w = dropout_keep(dropout->seed, at, threshold) ? e * keep_scale : 0.0f;
                }
                axpy(acc, w, qkv + l.v(b, j0 + j, g), HD);
            }
            m = m_new;
        }
        store(out + l.o(b, i, h), acc, 1.0f / sum, HD);  // sum >= 1: the max term is exp(0)
        lse[l.row(b, h, i)] = m + std::log(sum);
    }
}

template <class Elem>
void attention_flash_backward(const AttentionFlashBackwardArgs<Elem>& args) {
    const auto& [dqkv, dout, out, qkv, lse, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    const Layout l = make_layout("attention_flash_backward", B, T, NH, KVH, HD);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    const std::uint32_t threshold = dropout != nullptr ? dropout_threshold(dropout->p) : 0;
    const float keep_scale = dropout != nullptr ? 1.0f / (1.0f - dropout->p) : 1.0f;
    // The keep factor of P_ij (0 or 1 / (1 - p)), the forward's bits drawn again.
    auto keep = [&](std::int64_t b, int h, std::int64_t i, std::int64_t j) {
        if (dropout == nullptr) return 1.0f;
        const auto at = static_cast<std::uint64_t>(l.row(b, h, i) * T + j);
        return dropout_keep(dropout->seed, at, threshold) ? keep_scale : 0.0f;
    };
    constexpr std::int64_t KB = kFlashBackwardKeyBlock;

    // Pass 1, one (b, kv head g, block of KB keys) per iteration: for every query head of the
    // group and every query i that sees the block, p_ij = exp(s_ij - lse_i), dP_ij = dout_i . v_j,
    // dS_ij = p_ij (dP_ij - D_i) with D_i = dout_i . out_i; dv_j += p_ij dout_i,
    // dk_j += dS_ij q_i * scale.
    const std::int64_t key_blocks = (T + KB - 1) / KB;
    const std::int64_t tiles = B * KVH * key_blocks;
#pragma omp parallel for schedule(dynamic, 1) if (l.parallel())
    for (std::int64_t r = 0; r < tiles; ++r) {
        const std::int64_t b = r / (KVH * key_blocks);
        const int g = static_cast<int>(r / key_blocks % KVH);
        const std::int64_t j0 = r % key_blocks * KB;
        const std::int64_t n = std::min(KB, T - j0);
        float dk[KB][kMaxHD];  // (n, HD)
        float dv[KB][kMaxHD];  // (n, HD)
        for (std::int64_t j = 0; j < n; ++j) {
            std::fill(dk[j], dk[j] + HD, 0.0f);
            std::fill(dv[j], dv[j] + HD, 0.0f);
        }
        for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
            for (std::int64_t i = j0; i < T; ++i) {
                float q[kMaxHD];   // (HD)
                float go[kMaxHD];  // (HD) dout row
                load(q, qkv + l.q(b, i, h), HD);
                load(go, dout + l.o(b, i, h), HD);
                const float D = dot(go, out + l.o(b, i, h), HD);
                const float L = lse[l.row(b, h, i)];
                const std::int64_t visible = std::min(n, i + 1 - j0);
                for (std::int64_t j = 0; j < visible; ++j) {
                    const float pij = std::exp(dot(q, qkv + l.k(b, j0 + j, g), HD) * scale - L);
                    const float kij = keep(b, h, i, j0 + j);
                    const float dp = dot(go, qkv + l.v(b, j0 + j, g), HD) * kij;
                    const float ds = pij * (dp - D) * scale;
                    const float pd = pij * kij;  // what multiplied v_j
                    for (std::int64_t d = 0; d < HD; ++d) {
                        dv[j][d] += pd * go[d];
                        dk[j][d] += ds * q[d];
                    }
                }
            }
        }
        for (std::int64_t j = 0; j < n; ++j) {
            add_to(dqkv + l.k(b, j0 + j, g), dk[j], HD);
            add_to(dqkv + l.v(b, j0 + j, g), dv[j], HD);
        }
    }

    // Pass 2, one query row (b, h, i) per iteration: dq_i += sum_j dS_ij k_j * scale, S and dP
    // recomputed once more.
    const std::int64_t rows = B * NH * T;
#pragma omp parallel for schedule(dynamic, 8) if (l.parallel())
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t b = r / (NH * T);
        const int h = static_cast<int>(r / T % NH);
        const std::int64_t i = r % T;
        const int g = h / l.group;
        float q[kMaxHD];   // (HD)
        float go[kMaxHD];  // (HD) dout row
        float dq[kMaxHD];  // (HD)
        load(q, qkv + l.q(b, i, h), HD);
        load(go, dout + l.o(b, i, h), HD);
        std::fill(dq, dq + HD, 0.0f);
        const float D = dot(go, out + l.o(b, i, h), HD);
        const float L = lse[l.row(b, h, i)];
        for (std::int64_t j = 0; j <= i; ++j) {
            const float pij = std::exp(dot(q, qkv + l.k(b, j, g), HD) * scale - L);
            const float dp = dot(go, qkv + l.v(b, j, g), HD) * keep(b, h, i, j);
            axpy(dq, pij * (dp - D) * scale, qkv + l.k(b, j, g), HD);
        }
        add_to(dqkv + l.q(b, i, h), dq, HD);
    }
}

#define NAPKIN_INSTANTIATE_ATTENTION(Elem)                                                 \
    template void attention_naive_forward<Elem>(const AttentionNaiveForwardArgs<Elem>&);   \
    template void attention_naive_backward<Elem>(const AttentionNaiveBackwardArgs<Elem>&); \
    template void attention_flash_forward<Elem>(const AttentionFlashForwardArgs<Elem>&);   \
    template void attention_flash_backward<Elem>(const AttentionFlashBackwardArgs<Elem>&);
NAPKIN_INSTANTIATE_ATTENTION(float)
NAPKIN_INSTANTIATE_ATTENTION(bf16_t)
NAPKIN_INSTANTIATE_ATTENTION(f16_t)

}  // namespace napkin::cpu
