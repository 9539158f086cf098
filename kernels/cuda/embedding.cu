// Token (+ learned position) embedding on the GPU (declared in kernels/embedding.h; the CPU
// twin, the spec, is kernels/cpu/embedding.cpp). Forward is a gather. Backward is a scatter-add
// where tokens repeat, made deterministic without atomics as the CPU's 16-bit path does it: the
// block of a token's first position owns the token's dwte row, gathers (in position order) the
// positions holding the token, sums their rows in fp32 and adds into dwte once. dwpe: one thread
// per (t, c) sums over b.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/embedding.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kColsPerThread = 4;  // columns summed per pass: kBlock * 4 = 1024

template <class D>
__global__ void embedding_forward_kernel(D* out, const std::int32_t* tokens, const D* wte,
                                         const D* wpe, std::int64_t BT, std::int64_t T,
                                         std::int64_t C) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         i < BT * C; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t p = i / C, c = i % C;
        const D w = wte[static_cast<std::int64_t>(tokens[p]) * C + c];
        out[i] = wpe == nullptr ? w : from_f32<D>(to_f32(w) + to_f32(wpe[(p % T) * C + c]));
    }
}

// Block p (kBlock threads): returns at once unless p is the first position of its token; then,
// for each pass over kBlock * kColsPerThread columns, walks the positions q >= p in tiles of
// kBlock, compacts the matching ones in order into `match` (ballot + warp prefix), and adds their
// dout rows into per-thread fp32 accumulators.
template <class D>
__global__ void embedding_backward_wte_kernel(D* dwte, const D* dout, const std::int32_t* tokens,
                                              std::int64_t BT, std::int64_t C) {
    __shared__ std::int64_t match[kBlock];
    __shared__ int warp_counts[kBlock / kWarpSize];
    const std::int64_t p = blockIdx.x;
    const std::int32_t tok = tokens[p];
    const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
    for (std::int64_t q0 = 0; q0 < p; q0 += kBlock) {
        const std::int64_t q = q0 + threadIdx.x;
        if (__syncthreads_or(q < p && tokens[q] == tok)) return;  // not the owner
    }
    D* row = dwte + static_cast<std::int64_t>(tok) * C;  // (C)
    for (std::int64_t c0 = 0; c0 < C; c0 += kBlock * kColsPerThread) {
        float acc[kColsPerThread] = {};
        for (std::int64_t q0 = p; q0 < BT; q0 += kBlock) {
            const std::int64_t q = q0 + threadIdx.x;
            const bool hit = q < BT && tokens[q] == tok;
            const unsigned ballot = __ballot_sync(0xffffffffu, hit);
            if (lane == 0) warp_counts[warp] = __popc(ballot);
            __syncthreads();
            int offset = 0, total = 0;
            for (int w = 0; w < kBlock / kWarpSize; ++w) {
                if (w < warp) offset += warp_counts[w];
                total += warp_counts[w];
            }
            if (hit) match[offset + __popc(ballot & ((1u << lane) - 1u))] = q;
            __syncthreads();
            for (int j = 0; j < total; ++j) {
                const D* g = dout + match[j] * C;  // (C)
#pragma unroll
                for (int k = 0; k < kColsPerThread; ++k) {
                    const std::int64_t c = c0 + threadIdx.x + k * kBlock;
                    if (c < C) acc[k] += to_f32(g[c]);
                }
            }
            __syncthreads();  // match and warp_counts are rewritten by the next tile
        }
#pragma unroll
        for (int k = 0; k < kColsPerThread; ++k) {
            const std::int64_t c = c0 + threadIdx.x + k * kBlock;
            if (c < C) row[c] = from_f32<D>(to_f32(row[c]) + acc[k]);
        }
    }
}

// dwpe (T, C) row t += sum over b of dout (B, T, C) row (b, t); grid (ceil(C / kBlock), T).
template <class D>
__global__ void embedding_backward_wpe_kernel(D* dwpe, const D* dout, std::int64_t B,
                                              std::int64_t T, std::int64_t C) {
    const std::int64_t t = blockIdx.y;
    const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(kBlock) + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (std::int64_t b = 0; b < B; ++b)
        acc += to_f32(dout[(b * T + t) * C + c]);
    dwpe[t * C + c] = from_f32<D>(to_f32(dwpe[t * C + c]) + acc);
}

}  // namespace

template <class Elem>
void embedding_forward(const EmbeddingForwardArgs<Elem>& args, const Launch& launch) {
    const auto& [out, tokens, wte, wpe, B, T, C] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(B >= 0 && T >= 0 && C >= 0,
                        "embedding_forward: B " << B << ", T " << T << ", C " << C);
    if (B * T * C == 0) return;
    embedding_forward_kernel<<<grid_for(B * T * C, kBlock), kBlock, 0, stream>>>(
        dev(out), tokens, dev(wte), dev(wpe), B * T, T, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Elem>
void embedding_backward(const EmbeddingBackwardArgs<Elem>& args, const Launch& launch) {
    const auto& [dwte, dwpe, dout, tokens, B, T, C] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(B >= 0 && T >= 0 && C >= 0,
                        "embedding_backward: B " << B << ", T " << T << ", C " << C);
    NAPKIN_CUDA_REQUIRE(B * T <= kMaxGridX && T <= 65535,
                        "embedding_backward: B*T " << B * T << ", T " << T << " exceed one grid");
    if (B * T * C == 0) return;
    embedding_backward_wte_kernel<<<static_cast<unsigned>(B * T), kBlock, 0, stream>>>(
        dev(dwte), dev(dout), tokens, B * T, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
    if (dwpe == nullptr) return;
    const dim3 grid(static_cast<unsigned>((C + kBlock - 1) / kBlock), static_cast<unsigned>(T));
    embedding_backward_wpe_kernel<<<grid, kBlock, 0, stream>>>(dev(dwpe), dev(dout), B, T, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_EMBEDDING_INSTANTIATE(E)                                           \
    template void embedding_forward<E>(const EmbeddingForwardArgs<E>&, const Launch&); \
    template void embedding_backward<E>(const EmbeddingBackwardArgs<E>&, const Launch&);
NAPKIN_CUDA_EMBEDDING_INSTANTIATE(float)
NAPKIN_CUDA_EMBEDDING_INSTANTIATE(bf16_t)
NAPKIN_CUDA_EMBEDDING_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_EMBEDDING_INSTANTIATE

}  // namespace napkin::cuda
