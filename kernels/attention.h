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

#include "core/recipe.h"
#include "kernels/cost.h"

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

}  // namespace napkin
