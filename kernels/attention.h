// attention: causal scaled dot-product attention over q, k, v packed in one buffer.
//   qkv (B, T, (NH + 2*KVH) * HD) -> out (B, T, NH * HD); KVH divides NH (GQA/MQA).
// FLOPs count the two batched matmuls over the (query, key) pairs that the causal mask keeps,
// pairs = T*(T+1)/2 per head (T*T without the mask):
//   forward  4 * B * NH * HD * pairs            (S = Q K^T and O = P V)
//   backward 8 * B * NH * HD * pairs            (dP, dV, dQ, dK)
//   flash backward also recomputes S: + 2 * B * NH * HD * pairs, reported as recompute_flops.
// Softmax exponentials are not counted as FLOPs (the usual MFU convention).
// naive keeps P (B, NH, T, T) in the activation dtype; flash keeps a (B, NH, T) fp32
// logsumexp. Both keep out, which is the projection's input anyway.
#pragma once

#include <initializer_list>

#include "core/recipe.h"
#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct AttentionShape {
    std::int64_t B = 0, T = 0;
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
    bool causal = true;
    AttentionImpl impl = AttentionImpl::flash;
    DType dt = DType::f32;  // q, k, v, out and (naive) P
};

inline std::int64_t attention_pairs(const AttentionShape& s) {
    return s.causal ? s.T * (s.T + 1) / 2 : s.T * s.T;
}

inline KernelCost attention_forward_cost(const AttentionShape& s) {
    KernelCost c;
    const std::uint64_t heads = static_cast<std::uint64_t>(s.B) * s.NH;
    c.flops = 4ull * heads * s.HD * attention_pairs(s);
    c.bytes_read = nbytes(s.dt, s.B * s.T * (s.NH + 2ll * s.KVH) * s.HD);
    c.bytes_written = nbytes(s.dt, s.B * s.T * s.NH * s.HD);
    if (s.impl == AttentionImpl::naive) {
        c.bytes_written += nbytes(s.dt, static_cast<std::int64_t>(heads) * s.T * s.T);  // P
        c.workspace_bytes = nbytes(DType::f32, static_cast<std::int64_t>(heads) * s.T * s.T);
    } else {
        c.bytes_written += nbytes(DType::f32, static_cast<std::int64_t>(heads) * s.T);  // lse
    }
    return c;
}

inline KernelCost attention_backward_cost(const AttentionShape& s) {
    KernelCost c;
    const std::uint64_t heads = static_cast<std::uint64_t>(s.B) * s.NH;
    const std::int64_t qkv = s.B * s.T * (s.NH + 2ll * s.KVH) * s.HD;
    const std::int64_t o = s.B * s.T * s.NH * s.HD;
    c.flops = 8ull * heads * s.HD * attention_pairs(s);
    c.bytes_read = nbytes(s.dt, qkv) + 2 * nbytes(s.dt, o);  // q, k, v, out, dout
    c.bytes_written = nbytes(s.dt, qkv);                      // dq, dk, dv
    const std::int64_t scores = static_cast<std::int64_t>(heads) * s.T * s.T;
    if (s.impl == AttentionImpl::naive) {
        c.bytes_read += nbytes(s.dt, scores);                 // P
        c.workspace_bytes = nbytes(DType::f32, scores);       // dP / dS
    } else {
        c.bytes_read += nbytes(DType::f32, static_cast<std::int64_t>(heads) * s.T);
    }
    return c;
}

// FLOPs flash attention spends in backward recomputing S = Q K^T (hardware, not model FLOPs).
inline std::uint64_t attention_backward_recompute_flops(const AttentionShape& s) {
    if (s.impl != AttentionImpl::flash) return 0;
    return 2ull * s.B * s.NH * s.HD * attention_pairs(s);
}

// Dropout on the attention probabilities (GPT-2's attn_pdrop): Pd = dropout(P) after the
// softmax (kernels/dropout.h, element index = P's offset ((b NH + h) T + i) T + j, so both paths
// draw the same bits), and out = Pd V. Backward: dPd = dout V^T, dP = mask ? dPd / (1 - p) : 0,
// dS from P as without dropout (D_i = sum_j P_ij dP_ij = dout_i . out_i still), dV = Pd^T dout.
// Naive keeps the mask and Pd beside P, as Korthikanti counts them (2 + 1 + 2 bytes per (query,
// key) pair in 16-bit); flash keeps neither (mask and dropped are unused: null) and draws the
// bits again in its backward, as FlashAttention does.
template <class Elem>
struct AttentionDropout {
    float p = 0.0f;
    std::uint64_t seed = 0;        // dropout_site_seed(..., DropoutSite::attention)
    std::uint8_t* mask = nullptr;  // (B, NH, T, T), written by the forward
    Elem* dropped = nullptr;       // (B, NH, T, T) Pd, written by the forward
};

// Layout: qkv (B, T, (NH + 2*KVH) * HD) holds per token [q heads (NH*HD) | k heads (KVH*HD) |
// v heads (KVH*HD)]; out (B, T, NH*HD) holds the heads side by side. Query head h reads kv head
// h / (NH / KVH). Scores s_ij = q_i . k_j / sqrt(HD) for keys j <= i (causal mask).
// Backward kernels ACCUMULATE (+=) into dqkv (B, T, (NH + 2*KVH) * HD), like llm.c: callers zero
// it. dropout: null, none; else as AttentionDropout above (a host value).

// The sizes of every attention call; kernels/cpu/attention.cpp's layout comment above.
struct AttentionDims {
    std::int64_t B = 0, T = 0;
    int NH = 0, KVH = 0;
    std::int64_t HD = 0;
};

// Naive: out = P V with P (B, NH, T, T) = softmax(masked S), kept for backward in Elem (the
// activation dtype, as the op plan counts it). Every element of P is written: zero above the
// diagonal. With dropout, out = Pd V.
template <class Elem>
struct AttentionNaiveForwardArgs {
    Elem* out = nullptr;        // (B, T, NH*HD)
    Elem* p = nullptr;          // (B, NH, T, T)
    const Elem* qkv = nullptr;  // (B, T, (NH + 2*KVH) * HD)
    AttentionDims dims;
    const AttentionDropout<Elem>* dropout = nullptr;
};

// dqkv += gradient of L given dout, from the kept P; scratch holds dS (B, NH, T, T) in fp32
// (attention_naive_backward_scratch_floats; device memory on CUDA). With dropout, its kept mask
// and Pd (the forward's).
template <class Elem>
struct AttentionNaiveBackwardArgs {
    Elem* dqkv = nullptr;        // (B, T, (NH + 2*KVH) * HD)
    float* scratch = nullptr;    // (B, NH, T, T)
    const Elem* dout = nullptr;  // (B, T, NH*HD)
    const Elem* qkv = nullptr;   // (B, T, (NH + 2*KVH) * HD)
    const Elem* p = nullptr;     // (B, NH, T, T)
    AttentionDims dims;
    const AttentionDropout<Elem>* dropout = nullptr;
};

// Flash: no T*T buffer; keeps out and lse (B, NH, T) fp32: lse_i = log sum_{j<=i} exp(s_ij),
// natural log of the scaled scores. Dropout: only p and seed are read (mask and dropped are
// unused); the forward and the backward draw the keep bits of P from its offsets.
template <class Elem>
struct AttentionFlashForwardArgs {
    Elem* out = nullptr;        // (B, T, NH*HD)
    float* lse = nullptr;       // (B, NH, T)
    const Elem* qkv = nullptr;  // (B, T, (NH + 2*KVH) * HD)
    AttentionDims dims;
    const AttentionDropout<Elem>* dropout = nullptr;
};

// dqkv += gradient of L given dout, from out, qkv and lse; p_ij = exp(s_ij - lse_i) recomputed
// from S, D_i = dout_i . out_i, dS = p (dP - D).
template <class Elem>
struct AttentionFlashBackwardArgs {
    Elem* dqkv = nullptr;        // (B, T, (NH + 2*KVH) * HD)
    const Elem* dout = nullptr;  // (B, T, NH*HD)
    const Elem* out = nullptr;   // (B, T, NH*HD)
    const Elem* qkv = nullptr;   // (B, T, (NH + 2*KVH) * HD)
    const float* lse = nullptr;  // (B, NH, T)
    AttentionDims dims;
    const AttentionDropout<Elem>* dropout = nullptr;
};

namespace cpu {

// CPU kernels (kernels/cpu/attention.cpp, tested in tests/kernels/attention_test.cpp), templated
// on the storage type Elem (float, bf16_t, f16_t from core/half.h; not T, which is the sequence
// length here); all arithmetic in fp32. Each element of dqkv gets its whole gradient summed in
// fp32 and added once (one rounding to Elem). Threads split rows or key blocks, each output
// element has one writer and every sum runs in a fixed order, so results are bitwise identical
// run to run whatever the thread count.
// Preconditions (NAPKIN_ASSERT): B, T >= 0; KVH >= 1 divides NH; 1 <= HD <= kAttentionMaxHeadDim.

// Per-row fp32 accumulators live on the stack, sized for this head dimension.
inline constexpr std::int64_t kAttentionMaxHeadDim = 256;

// Naive forward: out is computed from the fp32 probabilities before P is rounded. Each thread
// allocates one (T) fp32 row of scores per call.
template <class Elem>
void attention_naive_forward(const AttentionNaiveForwardArgs<Elem>& args);

// Floats of scratch attention_naive_backward needs: dS (B, NH, T, T) in fp32, the workspace
// attention_backward_cost counts for the naive path.
inline std::int64_t attention_naive_backward_scratch_floats(std::int64_t B, std::int64_t T, int NH) { return B * NH * T * T; }

// Two passes: query rows (dP, dS into scratch, dq), then key rows (dk, dv summed over the query
// heads of their group). D_i = sum_j P_ij dP_ij.
template <class Elem>
void attention_naive_backward(const AttentionNaiveBackwardArgs<Elem>& args);

// Flash-style: per query row, keys in blocks of 64 with an online max and sum.
template <class Elem>
void attention_flash_forward(const AttentionFlashForwardArgs<Elem>& args);

// Deterministic without atomics, it takes two passes: dk, dv per (b, kv head, block of 32 keys)
// over the query heads of the group, then dq per query row. Both passes recompute S and the
// second recomputes dP, so the CPU does 14 * B * NH * HD * pairs FLOPs: the 8 of
// attention_backward_cost plus 6 of recompute (three times attention_backward_recompute_flops,
// which counts a single-pass kernel). Stack only: no allocation. With dropout, dP and dV through
// the same keep bits, drawn again.
template <class Elem>
void attention_flash_backward(const AttentionFlashBackwardArgs<Elem>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/attention.cu, tested against the CPU in
// tests/kernels_cuda/attention_test.cpp): the same layouts, causal mask, GQA/MQA grouping,
// storage types (fp32 arithmetic throughout) and accumulation semantics as the CPU's above, and
// the same deterministic two-pass backward (one writer per output element, no atomics). Device
// pointers (a dropout's mask and dropped too; the struct itself is a host value), queued on
// launch.stream. Preconditions (NAPKIN_CUDA_REQUIRE): KVH >= 1 divides NH,
// 1 <= HD <= kAttentionMaxHeadDim.
//
// naive: one block per query row; the row's T fp32 scores live in shared memory, so T is at most
// attention_naive_max_T() (about 50k on an H100). The forward's dropout mask is the CPU's bit for
// bit.
// flash: for bf16 and fp16 with HD a multiple of 16 up to 128, tensor cores (attention_flash_mma_*
// below); otherwise a SIMT tiled kernel (fp32 FMA): 8 query rows per block (a warp each) over
// shared-memory tiles of 32 keys, online softmax, lse kept; backward recomputes S.

std::int64_t attention_naive_max_T();

template <class Elem>
void attention_naive_forward(const AttentionNaiveForwardArgs<Elem>& args, const Launch& launch);
template <class Elem>
void attention_naive_backward(const AttentionNaiveBackwardArgs<Elem>& args, const Launch& launch);
template <class Elem>
void attention_flash_forward(const AttentionFlashForwardArgs<Elem>& args, const Launch& launch);
template <class Elem>
void attention_flash_backward(const AttentionFlashBackwardArgs<Elem>& args, const Launch& launch);

// The two flash implementations behind attention_flash_forward/backward, by name (the tests
// and bench/attention_bench.cpp run each):
// simt (attention.cu): the kernels described above, any storage type and HD.
// mma (attention_mma.cu): tensor cores, for bf16 and fp16 storage with HD a multiple of 16 in
// [16, 128], every pointer 16-byte aligned (rows move as 16-byte vectors; at HD 64 and 128 on
// sm_80 and later, mma.sync kernels in FlashAttention-2's manner, attention_fa2_*.cu, the softmax
// and dS in registers: docs/CUDA.md "Flash attention on mma.sync"; WMMA as below otherwise):
// attention_flash_mma_supported<Elem>(HD, pointers) says whether they apply, and the dispatch
// takes them whenever it does. Blocks of 4 warps own 64 queries (forward, dq) or 64 keys (dk,
// dv), 16 per warp, and walk tiles of 64 keys (queries) in shared memory: S = Q K^T and O += P V
// (forward); S, dV += P^T dO, dP = dO V^T, dK += dS^T Q (dk/dv pass) and S, dP, dQ += dS K (dq
// pass) on tensor cores with fp32 accumulation. The fragments' layout is opaque, so softmax and
// dS = P (dP - D) run on fp32 tiles in shared memory, and P and dS are rounded to Elem for the
// next product (where the SIMT kernels keep fp32). Same outputs, masking, GQA grouping, lse and
// deterministic two-pass backward (one writer per element, no atomics) as the SIMT kernels.
template <class Elem>
bool attention_flash_mma_supported(std::int64_t HD, std::initializer_list<const void*> pointers);

template <class Elem>
void attention_flash_simt_forward(const AttentionFlashForwardArgs<Elem>& args,
                                  const Launch& launch);
template <class Elem>
void attention_flash_simt_backward(const AttentionFlashBackwardArgs<Elem>& args,
                                   const Launch& launch);
// Elem: bf16_t, f16_t only; preconditions (NAPKIN_CUDA_REQUIRE): attention_flash_mma_supported.
// With dropout, P goes to the tensor cores with its dropped elements zeroed and unscaled, and
// 1 / (1 - p) multiplies the fp32 results (out, dV) once, so the 16-bit P stays in [0, 2^8].
template <class Elem>
void attention_flash_mma_forward(const AttentionFlashForwardArgs<Elem>& args, const Launch& launch);
template <class Elem>
void attention_flash_mma_backward(const AttentionFlashBackwardArgs<Elem>& args,
                                  const Launch& launch);

}  // namespace cuda

}  // namespace napkin
