// decode attention: attention of Tq new queries per sequence over a KV cache, the inference
// engine's attention (core/engine/generate_impl.h). Two kernels:
//
//   kv_cache_write    the keys and values of Tq new positions, taken from the packed qkv
//                     (B, Tq, (NH + 2 KVH) HD) (k already rotated by RoPE), stored at positions
//                     [pos, pos + Tq) of each sequence's cache
//   decode_attention  out (B, Tq, NH HD): query t of sequence b (position pos + t) attends
//                     causally to the cached positions [0, pos + t]; query head h reads kv-head
//                     h / (NH / KVH) (GQA, MQA: KVH = 1). Softmax with scale 1 / sqrt(HD), in
//                     fp32, online (one pass over the keys, running max and sum; Milakov and
//                     Gimelshein 2018), so nothing of size S is kept.
//
// The prefill is the call with pos = 0, Tq = Tp (the causal triangle); each decode step the call
// with Tq = 1 at pos = Tp + j - 1. Cache layout per layer: k_cache and v_cache (B, S, KVH, HD),
// S the capacity of a sequence (Tp + G), so a sequence's cache is contiguous and a decode step
// reads it front to back.
// FLOPs: 4 HD per (query head, key) pair (S = q k^T and o = p v), as attention_forward_cost;
// bytes: the queries, each sequence's keys and values up to its last query's position, once (what
// a kernel that keeps a sequence's queries while it streams the cache reads), and the output.
//
// Flash-decoding (Dao et al. 2023; CUDA only, docs/INFERENCE.md "The CUDA kernel"): given a
// workspace, the CUDA decode_attention splits each sequence's keys [0, pos + t] into chunks of
// `chunk` keys, one block per (sequence, query, kv-head, chunk) serving the kv-head's NH / KVH
// query heads, so the keys and values are read once per kv-head and a batch of one runs
// KVH x ceil(keys / chunk) blocks. Each block leaves, per query head, its chunk's max m, sum l and
// unnormalised output o (fp32) in the workspace; a second kernel combines a query's chunks in
// chunk order (no atomics: the result does not depend on the schedule). The split depends only
// on the call's shape and the chunk, never on the device, so the workspace is sized in advance:
// decode_attention_workspace_floats().
// Tests: tests/kernels/decode_attention_test.cpp (against a double-precision reference, GQA and
// MQA shapes), tests/kernels_cuda/decode_attention_test.cpp (CUDA against the CPU, single pass
// and split).
#pragma once

#include <cstdint>

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct DecodeAttentionShape {
    std::int64_t B = 0, Tq = 0;  // sequences, new queries per sequence
    std::int64_t pos = 0;        // position of the first new query
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
    DType dt = DType::f32;   // qkv, cache and out
    std::int64_t chunk = 0;  // flash-decoding's keys per block; 0: the single-pass kernel
};

// Flash-decoding's chunk: keys per block. A trade: a block reads 2 x chunk x HD cache elements
// (64 KiB at 128 keys of HD 128 in bf16) and writes then re-reads (HD + 2) x 4 bytes per query
// head it serves (1.6% more traffic for MHA at HD 64, 6% for Llama's groups of 4); at GPT-2's
// 12 kv-heads a batch of one has a block per H100 SM (132) from 1,281 keys on (256 keys: 2,561).
inline constexpr std::int64_t kDecodeAttentionChunk = 128;
// The split kernel keeps a kv-head's NH / KVH scaled queries and its output accumulators on the
// chip: shapes with NH / KVH <= 64 and (NH / KVH) HD <= 4096 (every MHA up to HD 4096, Llama's
// GQA, MQA of 32 heads of 128). Others run the single-pass kernel, workspace or not.
inline constexpr int kDecodeSplitMaxGroup = 64;
inline constexpr std::int64_t kDecodeSplitMaxGroupElems = 4096;
inline bool decode_attention_can_split(int NH, int KVH, std::int64_t HD) {
    if (NH <= 0 || KVH <= 0 || NH % KVH != 0 || HD <= 0) return false;
    const int group = NH / KVH;
    return group <= kDecodeSplitMaxGroup && group * HD <= kDecodeSplitMaxGroupElems;
}
// Chunks of a query with `keys` keys: ceil(keys / chunk).
inline std::int64_t decode_attention_splits(std::int64_t keys, std::int64_t chunk) {
    return (keys + chunk - 1) / chunk;
}
// The split's workspace for Tq queries per sequence whose last has `keys` keys: per (sequence,
// query, query head, chunk) HD floats of o, then m and l: B Tq NH ceil(keys / chunk) (HD + 2).
inline std::int64_t decode_attention_workspace_floats(std::int64_t B, std::int64_t Tq, int NH,
                                                      std::int64_t HD, std::int64_t keys,
                                                      std::int64_t chunk) {
    return B * Tq * NH * decode_attention_splits(keys, chunk) * (HD + 2);
}

// (query head, key) pairs: per sequence and head, sum over t < Tq of (pos + t + 1).
inline std::int64_t decode_attention_pairs(const DecodeAttentionShape& s) {
    return s.B * s.NH * (s.Tq * (s.pos + 1) + s.Tq * (s.Tq - 1) / 2);
}

inline KernelCost decode_attention_cost(const DecodeAttentionShape& s) {
    KernelCost c;
    c.flops = 4ull * static_cast<std::uint64_t>(s.HD) * decode_attention_pairs(s);
    const std::int64_t keys = s.pos + s.Tq;  // per sequence, read once
    c.bytes_read =
        nbytes(s.dt, s.B * s.Tq * s.NH * s.HD) + nbytes(s.dt, 2 * s.B * keys * s.KVH * s.HD);
    c.bytes_written = nbytes(s.dt, s.B * s.Tq * s.NH * s.HD);
    if (s.chunk > 0) {  // the partials, written by the split and read by the combine
        const auto partials = static_cast<std::uint64_t>(
            4 * decode_attention_workspace_floats(s.B, s.Tq, s.NH, s.HD, keys, s.chunk));
        c.bytes_written += partials;
        c.bytes_read += partials;
        c.workspace_bytes = partials;
    }
    return c;
}

inline KernelCost kv_cache_write_cost(const DecodeAttentionShape& s) {
    const std::int64_t n = 2 * s.B * s.Tq * s.KVH * s.HD;
    return {0, nbytes(s.dt, n), nbytes(s.dt, n), 0};
}

// Copies k and v of the new positions from qkv into the cache.
template <class T>
struct KvCacheWriteArgs {
    T* k_cache = nullptr;                        // (B, S, KVH, HD)
    T* v_cache = nullptr;                        // (B, S, KVH, HD)
    const T* qkv = nullptr;                      // (B, Tq, (NH + 2 KVH) HD)
    std::int64_t B = 0, Tq = 0, S = 0, pos = 0;  // pos + Tq <= S
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
};

// out = softmax(q K^T / sqrt(HD), causal over the cache) V, the queries read from qkv.
template <class T>
struct DecodeAttentionArgs {
    T* out = nullptr;            // (B, Tq, NH HD)
    const T* qkv = nullptr;      // (B, Tq, (NH + 2 KVH) HD): the queries (the first NH heads)
    const T* k_cache = nullptr;  // (B, S, KVH, HD), positions [0, pos + Tq) written
    const T* v_cache = nullptr;  // (B, S, KVH, HD)
    std::int64_t B = 0, Tq = 0, S = 0, pos = 0;  // pos + Tq <= S
    int NH = 0, KVH = 0;                         // KVH divides NH
    std::int64_t HD = 0;
    // Flash-decoding (CUDA; the CPU ignores both): with a workspace of at least
    // decode_attention_workspace_floats(B, Tq, NH, HD, pos + Tq, chunk) floats, the split kernels
    // when decode_attention_can_split(NH, KVH, HD); null: the single-pass kernel.
    float* workspace = nullptr;
    std::int64_t workspace_floats = 0;
    std::int64_t chunk = kDecodeAttentionChunk;  // keys per block, > 0
};

namespace cpu {

// CPU kernels (kernels/cpu/decode_attention.cpp), the specification: one OpenMP iteration per
// (sequence, query, head), fp32 arithmetic, results independent of the thread count.
template <class T>
void kv_cache_write(const KvCacheWriteArgs<T>& a);
template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a);

}  // namespace cpu

namespace cuda {

// CUDA twins (kernels/cuda/decode_attention.cu): the same semantics, device pointers, queued on
// launch.stream. decode_attention without a workspace is one block per (sequence, query, head)
// streaming the sequence's cache (the prefill's: B Tp NH blocks are plenty); with one, flash-
// decoding's split and combine (above), for decode steps.
template <class T>
void kv_cache_write(const KvCacheWriteArgs<T>& a, const Launch& launch);
template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
