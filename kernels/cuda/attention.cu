// Causal self-attention on the GPU (declared in kernels/attention.h; the CPU twin, the spec, is
// kernels/cpu/attention.cpp), both implementations, fp32 arithmetic on any storage type:
//   naive: one block per query row; the row's scores in shared memory; P (B, NH, T, T) kept.
//          Backward: dS into scratch per query row (with dq), then one block per key row sums
//          dk, dv over the group's query heads. Optional dropout on P (AttentionDropout): the
//          mask and Pd kept beside P, the mask from kernels/dropout.h's hash (the CPU's bits).
//   flash: a SIMT tiled kernel: a block of kFlashWarps warps holds kFlashWarps query rows (one
//          per warp, q in shared memory); key/value tiles of kTile rows are staged in shared
//          memory as fp32 (rows padded to HD + 1 floats so that lane j reading row j is free of
//          bank conflicts); lane j scores key j of the tile, the warp keeps the online max and
//          sum, and each lane accumulates the output dimensions lane, lane + 32, ... in
//          registers. lse = m + log(sum) is kept.
//          Backward, deterministic like the CPU's: pass 1, one block per (b, kv head, tile of
//          kTile keys), each warp owning kKeysPerWarp keys' dk, dv in registers, walks the
//          group's query heads and the query tiles that see the keys (lane i scores query i);
//          pass 2, the forward's layout again for dq. S and dP are recomputed in both passes.
//          Optional dropout on P (AttentionDropout's p and seed): the forward's lane j weighs v_j
//          by e_j = exp(s_j - m) kept and scaled, or 0 (the sum takes e_j undropped); the
//          backward passes draw the same bits again for dP and dV. Nothing is kept.
// Softmax scale 1/sqrt(HD); scores, probabilities and sums in fp32 throughout.
// attention_flash_forward/backward take the tensor-core kernels of attention_mma.cu instead for
// bf16 and fp16 storage with HD a multiple of 16 up to 128 (attention_flash_mma_supported;
// mma.sync at HD 64 and 128, attention_fa2_*.cu).
#include <cstdint>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/attention_dropout.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dropout.h"

namespace napkin::cuda {

namespace {

constexpr std::int64_t kMaxHD = cpu::kAttentionMaxHeadDim;
constexpr int kTile = 32;                          // keys (or queries) per shared-memory tile
constexpr int kFlashWarps = 8;                     // query rows per forward / dq block
constexpr int kKeysPerWarp = kTile / kFlashWarps;  // dk, dv pass: 4 keys per warp
constexpr int kDimsPerLane = static_cast<int>((kMaxHD + kWarpSize - 1) / kWarpSize);  // 8
constexpr int kNaiveBlock = 128;

struct Layout {
    std::int64_t T = 0, HD = 0;
    int NH = 0, KVH = 0, group = 0;
    std::int64_t qkv_row = 0;  // (NH + 2*KVH) * HD
    std::int64_t out_row = 0;  // NH * HD
    float scale = 0.0f;

    __device__ std::int64_t q(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * qkv_row + h * HD;
    }
    __device__ std::int64_t k(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + (NH + g) * HD;
    }
    __device__ std::int64_t v(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + (NH + KVH + g) * HD;
    }
    __device__ std::int64_t o(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * out_row + h * HD;
    }
    __device__ std::int64_t row(std::int64_t b, int h, std::int64_t t) const {
        return (b * NH + h) * T + t;
    }
};

Layout make_layout(const char* op, std::int64_t B, std::int64_t T, int NH, int KVH,
                   std::int64_t HD) {
    NAPKIN_CUDA_REQUIRE(B >= 0 && T >= 0, op << ": B " << B << ", T " << T);
    NAPKIN_CUDA_REQUIRE(NH >= 1 && KVH >= 1 && NH % KVH == 0,
                        op << ": KVH " << KVH << " must divide NH " << NH);
    NAPKIN_CUDA_REQUIRE(HD >= 1 && HD <= kMaxHD,
                        op << ": HD " << HD << " outside [1, " << kMaxHD << "]");
    Layout l;
    l.T = T;
    l.HD = HD;
    l.NH = NH;
    l.KVH = KVH;
    l.group = NH / KVH;
    l.qkv_row = (NH + 2ll * KVH) * HD;
    l.out_row = NH * HD;
    l.scale = 1.0f / sqrtf(static_cast<float>(HD));
    return l;
}

template <class D>
__device__ float dot_global(const float* a, const D* b, std::int64_t n) {
    float s = 0.0f;
    for (std::int64_t i = 0; i < n; ++i)
        s += a[i] * to_f32(b[i]);
    return s;
}

// dst (rows, ld) fp32 <- rows [t0, t0 + rows) of one head of the packed buffer (b, t, offset),
// zeros past T. The whole block calls it.
template <class D>
__device__ void load_tile(float* dst, int ld, const D* src, std::int64_t row_stride, std::int64_t b,
                          std::int64_t T, std::int64_t t0, int rows, std::int64_t offset,
                          std::int64_t HD) {
    for (std::int64_t idx = threadIdx.x; idx < rows * HD; idx += blockDim.x) {
        const std::int64_t r = idx / HD, d = idx % HD;
        const std::int64_t t = t0 + r;
        dst[r * ld + d] = t < T ? to_f32(src[(b * T + t) * row_stride + offset + d]) : 0.0f;
    }
}

// ----------------------------------------------------------------------------------------------
// naive

// Naive attention's dropout on the device (AttentionDropout with the host's threshold and scale,
// computed as the CPU computes them); mask == nullptr: none.
template <class D>
struct NaiveDropout {
    std::uint8_t* mask = nullptr;  // (B, NH, T, T)
    D* dropped = nullptr;          // (B, NH, T, T) Pd
    std::uint64_t seed = 0;
    std::uint32_t threshold = 0;
    float scale = 1.0f;  // 1 / (1 - p)
};

// Block r = (b, h, t). Shared: scores (T), overwritten by what multiplies V (P, or Pd with
// dropout), then q (HD). With dropout, element (b, h, t, j) of P is kept when dropout_keep(seed,
// its offset in P) says so: the CPU's mask and Pd bit for bit; out = Pd V.
template <class D>
__global__ void attention_naive_forward_kernel(D* out, D* p, const D* qkv, Layout l,
                                               NaiveDropout<D> drop) {
    extern __shared__ float smem[];
    __shared__ float red[kWarpSize];
    const std::int64_t r = blockIdx.x;
    const std::int64_t b = r / (l.NH * l.T);
    const int h = static_cast<int>(r / l.T % l.NH);
    const std::int64_t t = r % l.T;
    const int g = h / l.group;
    float* s = smem;        // (T)
    float* q = smem + l.T;  // (HD)
    for (std::int64_t d = threadIdx.x; d < l.HD; d += blockDim.x)
        q[d] = to_f32(qkv[l.q(b, t, h) + d]);
    __syncthreads();
    float mx = -INFINITY;
    for (std::int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        s[j] = dot_global(q, qkv + l.k(b, j, g), l.HD) * l.scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (std::int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    const float inv = 1.0f / block_sum(sum, red);  // the syncs inside publish s
    const std::int64_t row = l.row(b, h, t) * l.T;
    D* prow = p + row;  // (T)
    // s_j becomes what multiplies v_j: P_j, or Pd_j with dropout. Each thread its own j.
    for (std::int64_t j = threadIdx.x; j < l.T; j += blockDim.x) {
        float pj = j <= t ? s[j] * inv : 0.0f;
        prow[j] = from_f32<D>(pj);
        if (drop.mask != nullptr) {
            const std::int64_t at = row + j;
            const bool keep =
                j <= t && dropout_keep(drop.seed, static_cast<std::uint64_t>(at), drop.threshold);
            drop.mask[at] = keep ? 1 : 0;
            pj = keep ? pj * drop.scale : 0.0f;
            drop.dropped[at] = from_f32<D>(pj);
        }
        if (j <= t) s[j] = pj;
    }
    __syncthreads();
    for (std::int64_t d = threadIdx.x; d < l.HD; d += blockDim.x) {
        float acc = 0.0f;
        for (std::int64_t j = 0; j <= t; ++j)
            acc += s[j] * to_f32(qkv[l.v(b, j, g) + d]);
        out[l.o(b, t, h) + d] = from_f32<D>(acc);
    }
}

// Pass 1, block r = (b, h, t): dP_j = dout_t . v_j, D = sum_j P_j dP_j, dS_j = P_j (dP_j - D)
// scale into scratch row (b, h, t), dq_t += sum_j dS_j k_j. Shared: dS (T) then dout row (HD).
// With dropout (mask not null), dout_t . v_j is dPd_j and dP_j = mask_j ? dPd_j keep_scale : 0.
template <class D>
__global__ void attention_naive_backward_query_kernel(D* dqkv, float* scratch, const D* dout,
                                                      const D* qkv, const D* p, Layout l,
                                                      const std::uint8_t* mask, float keep_scale) {
    extern __shared__ float smem[];
    __shared__ float red[kWarpSize];
    const std::int64_t r = blockIdx.x;
    const std::int64_t b = r / (l.NH * l.T);
    const int h = static_cast<int>(r / l.T % l.NH);
    const std::int64_t t = r % l.T;
    const int g = h / l.group;
    float* ds = smem;        // (T)
    float* go = smem + l.T;  // (HD)
    for (std::int64_t d = threadIdx.x; d < l.HD; d += blockDim.x)
        go[d] = to_f32(dout[l.o(b, t, h) + d]);
    __syncthreads();
    const D* prow = p + l.row(b, h, t) * l.T;                                            // (T)
    const std::uint8_t* mrow = mask != nullptr ? mask + l.row(b, h, t) * l.T : nullptr;  // (T)
    float dsum = 0.0f;
    for (std::int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        ds[j] = dot_global(go, qkv + l.v(b, j, g), l.HD);
        if (mrow != nullptr) ds[j] = mrow[j] != 0 ? ds[j] * keep_scale : 0.0f;
        dsum += to_f32(prow[j]) * ds[j];
    }
    const float Dt = block_sum(dsum, red);
    float* srow = scratch + l.row(b, h, t) * l.T;  // (T)
    for (std::int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
        ds[j] = to_f32(prow[j]) * (ds[j] - Dt) * l.scale;
        srow[j] = ds[j];
    }
    __syncthreads();
    for (std::int64_t d = threadIdx.x; d < l.HD; d += blockDim.x) {
        float acc = 0.0f;
        for (std::int64_t j = 0; j <= t; ++j)
            acc += ds[j] * to_f32(qkv[l.k(b, j, g) + d]);
        const std::int64_t at = l.q(b, t, h) + d;
        dqkv[at] = from_f32<D>(to_f32(dqkv[at]) + acc);
    }
}

// Pass 2, block r = (b, g, j), a thread per dimension: dk_j += sum dS_tj q_t,
// dv_j += sum P_tj dout_t over the group's query heads and the queries t >= j. pv is what
// multiplied V in the forward: P, or Pd with dropout.
template <class D>
__global__ void attention_naive_backward_key_kernel(D* dqkv, const float* scratch, const D* dout,
                                                    const D* qkv, const D* pv, Layout l) {
    const std::int64_t r = blockIdx.x;
    const std::int64_t b = r / (l.KVH * l.T);
    const int g = static_cast<int>(r / l.T % l.KVH);
    const std::int64_t j = r % l.T;
    for (std::int64_t d = threadIdx.x; d < l.HD; d += blockDim.x) {
        float dk = 0.0f, dv = 0.0f;
        for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
            for (std::int64_t t = j; t < l.T; ++t) {
                const std::int64_t at = l.row(b, h, t) * l.T + j;
                dk += scratch[at] * to_f32(qkv[l.q(b, t, h) + d]);
                dv += to_f32(pv[at]) * to_f32(dout[l.o(b, t, h) + d]);
            }
        }
        const std::int64_t kd = l.k(b, j, g) + d, vd = l.v(b, j, g) + d;
        dqkv[kd] = from_f32<D>(to_f32(dqkv[kd]) + dk);
        dqkv[vd] = from_f32<D>(to_f32(dqkv[vd]) + dv);
    }
}

// ----------------------------------------------------------------------------------------------
// flash

__device__ __forceinline__ float dot_shared(const float* a, const float* b, std::int64_t n) {
    float s = 0.0f;
    for (std::int64_t d = 0; d < n; ++d)
        s += a[d] * b[d];
    return s;
}

// Grid (ceil(T / kFlashWarps), B * NH); warp w of block x holds query row x * kFlashWarps + w.
// Shared (floats): K and V tiles (kTile, HD + 1) each, then the warps' q rows (kFlashWarps, HD).
// With dropout, lane j's weight of v_j is e_j kept and scaled, or 0; sum takes e_j as it is.
template <class D>
__global__ void attention_flash_forward_kernel(D* out, float* lse, const D* qkv, Layout l,
                                               FlashDropout drop) {
    extern __shared__ float smem[];
    const int ld = static_cast<int>(l.HD) + 1;
    float* ks = smem;             // (kTile, ld)
    float* vs = ks + kTile * ld;  // (kTile, ld)
    float* qs = vs + kTile * ld;  // (kFlashWarps, HD)
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const std::int64_t b = blockIdx.y / l.NH;
    const int h = static_cast<int>(blockIdx.y % l.NH);
    const int g = h / l.group;
    const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(kFlashWarps);
    const std::int64_t i = i0 + warp;
    const bool active = i < l.T;                               // warp-uniform
    const std::int64_t last = min(i0 + kFlashWarps, l.T) - 1;  // the block's last query row
    float* q = qs + warp * l.HD;                               // (HD)
    if (active) {
        for (std::int64_t d = lane; d < l.HD; d += kWarpSize)
            q[d] = to_f32(qkv[l.q(b, i, h) + d]);
    }
    __syncwarp();
    float m = -INFINITY;           // running max of the scaled scores
    float sum = 0.0f;              // running sum of exp(s - m)
    float acc[kDimsPerLane] = {};  // dims lane + 32 k: sum of exp(s - m) v
    for (std::int64_t j0 = 0; j0 <= last; j0 += kTile) {
        __syncthreads();  // the previous tiles are no longer read
        load_tile(ks, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + g) * l.HD, l.HD);
        load_tile(vs, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + l.KVH + g) * l.HD, l.HD);
        __syncthreads();
        if (!active || j0 > i) continue;
        const int visible = static_cast<int>(min(static_cast<std::int64_t>(kTile), i + 1 - j0));
        float s = -INFINITY;
        if (lane < visible) s = dot_shared(q, ks + lane * ld, l.HD) * l.scale;
        const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= i is visible
        const float correction = expf(m - m_new);   // 0 on the first tile (m = -inf)
        const float e = lane < visible ? expf(s - m_new) : 0.0f;
        sum = sum * correction + warp_sum(e);  // the softmax's own sum: dropout comes after it
        float w = e;                           // what multiplies v_j
        if (drop.on && lane < visible) w = e * drop.factor(l.row(b, h, i) * l.T + j0 + lane);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k)
            acc[k] *= correction;
        for (int jj = 0; jj < visible; ++jj) {
            const float pj = __shfl_sync(0xffffffffu, w, jj);
            const float* vr = vs + jj * ld;  // (HD)
#pragma unroll
            for (int k = 0; k < kDimsPerLane; ++k) {
                const int d = lane + k * kWarpSize;
                if (d < l.HD) acc[k] += pj * vr[d];
            }
        }
        m = m_new;
    }
    if (!active) return;
    const float inv = 1.0f / sum;  // sum >= 1: the max term is exp(0)
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < l.HD) out[l.o(b, i, h) + d] = from_f32<D>(acc[k] * inv);
    }
    if (lane == 0) lse[l.row(b, h, i)] = m + logf(sum);
}

// Pass 1: dk, dv. Grid (ceil(T / kTile), B * KVH); block x owns keys [x * kTile, + kTile), warp w
// the kKeysPerWarp keys from x * kTile + w * kKeysPerWarp, their dk, dv in registers (dims
// lane + 32 k). Shared (floats): K, V, Q and dout tiles (kTile, HD + 1) each. With dropout,
// dP_ij = (dout_i . v_j) k_ij and dv_j takes P_ij k_ij, k_ij the keep factor drawn again.
template <class D>
__global__ void attention_flash_backward_key_kernel(D* dqkv, const D* dout, const D* out,
                                                    const D* qkv, const float* lse, Layout l,
                                                    FlashDropout drop) {
    extern __shared__ float smem[];
    __shared__ float lse_s[kTile];
    __shared__ float d_s[kTile];  // D_i = dout_i . out_i
    const int ld = static_cast<int>(l.HD) + 1;
    float* ks = smem;              // (kTile, ld)
    float* vs = ks + kTile * ld;   // (kTile, ld)
    float* qs = vs + kTile * ld;   // (kTile, ld)
    float* gos = qs + kTile * ld;  // (kTile, ld)
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const std::int64_t b = blockIdx.y / l.KVH;
    const int g = static_cast<int>(blockIdx.y % l.KVH);
    const std::int64_t j0 = blockIdx.x * static_cast<std::int64_t>(kTile);
    load_tile(ks, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + g) * l.HD, l.HD);
    load_tile(vs, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + l.KVH + g) * l.HD, l.HD);
    float dk[kKeysPerWarp][kDimsPerLane] = {};
    float dv[kKeysPerWarp][kDimsPerLane] = {};
    for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
        for (std::int64_t i0 = j0; i0 < l.T;
             i0 += kTile) {   // queries before j0 see none of the keys
            __syncthreads();  // the previous query tile is no longer read
            load_tile(qs, ld, qkv, l.qkv_row, b, l.T, i0, kTile, h * l.HD, l.HD);
            load_tile(gos, ld, dout, l.out_row, b, l.T, i0, kTile, h * l.HD, l.HD);
            if (threadIdx.x < kTile) {
                const std::int64_t i = i0 + threadIdx.x;
                lse_s[threadIdx.x] = i < l.T ? lse[l.row(b, h, i)] : 0.0f;
            }
            __syncthreads();
            for (int rr = warp; rr < kTile; rr += kFlashWarps) {
                const std::int64_t i = i0 + rr;
                float part = 0.0f;
                if (i < l.T) {
                    for (std::int64_t d = lane; d < l.HD; d += kWarpSize)
                        part += gos[rr * ld + d] * to_f32(out[l.o(b, i, h) + d]);
                }
                part = warp_sum(part);
                if (lane == 0) d_s[rr] = part;
            }
            __syncthreads();
            const std::int64_t qi = i0 + lane;  // lane i scores query i of the tile
            const float* qrow = qs + lane * ld;
            const float* grow = gos + lane * ld;
#pragma unroll
            for (int kk = 0; kk < kKeysPerWarp; ++kk) {
                const int jl = warp * kKeysPerWarp + kk;
                const std::int64_t j = j0 + jl;
                float p = 0.0f, ds = 0.0f;  // p: what multiplied v_j (P, or P k_ij)
                if (j < l.T && qi < l.T && qi >= j) {
                    p = expf(dot_shared(qrow, ks + jl * ld, l.HD) * l.scale - lse_s[lane]);
                    float dp = dot_shared(grow, vs + jl * ld, l.HD);
                    float kij = 1.0f;  // the keep factor
                    if (drop.on) {
                        kij = drop.factor(l.row(b, h, qi) * l.T + j);
                        dp *= kij;
                    }
                    ds = p * (dp - d_s[lane]) * l.scale;
                    if (drop.on) p *= kij;
                }
                for (int qq = 0; qq < kTile; ++qq) {
                    const float pq = __shfl_sync(0xffffffffu, p, qq);
                    const float dsq = __shfl_sync(0xffffffffu, ds, qq);
                    if (pq == 0.0f && dsq == 0.0f) continue;  // masked (uniform across the warp)
#pragma unroll
                    for (int k = 0; k < kDimsPerLane; ++k) {
                        const int d = lane + k * kWarpSize;
                        if (d < l.HD) {
                            dv[kk][k] += pq * gos[qq * ld + d];
                            dk[kk][k] += dsq * qs[qq * ld + d];
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
        const std::int64_t j = j0 + warp * kKeysPerWarp + kk;
        if (j >= l.T) continue;
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
            const int d = lane + k * kWarpSize;
            if (d >= l.HD) continue;
            const std::int64_t kd = l.k(b, j, g) + d, vd = l.v(b, j, g) + d;
            dqkv[kd] = from_f32<D>(to_f32(dqkv[kd]) + dk[kk][k]);
            dqkv[vd] = from_f32<D>(to_f32(dqkv[vd]) + dv[kk][k]);
        }
    }
}

// Pass 2: dq, the forward's layout. Shared (floats): K and V tiles (kTile, HD + 1), then the
// warps' q rows and dout rows (kFlashWarps, HD) each. With dropout, dP through the keep factor.
template <class D>
__global__ void attention_flash_backward_query_kernel(D* dqkv, const D* dout, const D* out,
                                                      const D* qkv, const float* lse, Layout l,
                                                      FlashDropout drop) {
    extern __shared__ float smem[];
    const int ld = static_cast<int>(l.HD) + 1;
    float* ks = smem;                      // (kTile, ld)
    float* vs = ks + kTile * ld;           // (kTile, ld)
    float* qs = vs + kTile * ld;           // (kFlashWarps, HD)
    float* gos = qs + kFlashWarps * l.HD;  // (kFlashWarps, HD)
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const std::int64_t b = blockIdx.y / l.NH;
    const int h = static_cast<int>(blockIdx.y % l.NH);
    const int g = h / l.group;
    const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(kFlashWarps);
    const std::int64_t i = i0 + warp;
    const bool active = i < l.T;
    const std::int64_t last = min(i0 + kFlashWarps, l.T) - 1;
    float* q = qs + warp * l.HD;    // (HD)
    float* go = gos + warp * l.HD;  // (HD)
    float Di = 0.0f, L = 0.0f;
    if (active) {
        float part = 0.0f;
        for (std::int64_t d = lane; d < l.HD; d += kWarpSize) {
            q[d] = to_f32(qkv[l.q(b, i, h) + d]);
            go[d] = to_f32(dout[l.o(b, i, h) + d]);
            part += go[d] * to_f32(out[l.o(b, i, h) + d]);
        }
        Di = warp_sum(part);
        L = lse[l.row(b, h, i)];
    }
    __syncwarp();
    float dq[kDimsPerLane] = {};
    for (std::int64_t j0 = 0; j0 <= last; j0 += kTile) {
        __syncthreads();
        load_tile(ks, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + g) * l.HD, l.HD);
        load_tile(vs, ld, qkv, l.qkv_row, b, l.T, j0, kTile, (l.NH + l.KVH + g) * l.HD, l.HD);
        __syncthreads();
        if (!active || j0 > i) continue;
        const int visible = static_cast<int>(min(static_cast<std::int64_t>(kTile), i + 1 - j0));
        float ds = 0.0f;
        if (lane < visible) {
            const float p = expf(dot_shared(q, ks + lane * ld, l.HD) * l.scale - L);
            float dp = dot_shared(go, vs + lane * ld, l.HD);
            if (drop.on) dp *= drop.factor(l.row(b, h, i) * l.T + j0 + lane);
            ds = p * (dp - Di) * l.scale;
        }
        for (int jj = 0; jj < visible; ++jj) {
            const float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const float* kr = ks + jj * ld;  // (HD)
#pragma unroll
            for (int k = 0; k < kDimsPerLane; ++k) {
                const int d = lane + k * kWarpSize;
                if (d < l.HD) dq[k] += dsj * kr[d];
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
        const int d = lane + k * kWarpSize;
        if (d < l.HD) {
            const std::int64_t at = l.q(b, i, h) + d;
            dqkv[at] = from_f32<D>(to_f32(dqkv[at]) + dq[k]);
        }
    }
}

std::size_t flash_tile_floats(std::int64_t HD) {
    return static_cast<std::size_t>(kTile) * (HD + 1);
}

void require_grid_y(const char* op, std::int64_t y) {
    NAPKIN_CUDA_REQUIRE(y <= 65535, op << ": " << y << " heads exceed gridDim.y (65535)");
}

}  // namespace

std::int64_t attention_naive_max_T() {
    return (max_smem_optin() - kMaxHD * 4 - kWarpSize * 4) / 4;  // q row and the reduction scratch
}

template <class Elem>
void attention_naive_forward(const AttentionNaiveForwardArgs<Elem>& args, const Launch& launch) {
    const auto& [out, p, qkv, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const Layout l = make_layout("attention_naive_forward", B, T, NH, KVH, HD);
    NaiveDropout<device_t<Elem>> drop;
    if (dropout != nullptr) {
        NAPKIN_CUDA_REQUIRE(dropout->p >= 0.0f && dropout->p < 1.0f,
                            "attention_naive_forward: dropout p " << dropout->p);
        NAPKIN_CUDA_REQUIRE(dropout->mask != nullptr && dropout->dropped != nullptr,
                            "attention_naive_forward: dropout without its mask or Pd");
        drop.mask = dropout->mask;
        drop.dropped = dev(dropout->dropped);
        drop.seed = dropout->seed;
        drop.threshold = dropout_threshold(dropout->p);
        drop.scale = 1.0f / (1.0f - dropout->p);
    }
    const std::int64_t rows = B * NH * T;
    if (rows == 0) return;
    NAPKIN_CUDA_REQUIRE(rows <= kMaxGridX, "attention_naive_forward: " << rows << " rows");
    const std::size_t smem = static_cast<std::size_t>(T + HD) * sizeof(float);
    auto kernel = attention_naive_forward_kernel<device_t<Elem>>;
    allow_smem(kernel, smem, "attention_naive_forward (T too long for the naive path)");
    kernel<<<static_cast<unsigned>(rows), kNaiveBlock, smem, stream>>>(dev(out), dev(p), dev(qkv),
                                                                       l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Elem>
void attention_naive_backward(const AttentionNaiveBackwardArgs<Elem>& args, const Launch& launch) {
    const auto& [dqkv, scratch, dout, qkv, p, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const Layout l = make_layout("attention_naive_backward", B, T, NH, KVH, HD);
    const std::uint8_t* mask = nullptr;
    float keep_scale = 1.0f;
    const Elem* pv = p;  // what multiplied V: P, or Pd with dropout
    if (dropout != nullptr) {
        NAPKIN_CUDA_REQUIRE(dropout->p >= 0.0f && dropout->p < 1.0f,
                            "attention_naive_backward: dropout p " << dropout->p);
        NAPKIN_CUDA_REQUIRE(dropout->mask != nullptr && dropout->dropped != nullptr,
                            "attention_naive_backward: dropout without its mask or Pd");
        mask = dropout->mask;
        keep_scale = 1.0f / (1.0f - dropout->p);
        pv = dropout->dropped;
    }
    const std::int64_t rows = B * NH * T;
    if (rows == 0) return;
    NAPKIN_CUDA_REQUIRE(rows <= kMaxGridX, "attention_naive_backward: " << rows << " rows");
    const std::size_t smem = static_cast<std::size_t>(T + HD) * sizeof(float);
    auto query_kernel = attention_naive_backward_query_kernel<device_t<Elem>>;
    allow_smem(query_kernel, smem, "attention_naive_backward (T too long for the naive path)");
    query_kernel<<<static_cast<unsigned>(rows), kNaiveBlock, smem, stream>>>(
        dev(dqkv), scratch, dev(dout), dev(qkv), dev(p), l, mask, keep_scale);
    NAPKIN_CUDA_CHECK_LAUNCH();
    const std::int64_t keys = B * KVH * T;
    attention_naive_backward_key_kernel<<<static_cast<unsigned>(keys), block_for_row(HD, 256), 0,
                                          stream>>>(dev(dqkv), scratch, dev(dout), dev(qkv),
                                                    dev(pv), l);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Elem>
void attention_flash_simt_forward(const AttentionFlashForwardArgs<Elem>& args,
                                  const Launch& launch) {
    const auto& [out, lse, qkv, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const Layout l = make_layout("attention_flash_forward", B, T, NH, KVH, HD);
    const FlashDropout drop = flash_dropout("attention_flash_forward", dropout);
    if (B * T == 0) return;
    require_grid_y("attention_flash_forward", B * NH);
    const std::size_t smem = (2 * flash_tile_floats(HD) + kFlashWarps * HD) * sizeof(float);
    auto kernel = attention_flash_forward_kernel<device_t<Elem>>;
    allow_smem(kernel, smem, "attention_flash_forward");
    const dim3 grid(static_cast<unsigned>((T + kFlashWarps - 1) / kFlashWarps),
                    static_cast<unsigned>(B * NH));
    kernel<<<grid, kFlashWarps * kWarpSize, smem, stream>>>(dev(out), lse, dev(qkv), l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Elem>
void attention_flash_simt_backward(const AttentionFlashBackwardArgs<Elem>& args,
                                   const Launch& launch) {
    const auto& [dqkv, dout, out, qkv, lse, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const Layout l = make_layout("attention_flash_backward", B, T, NH, KVH, HD);
    const FlashDropout drop = flash_dropout("attention_flash_backward", dropout);
    if (B * T == 0) return;
    require_grid_y("attention_flash_backward", B * NH);
    const std::size_t key_smem = 4 * flash_tile_floats(HD) * sizeof(float);
    auto key_kernel = attention_flash_backward_key_kernel<device_t<Elem>>;
    allow_smem(key_kernel, key_smem, "attention_flash_backward");
    const dim3 key_grid(static_cast<unsigned>((T + kTile - 1) / kTile),
                        static_cast<unsigned>(B * KVH));
    key_kernel<<<key_grid, kFlashWarps * kWarpSize, key_smem, stream>>>(
        dev(dqkv), dev(dout), dev(out), dev(qkv), lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
    const std::size_t query_smem =
        (2 * flash_tile_floats(HD) + 2 * kFlashWarps * HD) * sizeof(float);
    auto query_kernel = attention_flash_backward_query_kernel<device_t<Elem>>;
    allow_smem(query_kernel, query_smem, "attention_flash_backward");
    const dim3 query_grid(static_cast<unsigned>((T + kFlashWarps - 1) / kFlashWarps),
                          static_cast<unsigned>(B * NH));
    query_kernel<<<query_grid, kFlashWarps * kWarpSize, query_smem, stream>>>(
        dev(dqkv), dev(dout), dev(out), dev(qkv), lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

// The tensor-core kernels (attention_mma.cu) where they apply, the SIMT ones above otherwise.
template <class Elem>
void attention_flash_forward(const AttentionFlashForwardArgs<Elem>& args, const Launch& launch) {
    if constexpr (!std::is_same_v<Elem, float>) {
        if (attention_flash_mma_supported<Elem>(args.dims.HD, {args.out, args.qkv}))
            return attention_flash_mma_forward(args, launch);
    }
    attention_flash_simt_forward(args, launch);
}

template <class Elem>
void attention_flash_backward(const AttentionFlashBackwardArgs<Elem>& args, const Launch& launch) {
    if constexpr (!std::is_same_v<Elem, float>) {
        if (attention_flash_mma_supported<Elem>(args.dims.HD,
                                                {args.dqkv, args.dout, args.out, args.qkv}))
            return attention_flash_mma_backward(args, launch);
    }
    attention_flash_simt_backward(args, launch);
}

#define NAPKIN_CUDA_ATTENTION_INSTANTIATE(E)                                                      \
    template void attention_naive_forward<E>(const AttentionNaiveForwardArgs<E>&, const Launch&); \
    template void attention_naive_backward<E>(const AttentionNaiveBackwardArgs<E>&,               \
                                              const Launch&);                                     \
    template void attention_flash_forward<E>(const AttentionFlashForwardArgs<E>&, const Launch&); \
    template void attention_flash_backward<E>(const AttentionFlashBackwardArgs<E>&, const Launch&);
NAPKIN_CUDA_ATTENTION_INSTANTIATE(float)
NAPKIN_CUDA_ATTENTION_INSTANTIATE(bf16_t)
NAPKIN_CUDA_ATTENTION_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_ATTENTION_INSTANTIATE

#define NAPKIN_CUDA_ATTENTION_SIMT_INSTANTIATE(E)                                        \
    template void attention_flash_simt_forward<E>(const AttentionFlashForwardArgs<E>&,   \
                                                  const Launch&);                        \
    template void attention_flash_simt_backward<E>(const AttentionFlashBackwardArgs<E>&, \
                                                   const Launch&);
NAPKIN_CUDA_ATTENTION_SIMT_INSTANTIATE(float)
NAPKIN_CUDA_ATTENTION_SIMT_INSTANTIATE(bf16_t)
NAPKIN_CUDA_ATTENTION_SIMT_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_ATTENTION_SIMT_INSTANTIATE

}  // namespace napkin::cuda
