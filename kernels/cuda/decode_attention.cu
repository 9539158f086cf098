// Attention over a KV cache on the GPU (declared in kernels/decode_attention.h; the CPU twin, the
// spec, is kernels/cpu/decode_attention.cpp).
//
// decode_attention: one block of 128 threads per (sequence, query, head). The scaled query sits
// in shared memory; the block walks the sequence's cached keys in tiles of 32: each warp scores
// 8 of them (lanes split the head dim, a warp sum), the scores go to shared memory, every thread
// takes the tile's max and sum (the online softmax's m and l, the same in all threads), and each
// thread rescales and accumulates its own head-dim elements of the output (d = tid + 128 k).
// It serves the prefill, whose B Tp NH blocks fill any GPU; a decode step's B NH blocks do not, and
// each of a kv-head's NH / KVH query heads reads the keys again.
//
// Flash-decoding (a workspace given; kernels/decode_attention.h): pass 1, one block of 128
// threads per (sequence, query, kv-head, chunk of keys), grid B Tq KVH splits. The kv-head's
// NH / KVH scaled queries sit in shared memory; per tile of 32 keys each warp scores (head, key)
// pairs as above, then a warp per head takes the tile's max and sum over its lanes (a lane per
// key) and turns the scores into probabilities, and each thread accumulates its own (head, d)
// output elements in registers (e = tid + 128 k, at most 32 a thread). The block writes each head's
// m, l and unnormalised o to the workspace. Pass 2, one block per (sequence, query, head): the
// max of the query's chunks' m, then in chunk order l = sum l_c e^(m_c - m) and
// o = sum o_c e^(m_c - m), out = o / l. Both passes are free of atomics, so a call gives the same
// bits whatever the schedule.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/decode_attention.h"

namespace napkin::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr int kTile = 32;      // keys scored per pass
constexpr int kMaxHd = 512;    // head dims up to this: 4 output elements a thread
// The split kernel's output elements a thread: kv-head groups of (NH / KVH) HD <= 4096.
constexpr int kMaxSplitOut = static_cast<int>(kDecodeSplitMaxGroupElems / kThreads);
static_assert(kTile == kWarpSize, "the split's softmax takes a lane per key of a tile");

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

// Flash-decoding, pass 1: block ((b Tq + t) KVH + kvh) splits + c scores keys
// [c chunk, min((c + 1) chunk, pos + t + 1)) against the kv-head's `group` query heads. Dynamic
// shared memory: q (group, HD), s (group, kTile), then m, l and the tile's rescale per head.
// ws_o (B Tq NH, splits, HD) and ws_ml (B Tq NH, splits, 2) get the chunk's partials.
template <class D>
__global__ void decode_attention_split_kernel(float* ws_o, float* ws_ml, const D* qkv,
                                              const D* k_cache, const D* v_cache, std::int64_t Tq,
                                              std::int64_t S, std::int64_t pos, int NH, int KVH,
                                              std::int64_t HD, float scale, std::int64_t chunk,
                                              std::int64_t splits) {
    extern __shared__ float smem[];
    const int group = NH / KVH;
    float* q = smem;                // (group, HD)
    float* s = q + group * HD;      // (group, kTile)
    float* ms = s + group * kTile;  // (group) running max
    float* ls = ms + group;         // (group) running sum
    float* rescale = ls + group;    // (group) this tile's e^(m_old - m_new)
    const std::int64_t c = blockIdx.x % splits,
                       w = blockIdx.x / splits;  // w = (b Tq + t) KVH + kvh
    const std::int64_t kvh = w % KVH, bt = w / KVH, b = bt / Tq, t = bt % Tq;
    const std::int64_t keys = pos + t + 1, j_begin = c * chunk;
    if (j_begin >= keys) return;  // past this query's keys: the combine reads fewer chunks
    const std::int64_t j_end = keys < j_begin + chunk ? keys : j_begin + chunk;
    const std::int64_t row = (NH + 2 * static_cast<std::int64_t>(KVH)) * HD, kv = KVH * HD;
    const std::int64_t n_out = group * HD;       // the block's output elements
    const D* qg = qkv + bt * row + kvh * n_out;  // heads kvh group .. kvh group + group - 1
    for (std::int64_t i = threadIdx.x; i < n_out; i += kThreads)
        q[i] = to_f32(qg[i]) * scale;
    for (int g = threadIdx.x; g < group; g += kThreads) {
        ms[g] = -INFINITY;
        ls[g] = 0.0f;
    }
    const D* K = k_cache + b * S * kv + kvh * HD;  // position j at j * kv
    const D* V = v_cache + b * S * kv + kvh * HD;
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    constexpr int kWarps = kThreads / kWarpSize;
    const int per = static_cast<int>((n_out + kThreads - 1) / kThreads);
    float o[kMaxSplitOut] = {};
    __syncthreads();
    for (std::int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
        const int n = j_end - j0 < kTile ? static_cast<int>(j_end - j0) : kTile;
        for (int p = warp; p < group * kTile; p += kWarps) {
            const int g = p / kTile, jj = p % kTile;
            float dot = 0.0f;
            if (jj < n) {
                for (std::int64_t d = lane; d < HD; d += kWarpSize)
                    dot += q[g * HD + d] * to_f32(K[(j0 + jj) * kv + d]);
            }
            dot = warp_sum(dot);
            if (lane == 0) s[p] = jj < n ? dot : -INFINITY;
        }
        __syncthreads();
        for (int g = warp; g < group; g += kWarps) {  // a lane per key of the tile
            const float x = s[g * kTile + lane];
            const float m_old = ms[g];
            const float m_new = fmaxf(m_old, warp_max(x));  // finite: the tile has a key
            const float p = expf(x - m_new);
            const float sum = warp_sum(p);
            s[g * kTile + lane] = p;
            if (lane == 0) {
                const float r = expf(m_old - m_new);
                rescale[g] = r;
                ls[g] = ls[g] * r + sum;
                ms[g] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kMaxSplitOut; ++k) {
            if (k >= per) break;
            const std::int64_t e = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
            if (e < n_out) {
                const std::int64_t g = e / HD, d = e % HD;
                float acc = o[k] * rescale[g];
                for (int jj = 0; jj < n; ++jj)
                    acc += s[g * kTile + jj] * to_f32(V[(j0 + jj) * kv + d]);
                o[k] = acc;
            }
        }
        __syncthreads();  // s and rescale are rewritten by the next tile
    }
    const std::int64_t first = (bt * NH + kvh * group) * splits + c;  // (head kvh group, chunk c)
#pragma unroll
    for (int k = 0; k < kMaxSplitOut; ++k) {
        if (k >= per) break;
        const std::int64_t e = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
        if (e < n_out) ws_o[(first + (e / HD) * splits) * HD + e % HD] = o[k];
    }
    for (int g = threadIdx.x; g < group; g += kThreads) {
        ws_ml[2 * (first + g * splits)] = ms[g];
        ws_ml[2 * (first + g * splits) + 1] = ls[g];
    }
}

// Flash-decoding, pass 2: block (b Tq + t) NH + h combines the query's ceil((pos + t + 1) / chunk)
// chunks in chunk order into out (each thread its d = tid + 128 k).
template <class D>
__global__ void decode_attention_combine_kernel(D* out, const float* ws_o, const float* ws_ml,
                                                std::int64_t Tq, std::int64_t pos, int NH,
                                                std::int64_t HD, std::int64_t chunk,
                                                std::int64_t splits) {
    __shared__ float red[kWarpSize];
    const std::int64_t w = blockIdx.x;  // (b Tq + t) NH + h, the workspace's row
    const std::int64_t t = (w / NH) % Tq;
    const std::int64_t n = (pos + t + chunk) / chunk;  // ceil((pos + t + 1) / chunk)
    const float* ml = ws_ml + w * splits * 2;
    const float* o = ws_o + w * splits * HD;
    float m = -INFINITY;
    for (std::int64_t c = threadIdx.x; c < n; c += kThreads)
        m = fmaxf(m, ml[2 * c]);
    m = block_max(m, red);  // a max: the same whatever the order
    float l = 0.0f, acc[kMaxHd / kThreads] = {};
    for (std::int64_t c = 0; c < n; ++c) {
        const float wc = expf(ml[2 * c] - m);
        l += ml[2 * c + 1] * wc;
#pragma unroll
        for (int k = 0; k < kMaxHd / kThreads; ++k) {
            const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
            if (d < HD) acc[k] += o[c * HD + d] * wc;
        }
    }
    D* dst = out + w * HD;  // out (B, Tq, NH HD): row (b Tq + t), head h
#pragma unroll
    for (int k = 0; k < kMaxHd / kThreads; ++k) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(k) * kThreads;
        if (d < HD) dst[d] = from_f32<D>(acc[k] / l);
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

namespace {

// Flash-decoding's two passes (the workspace checked against the call's size).
template <class T>
void decode_attention_split(const DecodeAttentionArgs<T>& a, const Launch& launch) {
    NAPKIN_CUDA_REQUIRE(a.chunk > 0, "decode_attention: chunk " << a.chunk << " (keys per block)");
    const std::int64_t keys = a.pos + a.Tq, splits = decode_attention_splits(keys, a.chunk);
    const std::int64_t need =
        decode_attention_workspace_floats(a.B, a.Tq, a.NH, a.HD, keys, a.chunk);
    NAPKIN_CUDA_REQUIRE(a.workspace_floats >= need, "decode_attention: a workspace of "
                                                        << a.workspace_floats
                                                        << " floats, the call needs " << need);
    const std::int64_t blocks = a.B * a.Tq * a.KVH * splits;
    NAPKIN_CUDA_REQUIRE(blocks <= kMaxGridX, "decode_attention: " << blocks << " blocks");
    const int group = a.NH / a.KVH;
    const std::size_t smem =
        sizeof(float) * static_cast<std::size_t>(group * a.HD + group * (kTile + 3));
    const float scale = 1.0f / sqrtf(static_cast<float>(a.HD));
    float* ws_o = a.workspace;
    float* ws_ml = ws_o + a.B * a.Tq * a.NH * splits * a.HD;
    auto split_kernel = decode_attention_split_kernel<device_t<T>>;  // at most 25 KiB: no opt-in
    split_kernel<<<static_cast<unsigned>(blocks), kThreads, smem, launch.stream>>>(
        ws_o, ws_ml, dev(a.qkv), dev(a.k_cache), dev(a.v_cache), a.Tq, a.S, a.pos, a.NH, a.KVH,
        a.HD, scale, a.chunk, splits);
    NAPKIN_CUDA_CHECK_LAUNCH();
    decode_attention_combine_kernel<<<static_cast<unsigned>(a.B * a.Tq * a.NH), kThreads, 0,
                                      launch.stream>>>(dev(a.out), ws_o, ws_ml, a.Tq, a.pos, a.NH,
                                                       a.HD, a.chunk, splits);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a, const Launch& launch) {
    check_shape(a.B, a.Tq, a.S, a.pos, a.NH, a.KVH, a.HD, "decode_attention");
    const std::int64_t blocks = a.B * a.Tq * a.NH;
    if (blocks == 0) return;
    NAPKIN_CUDA_REQUIRE(blocks < (1ll << 31), "decode_attention: " << blocks << " blocks");
    if (a.workspace != nullptr && decode_attention_can_split(a.NH, a.KVH, a.HD)) {
        decode_attention_split(a, launch);
        return;
    }
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
