// The backward of the mma.sync flash attention (docs/CUDA.md "Flash attention on mma.sync"),
// behind cuda::attention_flash_mma_backward for HD 64 and 128 on sm_80 and later
// (attention_mma.cuh): dq, dk, dv added into the packed dqkv from dout, out, qkv and the
// forward's lse, with P = exp2(S log2(e) / sqrt(HD) - lse log2(e)) recomputed, D_i = dout_i .
// out_i, dS = P (dP - D) / sqrt(HD); causal, GQA/MQA, optional dropout on P (the CPU's keep bits,
// drawn again). No atomics: two kernels, each output element with one writer that sums its
// whole gradient in fp32 in a fixed order and adds it once, so a run repeats bit for bit.
//
// Pass 1, dk and dv: a block of 4 warps owns 64 keys of one (b, kv head), 16 per warp (their K
// and V rows stay in shared memory, or registers), and walks every (query head of the group,
// query tile at or after the diagonal) item, the Q, dout and out tiles of kKeyQ queries streaming
// through kKeyStages cp.async stages. Per item the block first computes the item's D (from the
// dout and out tiles) and reads its lse; then each warp, on its 16 keys:
//   S^T = K Q^T, P^T = exp2(S^T log2(e) / sqrt(HD) - lse)   (masked: key j > query i)
//   dV += P^T dO        P^T packed from the accumulators (dropped elements zeroed; 1 / (1 - p)
//                       applied once at the store), dO read by ldmatrix.trans
//   dP^T = V dO^T, dS^T = P^T (dP^T k - D) / sqrt(HD)      (k = 0 or 1 / (1 - p) with dropout)
//   dK += dS^T Q        dS^T packed from the accumulators, Q read by ldmatrix.trans
// Pass 2, dq: a block owns 64 kQueryM queries of one (b, h), the warps 16 kQueryM each, Q and dout
// loaded once, D and lse per row into registers; K and V tiles stream through kQueryStages
// stages up to the diagonal. Per key tile each warp computes S = Q K^T, P, dP = dO V^T,
// dS = P (dP k - D) / sqrt(HD) and dQ += dS K (K read by ldmatrix.trans). The first key tiles
// (most queries) and the last query tiles (most keys) launch first.
#include <cstdint>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::mma_detail {

namespace {

using fa2::kThreads;
using fa2::kWarps;
using fa2::Shared;

// Per head dimension. Pass 1: m-tiles of keys per warp, queries per item tile, stages, K and V
// fragments in registers. Pass 2: m-tiles of queries per warp, keys per tile, stages, Q and dout
// fragments in registers. Shared-memory reads per m16n8k16 product (forward's note): 192 and 213
// bytes at HD 64, 320 and 299 at HD 128 (one m-tile: dK and dV, or dQ, take 64 fp32 registers a
// lane each there). ptxas (nvcc 13, sm_80 and sm_90, 2 blocks per SM: 255 registers) spills at
// most 8 bytes.
template <int kHD>
struct BackwardConfig {
    static_assert(kHD == 64 || kHD == 128);
    static constexpr int kKeyM = kHD == 64 ? 2 : 1, kKeyQ = 32, kKeyStages = 2;
    static constexpr bool kKeyRegisters = false;
    static constexpr int kQueryM = kHD == 64 ? 2 : 1, kQueryN = kHD == 64 ? 32 : 64;
    static constexpr int kQueryStages = 2;
    static constexpr bool kQueryRegisters = false;
};

// Keys a pass-1 block owns.
template <int kHD>
constexpr int kKeys = 16 * kWarps* BackwardConfig<kHD>::kKeyM;

// Pass 1: K and V (kKeys, HD), then per stage Q, dout and out (kKeyQ, HD), 16-bit; then lse and
// D (kKeyQ floats each).
template <int kHD>
constexpr std::size_t key_smem_bytes() {
    using C = BackwardConfig<kHD>;
    return static_cast<std::size_t>(2 * kKeys<kHD> + 3 * C::kKeyStages * C::kKeyQ) * kHD * 2 +
           2 * C::kKeyQ * sizeof(float);
}

// Pass 2: Q and dout (64 kQueryM, HD), then per stage K and V (kQueryN, HD), 16-bit.
template <int kHD>
constexpr std::size_t query_smem_bytes() {
    using C = BackwardConfig<kHD>;
    return static_cast<std::size_t>(2 * 16 * kWarps * C::kQueryM +
                                    2 * C::kQueryStages * C::kQueryN) *
           kHD * 2;
}

// D_i = dout_i . out_i and lse_i log2(e) (+inf past T) of the kQ queries [i0, i0 + kQ) of head h
// into d_s and lse_s, from the dout and out tiles in shared memory: 128 / kQ threads per row. The
// whole block calls it.
template <class D, int kHD, int kQ>
__device__ void item_stats(float* d_s, float* lse_s, const Shared& sh, fa2::Tile<D, kHD> go,
                           fa2::Tile<D, kHD> o, const float* lse, const MmaLayout& l,
                           std::int64_t b, int h, std::int64_t i0) {
    constexpr int kPerRow = kThreads / kQ, kChunks = kHD / 8 / kPerRow;
    const int r = static_cast<int>(threadIdx.x) / kPerRow, part = threadIdx.x % kPerRow;
    float dot = 0.0f;
#pragma unroll
    for (int c = part * kChunks; c < (part + 1) * kChunks; ++c)
        dot += fa2::dot8(sh.ptr<const D>(go.chunk(r, c)), sh.ptr<const D>(o.chunk(r, c)));
#pragma unroll
    for (int x = 1; x < kPerRow; x *= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, x);
    if (part == 0) {
        const std::int64_t i = i0 + r;
        d_s[r] = dot;
        lse_s[r] = i < l.T ? lse[l.row(b, h, i)] * kLog2e : INFINITY;
    }
}

// Pass 1. Grid: (key tiles * B * KVH) blocks, the first key tiles first. Shared:
// key_smem_bytes<kHD>.
template <class D, int kHD>
__global__ void __launch_bounds__(kThreads, 2)
    attention_fa2_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                      const float* lse, MmaLayout l, FlashDropout drop) {
    using C = BackwardConfig<kHD>;
    using Tile = fa2::Tile<D, kHD>;
    constexpr int kM = C::kKeyM, kRows = kKeys<kHD>, kQ = C::kKeyQ, kNq = kQ / 8, kD = kHD / 8;
    constexpr int kStages = C::kKeyStages;
    static_assert(kM * kNq * 4 <= 32, "the lane's dropped bits fit one register");
    constexpr std::uint32_t kTileBytes = kQ * Tile::kRowBytes;
    extern __shared__ __align__(128) unsigned char smem[];
    const Shared sh{smem, shared_address(smem)};
    const Tile ks = sh.tile<D, kHD>(0), vs = sh.tile<D, kHD>(kRows * Tile::kRowBytes);
    const std::uint32_t stages = 2 * kRows * Tile::kRowBytes;  // Q, dout, out per stage
    auto q_tile = [=](int s) { return sh.tile<D, kHD>(stages + (3 * s) * kTileBytes); };
    auto go_tile = [=](int s) { return sh.tile<D, kHD>(stages + (3 * s + 1) * kTileBytes); };
    auto o_tile = [=](int s) { return sh.tile<D, kHD>(stages + (3 * s + 2) * kTileBytes); };
    float* const lse_s = sh.ptr<float>(sh.at + stages + 3 * kStages * kTileBytes);
    float* const d_s = lse_s + kQ;

    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const std::int64_t heads = l.B * l.KVH, hd = l.HD;
    const std::int64_t kt = blockIdx.x / heads;
    const std::int64_t b = blockIdx.x % heads / l.KVH;
    const int kvh = static_cast<int>(blockIdx.x % heads % l.KVH);
    const std::int64_t j0 = kt * kRows;
    fa2::load_rows<kRows>(ks, qkv + (l.NH + kvh) * hd, l.qkv_row, b, l.T, j0);
    fa2::load_rows<kRows>(vs, qkv + (l.NH + l.KVH + kvh) * hd, l.qkv_row, b, l.T, j0);
    cp_async_commit();
    // Items: (query head of the group, query tile from the one holding key j0 on).
    const int qt0 = static_cast<int>(j0 / kQ);
    const int per_head = static_cast<int>((l.T + kQ - 1) / kQ) - qt0;
    auto items = fa2::make_pipeline<kStages>(
        [=](int item, int stage) {
            const std::int64_t h = kvh * l.group + item / per_head;
            const std::int64_t i0 = static_cast<std::int64_t>(qt0 + item % per_head) * kQ;
            fa2::load_rows<kQ>(q_tile(stage), qkv + h * hd, l.qkv_row, b, l.T, i0);
            fa2::load_rows<kQ>(go_tile(stage), dout + h * hd, l.out_row, b, l.T, i0);
            fa2::load_rows<kQ>(o_tile(stage), out + h * hd, l.out_row, b, l.T, i0);
        },
        l.group * per_head);
    items.prologue();
    cp_async_wait<kStages - 1>();  // K and V: the oldest group
    __syncthreads();

    const int w_row0 = warp * 16 * kM;
    const std::int64_t kw0 = j0 + w_row0, kw_last = kw0 + 16 * kM - 1;  // the warp's keys
    const auto ka = fa2::a_source<C::kKeyRegisters, kM>(ks, w_row0);
    const auto va = fa2::a_source<C::kKeyRegisters, kM>(vs, w_row0);
    float dk[kM][kD][4], dv[kM][kD][4];
    fa2::zero(dk);
    fa2::zero(dv);

    for (int it = 0; it < l.group * per_head; ++it) {
        const int stage = items.next(it);
        const int h = kvh * l.group + it / per_head;
        const std::int64_t i0 = static_cast<std::int64_t>(qt0 + it % per_head) * kQ;
        item_stats<D, kHD, kQ>(d_s, lse_s, sh, go_tile(stage), o_tile(stage), lse, l, b, h, i0);
        __syncthreads();
        if (kw0 >= l.T || i0 + kQ - 1 < kw0) continue;  // keys past the end, or after every query
        const bool masked = kw_last > i0;
        // Key minus query of the lane's first element (key kw0 + g, query i0 + 2 t).
        const int diagonal = static_cast<int>(kw0 - i0) + g - 2 * t;
        float st[kM][kNq][4];
        fa2::zero(st);
        fa2::warp_abt<D>(st, ka, q_tile(stage), 0);
        float pd[kM][kNq][4];       // P^T as dV takes it: dropped elements zeroed
        std::uint32_t dropped = 0;  // bit 4 (kNq m + n) + e of the lane's elements
        fa2::for_each_element<kM, kNq>([&](int m, int n, int e) {
            const int col = 8 * n + 2 * t + (e & 1);  // query i0 + col
            const int bit = 4 * (kNq * m + n) + e;
            const bool seen = !masked || diagonal + 16 * m + 8 * (e >> 1) - 8 * n - (e & 1) <= 0;
            const float p = seen ? exp2f(fmaf(st[m][n][e], l.scale_log2, -lse_s[col])) : 0.0f;
            st[m][n][e] = p;
            const std::int64_t key = kw0 + 16 * m + g + 8 * (e >> 1);
            if (drop.on && p != 0.0f && !drop.keep(l.row(b, h, i0 + col) * l.T + key))
                dropped |= 1u << bit;
            pd[m][n][e] = (dropped >> bit & 1u) != 0 ? 0.0f : p;
        });
        std::uint32_t pa[kM][kNq / 2][4];
        fa2::pack_a<D>(pa, pd);
        fa2::warp_ab<D>(dv, pa, go_tile(stage), 0);
        float dpt[kM][kNq][4];
        fa2::zero(dpt);
        fa2::warp_abt<D>(dpt, va, go_tile(stage), 0);
        fa2::for_each_element<kM, kNq>([&](int m, int n, int e) {
            float dp = dpt[m][n][e];
            if (drop.on)
                dp = (dropped >> (4 * (kNq * m + n) + e) & 1u) != 0 ? 0.0f : dp * drop.scale;
            st[m][n][e] *= (dp - d_s[8 * n + 2 * t + (e & 1)]) * l.scale;
        });
        fa2::pack_a<D>(pa, st);
        fa2::warp_ab<D>(dk, pa, q_tile(stage), 0);
    }

    const float dv_scale = drop.on ? drop.scale : 1.0f;  // dV summed the kept P unscaled
    fa2::for_each_row<kM>([&](int m, int hh) {
        const std::int64_t j = kw0 + 16 * m + g + 8 * hh;
        if (j >= l.T) return;
        fa2::store_row(dqkv + l.k(b, j, kvh), dk, m, hh, 1.0f, true);
        fa2::store_row(dqkv + l.v(b, j, kvh), dv, m, hh, dv_scale, true);
    });
}

// Pass 2. Grid: (query tiles * B * NH) blocks, the last query tiles first. Shared:
// query_smem_bytes<kHD>.
template <class D, int kHD>
__global__ void __launch_bounds__(kThreads, 2)
    attention_fa2_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                        const float* lse, MmaLayout l, FlashDropout drop) {
    using C = BackwardConfig<kHD>;
    using Tile = fa2::Tile<D, kHD>;
    constexpr int kM = C::kQueryM, kRows = 16 * kWarps * kM, kBlockN = C::kQueryN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8, kStages = C::kQueryStages;
    constexpr std::uint32_t kTileBytes = kBlockN * Tile::kRowBytes;
    extern __shared__ __align__(128) unsigned char smem[];
    const Shared sh{smem, shared_address(smem)};
    const Tile qs = sh.tile<D, kHD>(0), gos = sh.tile<D, kHD>(kRows * Tile::kRowBytes);
    const std::uint32_t stages = 2 * kRows * Tile::kRowBytes;  // K, V per stage
    auto k_tile = [=](int s) { return sh.tile<D, kHD>(stages + (2 * s) * kTileBytes); };
    auto v_tile = [=](int s) { return sh.tile<D, kHD>(stages + (2 * s + 1) * kTileBytes); };

    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const std::int64_t hd = l.HD;
    const fa2::QueryBlock block = fa2::query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;  // (not structured bindings: lambdas take them)
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = fa2::causal_key_tiles<kBlockN>(l, i0, kRows);
    fa2::load_rows<kRows>(qs, qkv + h * hd, l.qkv_row, b, l.T, i0);
    fa2::load_rows<kRows>(gos, dout + h * hd, l.out_row, b, l.T, i0);
    cp_async_commit();
    auto kv = fa2::kv_pipeline<kStages, kBlockN>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q and dout: the oldest group
    __syncthreads();

    const int w_row0 = warp * 16 * kM;
    const std::int64_t w_first = i0 + w_row0, w_last = w_first + 16 * kM - 1;
    // D and lse log2(e) of the lane's rows g, g + 8 of each m-tile: two lanes per row, each half
    // of dout (shared memory) . out (global), then gathered by shuffles.
    float d_row[kM][2], lse_row[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        const int r = w_row0 + 16 * m + lane / 2, half = lane % 2;
        const std::int64_t i = i0 + r;
        float dot = 0.0f;
        if (i < l.T) {
#pragma unroll
            for (int c = half * kD / 2; c < (half + 1) * kD / 2; ++c)
                dot += fa2::dot8(sh.ptr<const D>(gos.chunk(r, c)), out + l.o(b, i, h) + 8 * c);
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            d_row[m][hh] = __shfl_sync(0xffffffffu, dot, 2 * (g + 8 * hh));
            const std::int64_t row = w_first + 16 * m + g + 8 * hh;
            lse_row[m][hh] = row < l.T ? lse[l.row(b, h, row)] * kLog2e : INFINITY;
        }
    }
    const auto qa = fa2::a_source<C::kQueryRegisters, kM>(qs, w_row0);
    const auto ga = fa2::a_source<C::kQueryRegisters, kM>(gos, w_row0);
    float dq[kM][kD][4];
    fa2::zero(dq);

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (w_first >= l.T || j0 > w_last) continue;  // nothing the warp's rows see
        const bool masked = j0 + kBlockN - 1 > w_first;
        const int diagonal = static_cast<int>(j0 - w_first) + 2 * t - g;  // key - query, e = 0
        float s[kM][kN][4], dp[kM][kN][4];
        fa2::zero(s);
        fa2::zero(dp);
        fa2::warp_abt<D>(s, qa, k_tile(stage), 0);
        fa2::warp_abt<D>(dp, ga, v_tile(stage), 0);
        fa2::for_each_element<kM, kN>([&](int m, int n, int e) {
            const int hh = e >> 1;
            const bool seen = !masked || diagonal + 8 * n + (e & 1) - 16 * m - 8 * hh <= 0;
            const float p = seen ? exp2f(fmaf(s[m][n][e], l.scale_log2, -lse_row[m][hh])) : 0.0f;
            float k = 1.0f;
            if (drop.on && p != 0.0f) {
                const std::int64_t i = w_first + 16 * m + g + 8 * hh;
                const std::int64_t j = j0 + 8 * n + 2 * t + (e & 1);
                k = drop.keep(l.row(b, h, i) * l.T + j) ? drop.scale : 0.0f;
            }
            s[m][n][e] = p * (dp[m][n][e] * k - d_row[m][hh]) * l.scale;
        });
        std::uint32_t dsa[kM][kN / 2][4];
        fa2::pack_a<D>(dsa, s);
        fa2::warp_ab<D>(dq, dsa, k_tile(stage), 0);
    }

    fa2::for_each_row<kM>([&](int m, int hh) {
        const std::int64_t i = w_first + 16 * m + g + 8 * hh;
        if (i < l.T) fa2::store_row(dqkv + l.q(b, i, h), dq, m, hh, 1.0f, true);
    });
}

template <class D, int kHD>
void launch_backward(D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
                     const MmaLayout& l, const FlashDropout& drop, cudaStream_t stream) {
    const char* op = "attention_flash_mma_backward";
    using C = BackwardConfig<kHD>;
    constexpr int kRows = 16 * kWarps * C::kQueryM;
    auto key_kernel = attention_fa2_backward_key_kernel<D, kHD>;
    constexpr std::size_t key_smem = key_smem_bytes<kHD>();
    allow_smem(key_kernel, key_smem, op);
    const unsigned key_grid = mma_grid(op, (l.T + kKeys<kHD> - 1) / kKeys<kHD>, l.B * l.KVH);
    key_kernel<<<key_grid, kThreads, key_smem, stream>>>(dqkv, dout, out, qkv, lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
    auto query_kernel = attention_fa2_backward_query_kernel<D, kHD>;
    constexpr std::size_t query_smem = query_smem_bytes<kHD>();
    allow_smem(query_kernel, query_smem, op);
    const unsigned query_grid = mma_grid(op, (l.T + kRows - 1) / kRows, l.B * l.NH);
    query_kernel<<<query_grid, kThreads, query_smem, stream>>>(dqkv, dout, out, qkv, lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class D>
void fa2_backward(D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
                  const MmaLayout& l, const FlashDropout& drop, cudaStream_t stream) {
    if (l.HD == 64) return launch_backward<D, 64>(dqkv, dout, out, qkv, lse, l, drop, stream);
    launch_backward<D, 128>(dqkv, dout, out, qkv, lse, l, drop, stream);
}

template void fa2_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                          const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                                          const MmaLayout&, const FlashDropout&, cudaStream_t);
template void fa2_backward<__half>(__half*, const __half*, const __half*, const __half*,
                                   const float*, const MmaLayout&, const FlashDropout&,
                                   cudaStream_t);

}  // namespace napkin::cuda::mma_detail
