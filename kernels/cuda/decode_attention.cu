// Attention over a KV cache on the GPU (declared in kernels/decode_attention.h; the CPU twin, the
// spec, is kernels/cpu/decode_attention.cpp).
//
// decode_attention: one block of 128 threads per (sequence, query, head). The scaled query sits
// in shared memory; the block walks the sequence's cached keys in tiles of 32: each warp scores
// 8 of them (lanes split the head dim, a warp sum), the scores go to shared memory, every thread
// takes the tile's max and sum (the online softmax's m and l, the same in all threads), and each
// thread rescales and accumulates its own head-dim elements of the output (d = tid + 128 k).
// Simple and correct; one sequence's keys are read by NH blocks (not once per kv-head) and a
// batch of one runs NH blocks: flash-decoding's split of the keys across blocks is the speed
// step that follows (docs/INFERENCE.md).
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/decode_attention.h"

namespace napkin::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 32;      // keys scored per pass
constexpr int kMaxHd = 512;    // head dims up to this: 4 output elements a thread

template <class D>
__global__ void kv_cache_write_kernel(D* k_cache, D* v_cache, const D* qkv, std::int64_t B,
                                      std::int64_t Tq, std::int64_t S, std::int64_t pos, int NH,
                                      int KVH, std::int64_t HD) {
    const std::int64_t kv = KVH * HD, row = (NH + 2 * static_cast<std::int64_t>(KVH)) * HD;
    const std::int64_t n = B * Tq * kv;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t bt = i / kv, e = i % kv, b = bt / Tq, t = bt % Tq;
        const D* k = qkv + bt * row + NH * HD;
        const std::int64_t at = (b * S + pos + t) * kv + e;
        k_cache[at] = k[e];
        v_cache[at] = k[kv + e];
    }
}

template <class D>
__global__ void decode_attention_kernel(D* out, const D* qkv, const D* k_cache, const D* v_cache,
                                        std::int64_t Tq, std::int64_t S, std::int64_t pos, int NH,
                                        int KVH, std::int64_t HD, float scale) {
    __shared__ float q[kMaxHd];
    __shared__ float s[kTile];
    const std::int64_t w = blockIdx.x;  // ((b Tq) + t) NH + h
    const std::int64_t h = w % NH, bt = w / NH, b = bt / Tq, t = bt % Tq;
    const std::int64_t row = (NH + 2 * static_cast<std::int64_t>(KVH)) * HD, kv = KVH * HD;
    const D* qh = qkv + bt * row + h * HD;
    for (std::int64_t d = threadIdx.x; d < HD; d += kThreads)
        q[d] = to_f32(qh[d]) * scale;
    const std::int64_t kvh = h / (NH / KVH);
    const D* K = k_cache + b * S * kv + kvh * HD;  // position j at j * kv
    const D* V = v_cache + b * S * kv + kvh * HD;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    float o[kMaxHd / kThreads] = {};
    float m = -INFINITY, l = 0.0f;
    const std::int64_t keys = pos + t + 1;
    __syncthreads();
    for (std::int64_t j0 = 0; j0 < keys; j0 += kTile) {
        for (int jj = warp; jj < kTile; jj += kThreads / kWarpSize) {
            float dot = 0.0f;
            if (j0 + jj < keys) {
                for (std::int64_t d = lane; d < HD; d += kWarpSize)
                    dot += q[d] * to_f32(K[(j0 + jj) * kv + d]);
            }
            dot = warp_sum(dot);
            if (lane == 0) s[jj] = j0 + jj < keys ? dot : -INFINITY;
        }
        __syncthreads();
        const int n = keys - j0 < kTile ? static_cast<int>(keys - j0) : kTile;
        float m_new = m;
        for (int jj = 0; jj < n; ++jj)
            m_new = fmaxf(m_new, s[jj]);
        const float rescale = expf(m - m_new);
        l *= rescale;
#pragma unroll
        for (int k = 0; k < kMaxHd / kThreads; ++k)
            o[k] *= rescale;
        for (int jj = 0; jj < n; ++jj) {
            const float p = expf(s[jj] - m_new);
            l += p;
#pragma unroll
            for (int k = 0; k < kMaxHd / kThreads; ++k) {
                const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
                if (d < HD) o[k] += p * to_f32(V[(j0 + jj) * kv + d]);
            }
        }
        m = m_new;
        __syncthreads();  // s is rewritten by the next tile
    }
    D* dst = out + bt * NH * HD + h * HD;
#pragma unroll
    for (int k = 0; k < kMaxHd / kThreads; ++k) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
        if (d < HD) dst[d] = from_f32<D>(o[k] / l);
    }
}

void check_shape(std::int64_t B, std::int64_t Tq, std::int64_t S, std::int64_t pos, int NH, int KVH,
                 std::int64_t HD, const char* name) {
    NAPKIN_CUDA_REQUIRE(
        B >= 0 && Tq >= 0 && HD > 0 && HD <= kMaxHd && NH > 0 && KVH > 0 && NH % KVH == 0,
        name << ": B " << B << ", Tq " << Tq << ", NH " << NH << ", KVH " << KVH << ", HD " << HD
             << " (at most " << kMaxHd << ")");
    NAPKIN_CUDA_REQUIRE(pos >= 0 && pos + Tq <= S, name << ": positions [" << pos << ", "
                                                        << pos + Tq << ") outside a cache of "
                                                        << S);
}

}  // namespace

template <class T>
void kv_cache_write(const KvCacheWriteArgs<T>& a, const Launch& launch) {
    check_shape(a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD, "kv_cache_write");
    const std::int64_t n = a.B * a.Tq * a.KVH * a.HD;
    if (n == 0) return;
    constexpr int kBlock = 256;
    kv_cache_write_kernel<<<grid_for(n, kBlock), kBlock, 0, launch.stream>>>(
        dev(a.k_cache), dev(a.v_cache), dev(a.qkv), a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a, const Launch& launch) {
    check_shape(a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD, "decode_attention");
    const std::int64_t blocks = a.B * a.Tq * a.NH;
    if (blocks == 0) return;
    NAPKIN_CUDA_REQUIRE(blocks < (1ll << 31), "decode_attention: " << blocks << " blocks");
    const float scale = 1.0f / sqrtf(static_cast<float>(a.HD));
    decode_attention_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, launch.stream>>>(
        dev(a.out), dev(a.qkv), dev(a.k_cache), dev(a.v_cache), a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD,
        scale);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_DECODE_ATTENTION_INSTANTIATE(T)                             \
    template void kv_cache_write<T>(const KvCacheWriteArgs<T>&, const Launch&); \
    template void decode_attention<T>(const DecodeAttentionArgs<T>&, const Launch&);
NAPKIN_CUDA_DECODE_ATTENTION_INSTANTIATE(float)
NAPKIN_CUDA_DECODE_ATTENTION_INSTANTIATE(bf16_t)
NAPKIN_CUDA_DECODE_ATTENTION_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_DECODE_ATTENTION_INSTANTIATE

}  // namespace napkin::cuda
