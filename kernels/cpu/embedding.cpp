// Token (+ learned position) embedding on the CPU (declared in kernels/embedding.h). Forward is
// a gather, one OpenMP iteration per token. Backward is a scatter-add where tokens repeat, made
// race-free and deterministic by giving every output element a single owner that sums its
// contributions in position order (see the header for the two schemes).
#include "kernels/embedding.h"

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/half.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 15;                               // elements below which threads cost more than they save
constexpr std::int64_t kColumnBlock = 64;  // columns of every row owned by one thread (float)
constexpr std::int64_t kChunk = 1024;      // fp32 accumulator columns on the stack (16-bit)

// dwte (Vp, C) += scatter of dout (BT, C) by tokens (BT), float: threads own column blocks.
void scatter_rows_by_columns(float* dwte, const float* dout, const std::int32_t* tokens,
                             std::int64_t BT, std::int64_t C) {
    const std::int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (BT * C > kParallelMin)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::int64_t c0 = blk * kColumnBlock;
        const std::int64_t cn = std::min(kColumnBlock, C - c0);
        for (std::int64_t p = 0; p < BT; ++p) {
            float* row = dwte + static_cast<std::int64_t>(tokens[p]) * C + c0;  // (cn)
            const float* g = dout + p * C + c0;                                 // (cn)
            for (std::int64_t j = 0; j < cn; ++j)
                row[j] += g[j];
        }
    }
}

// The same for 16-bit storage: the first position of each token owns the token's row, sums all
// of its positions in fp32 (in position order) and rounds into Elem once.
template <class Elem>
void scatter_rows_by_owner(Elem* dwte, const Elem* dout, const std::int32_t* tokens,
                           std::int64_t BT, std::int64_t C) {
#pragma omp parallel for schedule(dynamic, 16) if (BT * C > kParallelMin)
    for (std::int64_t p = 0; p < BT; ++p) {
        const std::int32_t tok = tokens[p];
        bool owner = true;
        for (std::int64_t q = 0; q < p && owner; ++q)
            owner = tokens[q] != tok;
        if (!owner) continue;
        Elem* row = dwte + static_cast<std::int64_t>(tok) * C;  // (C)
        for (std::int64_t c0 = 0; c0 < C; c0 += kChunk) {
            const std::int64_t cn = std::min(kChunk, C - c0);
            float acc[kChunk] = {};
            for (std::int64_t q = p; q < BT; ++q) {
                if (tokens[q] != tok) continue;
                const Elem* g = dout + q * C + c0;  // (cn)
                for (std::int64_t j = 0; j < cn; ++j)
                    acc[j] += to_float(g[j]);
            }
            for (std::int64_t j = 0; j < cn; ++j)
                row[c0 + j] = from_float<Elem>(to_float(row[c0 + j]) + acc[j]);
        }
    }
}

}  // namespace

template <class Elem>
void embedding_forward(const EmbeddingForwardArgs<Elem>& args) {
    const auto& [out, tokens, wte, wpe, B, T, C] = args;
    NAPKIN_ASSERT(B >= 0 && T >= 0 && C >= 0,
                  "embedding_forward: B " << B << ", T " << T << ", C " << C);
#pragma omp parallel for if (B * T * C > kParallelMin)
    for (std::int64_t p = 0; p < B * T; ++p) {
        const Elem* tok_row = wte + static_cast<std::int64_t>(tokens[p]) * C;  // (C)
        Elem* y = out + p * C;                                                 // (C)
        if (wpe == nullptr) {
            std::copy(tok_row, tok_row + C, y);
        } else {
            const Elem* pos_row = wpe + (p % T) * C;  // (C)
            for (std::int64_t c = 0; c < C; ++c)
                y[c] = from_float<Elem>(to_float(tok_row[c]) + to_float(pos_row[c]));
        }
    }
}

template <class Elem>
void embedding_backward(const EmbeddingBackwardArgs<Elem>& args) {
    const auto& [dwte, dwpe, dout, tokens, B, T, C] = args;
    NAPKIN_ASSERT(B >= 0 && T >= 0 && C >= 0,
                  "embedding_backward: B " << B << ", T " << T << ", C " << C);
    if constexpr (std::is_same_v<Elem, float>) {
        scatter_rows_by_columns(dwte, dout, tokens, B * T, C);
    } else {
        scatter_rows_by_owner(dwte, dout, tokens, B * T, C);
    }
    if (dwpe == nullptr) return;
        // dwpe (T, C) += sum over b of dout (B, T, C), fp32 over b, one thread per position.
#pragma omp parallel for if (B * T * C > kParallelMin)
    for (std::int64_t t = 0; t < T; ++t) {
        for (std::int64_t c0 = 0; c0 < C; c0 += kChunk) {
            const std::int64_t cn = std::min(kChunk, C - c0);
            float acc[kChunk] = {};
            for (std::int64_t b = 0; b < B; ++b) {
                const Elem* g = dout + (b * T + t) * C + c0;  // (cn)
                for (std::int64_t j = 0; j < cn; ++j)
                    acc[j] += to_float(g[j]);
            }
            Elem* row = dwpe + t * C + c0;  // (cn)
            for (std::int64_t j = 0; j < cn; ++j)
                row[j] = from_float<Elem>(to_float(row[j]) + acc[j]);
        }
    }
}

#define NAPKIN_EMBEDDING_INSTANTIATE(E)                                 \
    template void embedding_forward<E>(const EmbeddingForwardArgs<E>&); \
    template void embedding_backward<E>(const EmbeddingBackwardArgs<E>&);
NAPKIN_EMBEDDING_INSTANTIATE(float)
NAPKIN_EMBEDDING_INSTANTIATE(bf16_t)
NAPKIN_EMBEDDING_INSTANTIATE(f16_t)
#undef NAPKIN_EMBEDDING_INSTANTIATE

}  // namespace napkin::cpu
