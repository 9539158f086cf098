// cross_entropy: the loss over the head's logits, computed in chunks of rows so that the full
// fp32 logits (B*T, Vp) never exist at once (the seeds' chunked / cut cross-entropy).
// For each chunk of R rows: logits (R, Vp) fp32 = head matmul; softmax over the V real
// columns, loss = logsumexp - logit[target], dlogits = (softmax - onehot) / (B*T); the head's
// input and weight gradients for the chunk are taken right away, so nothing is kept.
// FLOPs per logit: 5 (max, subtract, exp, sum, scale) forward + gradient together.
#pragma once

#include "kernels/cost.h"

namespace napkin {

struct CrossEntropyShape {
    std::int64_t M = 0;      // rows: B*T
    std::int64_t V = 0;      // real vocabulary
    std::int64_t Vp = 0;     // padded vocabulary (columns of the logits)
    std::int64_t chunk = 0;  // rows per chunk
};

inline KernelCost cross_entropy_forward_cost(const CrossEntropyShape& s) {
    KernelCost c;
    c.flops = 5ull * s.M * s.V;
    c.bytes_read = nbytes(DType::f32, s.M * s.Vp) + nbytes(DType::i8, 4 * s.M);
    c.bytes_written = nbytes(DType::f32, s.M * s.Vp) + nbytes(DType::f32, s.M);
    c.workspace_bytes = nbytes(DType::f32, s.chunk * s.Vp);
    return c;
}

}  // namespace napkin
