// Attention over a KV cache on the CPU (declared in kernels/decode_attention.h), the
// specification of the CUDA twin. One OpenMP iteration per (sequence, query, head): a pass over
// the cached keys with the online softmax (running max m and sum l, the output rescaled by
// exp(m_old - m_new) as the max grows), all in fp32; each iteration writes only its own output
// row, so the result does not depend on the thread count.
#include "kernels/decode_attention.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

namespace {

void check_shape(std::int64_t B, std::int64_t Tq, std::int64_t S, std::int64_t pos, int NH, int KVH,
                 std::int64_t HD, const char* name) {
    NAPKIN_ASSERT(
        B >= 0 && Tq >= 0 && HD > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
        name << ": B " << B << ", Tq " << Tq << ", NH " << NH << ", KVH " << KVH << ", HD " << HD);
    NAPKIN_ASSERT(pos >= 0 && pos + Tq <= S, name << ": positions [" << pos << ", " << pos + Tq
                                                  << ") outside a cache of " << S);
}

}  // namespace

template <class T>
void kv_cache_write(const KvCacheWriteArgs<T>& a) {
    check_shape(a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD, "kv_cache_write");
    const std::int64_t row = (a.NH + 2 * static_cast<std::int64_t>(a.KVH)) * a.HD;
    const std::int64_t kv = a.KVH * a.HD;  // one position's keys (or values)
#pragma omp parallel for
    for (std::int64_t bt = 0; bt < a.B * a.Tq; ++bt) {
        const std::int64_t b = bt / a.Tq, t = bt % a.Tq;
        const T* k = a.qkv + bt * row + a.NH * a.HD;
        const T* v = k + kv;
        const std::int64_t at = (b * a.S + a.pos + t) * kv;
        for (std::int64_t i = 0; i < kv; ++i) {
            a.k_cache[at + i] = k[i];
            a.v_cache[at + i] = v[i];
        }
    }
}

template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a) {
    check_shape(a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD, "decode_attention");
    const std::int64_t HD = a.HD, row = (a.NH + 2 * static_cast<std::int64_t>(a.KVH)) * HD;
    const std::int64_t kv = a.KVH * HD, group = a.NH / a.KVH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
    const std::int64_t work = a.B * a.Tq * a.NH;
#pragma omp parallel
    {
        std::vector<float> q(static_cast<std::size_t>(HD)), o(static_cast<std::size_t>(HD));
#pragma omp for
        for (std::int64_t w = 0; w < work; ++w) {
            const std::int64_t h = w % a.NH, bt = w / a.NH, b = bt / a.Tq, t = bt % a.Tq;
            const T* qh = a.qkv + bt * row + h * HD;
            for (std::int64_t d = 0; d < HD; ++d) {
                q[static_cast<std::size_t>(d)] = to_float(qh[d]) * scale;
                o[static_cast<std::size_t>(d)] = 0.0f;
            }
            const T* K = a.k_cache + b * a.S * kv + (h / group) * HD;  // position j at j * kv
            const T* V = a.v_cache + b * a.S * kv + (h / group) * HD;
            float m = -INFINITY, l = 0.0f;
            for (std::int64_t j = 0; j <= a.pos + t; ++j) {
                float s = 0.0f;
                for (std::int64_t d = 0; d < HD; ++d)
                    s += q[static_cast<std::size_t>(d)] * to_float(K[j * kv + d]);
                const float m_new = s > m ? s : m;
                const float rescale = std::exp(m - m_new), p = std::exp(s - m_new);
                l = l * rescale + p;
                for (std::int64_t d = 0; d < HD; ++d) {
                    float& od = o[static_cast<std::size_t>(d)];
                    od = od * rescale + p * to_float(V[j * kv + d]);
                }
                m = m_new;
            }
            T* out = a.out + bt * a.NH * HD + h * HD;
            for (std::int64_t d = 0; d < HD; ++d)
                out[d] = from_float<T>(o[static_cast<std::size_t>(d)] / l);
        }
    }
}

#define NAPKIN_DECODE_ATTENTION_INSTANTIATE(T)                   \
    template void kv_cache_write<T>(const KvCacheWriteArgs<T>&); \
    template void decode_attention<T>(const DecodeAttentionArgs<T>&);
NAPKIN_DECODE_ATTENTION_INSTANTIATE(float)
NAPKIN_DECODE_ATTENTION_INSTANTIATE(bf16_t)
NAPKIN_DECODE_ATTENTION_INSTANTIATE(f16_t)
#undef NAPKIN_DECODE_ATTENTION_INSTANTIATE

}  // namespace napkin::cpu
