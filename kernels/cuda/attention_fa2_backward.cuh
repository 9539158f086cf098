// The backward of the mma.sync flash attention, as a template of its tiles (docs/CUDA.md "Flash
// attention on mma.sync"): the two passes' tile configurations (KeyTiles, QueryTiles), their
// shared-memory bytes, and the bodies of their blocks, which attention_fa2_backward.cu launches
// with the engine's tiles and bench/attention_fa2_candidates.cu with the candidates the sweep
// measures. Not a public header.
//
// dq, dk, dv are added into the packed dqkv from dout, out, qkv and the forward's lse, with
// P = exp2(S log2(e) / sqrt(HD) - lse log2(e)) recomputed, D_i = dout_i . out_i,
// dS = P (dP - D) / sqrt(HD); causal, GQA/MQA, optional dropout on P (the CPU's keep bits, drawn
// again). No atomics: two kernels, each output element with one writer that sums its whole
// gradient in fp32 in a fixed order and adds it once, so a run repeats bit for bit.
//
// Pass 1, dk and dv: a block of kWarps warps owns 16 kM keys per warp of one (b, kv head) (their
// K and V rows stay in shared memory, or registers), and walks every (query head of the group,
// query tile at or after the diagonal) item, the Q, dout and out tiles of kQ queries streaming
// through kStages cp.async stages. Per item the block first computes the item's D (from the dout
// and out tiles) and reads its lse (or, with RowStats, both come precomputed with Q and dout,
// and out is not streamed); then each warp, on its 16 kM keys:
//   S^T = K Q^T, P^T = exp2(S^T log2(e) / sqrt(HD) - lse)   (masked: key j > query i)
//   dV += P^T dO        P^T packed from the accumulators (dropped elements zeroed; 1 / (1 - p)
//                       applied once at the store), dO read by ldmatrix.trans
//   dP^T = V dO^T, dS^T = P^T (dP^T k - D) / sqrt(HD)      (k = 0 or 1 / (1 - p) with dropout)
//   dK += dS^T Q        dS^T packed from the accumulators, Q read by ldmatrix.trans
// Pass 2, dq: a block owns 16 kM queries per warp of one (b, h), Q and dout loaded once, D and
// lse per row into registers; K and V tiles of kBlockN keys stream through kStages stages up to
// the diagonal. Per key tile each warp computes S = Q K^T, P, dP = dO V^T,
// dS = P (dP k - D) / sqrt(HD) and dQ += dS K (K read by ldmatrix.trans). The first key tiles
// (most queries) and the last query tiles (most keys) launch first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::fa2 {

using mma_detail::MmaLayout;

// The backward's row statistics precomputed before pass 1 by a kernel of their own
// (row_stats_block; FlashAttention-2's and -3's preprocessing), in a float buffer of floats(B,
// NH, T): per (b, h), padded(T) rows of lse log2(e) (+inf past T), then as many of
// D = dout . out (0 past T). A pass-1 item then streams Q and dout and 2 kQ floats, not Q, dout
// and out, and its block computes no dot products.
struct RowStatsLayout {
    static constexpr int kPad = 64;  // rows; items of up to kPad queries read whole
    __host__ __device__ static constexpr std::int64_t padded(std::int64_t T) {
        return (T + kPad - 1) / kPad * kPad;
    }
    __host__ __device__ static constexpr std::int64_t floats(std::int64_t B, std::int64_t NH,
                                                             std::int64_t T) {
        return B * NH * 2 * padded(T);
    }
    // lse log2(e) of row i of head (b, h); its D is padded(T) floats on.
    __device__ static std::int64_t at(const MmaLayout& l, std::int64_t b, int h, std::int64_t i) {
        return (b * l.NH + h) * 2 * padded(l.T) + i;
    }
};

// The row statistics of kThreads / (HD / 8) rows (b, h, i) a block, HD / 8 lanes a row (a
// 16-byte chunk of dout and of out each), the rows of every (b, h) padded(T) apart: a grid of
// floats(B, NH, T) / 2 / rows-a-block blocks.
template <class D, int kHD, int kThreads>
__device__ void row_stats_block(float* stats, const D* dout, const D* out, const float* lse,
                                const MmaLayout& l) {
    constexpr int kLanes = kHD / 8, kRows = kThreads / kLanes;
    static_assert(kThreads % kWarpSize == 0 && kWarpSize % kLanes == 0);
    const std::int64_t Tp = RowStatsLayout::padded(l.T);
    const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRows + threadIdx.x / kLanes;
    const int c = static_cast<int>(threadIdx.x) % kLanes;
    const std::int64_t bh = r / Tp, i = r % Tp;
    const bool head = bh < l.B * l.NH, valid = head && i < l.T;
    const std::int64_t b = bh / l.NH;
    const int h = static_cast<int>(bh % l.NH);
    float dot = valid ? dot8(dout + l.o(b, i, h) + 8 * c, out + l.o(b, i, h) + 8 * c) : 0.0f;
#pragma unroll
    for (int x = 1; x < kLanes; x *= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, x);
    if (c != 0 || !head) return;
    float* const row = stats + bh * 2 * Tp + i;
    row[0] = valid ? lse[l.row(b, h, i)] * mma_detail::kLog2e : INFINITY;
    row[Tp] = valid ? dot : 0.0f;
}

// Item [i0, i0 + kQ)'s row statistics of head (b, h) into `dst` (kQ floats of lse log2(e), then
// kQ of D) by cp.async: the first kQ / 2 threads (`thread`: the rank), a 16-byte chunk each. The
// caller commits.
template <int kQ>
__device__ __forceinline__ void load_row_stats(std::uint32_t dst, const float* stats,
                                               const MmaLayout& l, std::int64_t b, int h,
                                               std::int64_t i0, int thread) {
    constexpr int kChunks = kQ / 4;  // of each of the two
    if (thread >= 2 * kChunks) return;
    const int part = thread / kChunks, c = thread % kChunks;
    cp_async_16(
        dst + 16 * thread,
        stats + RowStatsLayout::at(l, b, h, i0) + part * RowStatsLayout::padded(l.T) + 4 * c, true);
}

// A pass-1 item's loads: the Q and dout rows [i0, i0 + kQ) of head h into q and go, then with
// kRowStats its row statistics (load_row_stats) at stats_at, else its out rows into o; by
// kThreads threads (`thread` this one's rank), kUnroll copies a tile unrolled (load_rows). The
// caller commits. TileT: a Tile, or attention_wgmma_backward.cuh's SwTile.
template <int kQ, int kThreads, bool kRowStats, int kUnroll, class TileT, class D>
__device__ __forceinline__ void load_key_item(TileT q, TileT go, TileT o, std::uint32_t stats_at,
                                              const D* qkv, const D* dout, const D* out,
                                              const float* stats, const MmaLayout& l,
                                              std::int64_t b, int h, std::int64_t i0, int thread) {
    const std::int64_t hd = l.HD;
    load_rows<kQ, kThreads, TileT, D, kUnroll>(q, qkv + h * hd, l.qkv_row, b, l.T, i0, thread);
    load_rows<kQ, kThreads, TileT, D, kUnroll>(go, dout + h * hd, l.out_row, b, l.T, i0, thread);
    if constexpr (kRowStats)
        load_row_stats<kQ>(stats_at, stats, l, b, h, i0, thread);
    else
        load_rows<kQ, kThreads, TileT, D, kUnroll>(o, out + h * hd, l.out_row, b, l.T, i0, thread);
}

// Pass 1's tiles at head dimension HD: m-tiles of keys per warp, queries per item, stages, K and
// V fragments in registers, warps per block, blocks per SM for __launch_bounds__, and whether
// the items' D and lse come precomputed (RowStats: a kernel of their own before the pass; out
// is then not streamed).
template <int HD, int M, int Q, int Stages, bool InRegisters, int Warps = 4, int MinBlocks = 2,
          bool RowStats = false>
struct KeyTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Q % 16 == 0 && Stages >= 2 && (Warps == 4 || Warps == 8));
    static_assert(M * (Q / 8) * 4 <= 32, "the lane's dropped bits fit one register");
    static constexpr int kHD = HD, kM = M, kQ = Q, kStages = Stages;
    static constexpr bool kInRegisters = InRegisters, kRowStats = RowStats;
    static constexpr bool kWgmma = false;  // mma.sync (WgmmaKeyTiles: wgmma)
    static constexpr int kWarps = Warps, kThreads = Warps * kWarpSize, kMinBlocks = MinBlocks;
    static constexpr int kKeys = 16 * M * Warps;         // keys a block
    static constexpr int kItemTiles = RowStats ? 2 : 3;  // Q, dout (and out) an item
    static_assert(kThreads % Q == 0 && kThreads / Q <= kWarpSize && (HD / 8) % (kThreads / Q) == 0,
                  "item_stats: whole chunks for a power of two of lanes per row");
    static_assert(!RowStats || RowStatsLayout::kPad % Q == 0,
                  "an item's row stats lie in the padding");

    // K and V (kKeys, HD), then per stage Q, dout (and out) (kQ, HD), 16-bit; then lse and D (kQ
    // floats each; one pair per stage with RowStats).
    static constexpr std::size_t smem_bytes() {
        return static_cast<std::size_t>(2 * kKeys + kItemTiles * kStages * kQ) * kHD * 2 +
               (RowStats ? kStages : 1) * 2 * kQ * sizeof(float);
    }
    // Shared-memory bytes a warp reads per m16n8k16 product (the forward's count): the four
    // products S^T = K Q^T, dV += P^T dO, dP^T = V dO^T, dK += dS^T Q are equal in number, each
    // reads 256 / kM bytes of B a product, and the two A B^T ones 512 / (kQ / 8) more for K's or
    // V's A fragments when they come from the tiles.
    static constexpr double smem_read_per_mma() {
        const double a = kInRegisters ? 0.0 : 512.0 / (kQ / 8);
        return a / 2.0 + 256.0 / kM;
    }
};

// Pass 2's tiles: m-tiles of queries per warp, keys per tile, stages, Q and dout fragments in
// registers, warps per block, blocks per SM.
template <int HD, int M, int BlockN, int Stages, bool InRegisters, int Warps = 4, int MinBlocks = 2>
struct QueryTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(BlockN % 16 == 0 && Stages >= 2 && (Warps == 4 || Warps == 8));
    static constexpr int kHD = HD, kM = M, kBlockN = BlockN, kStages = Stages;
    static constexpr bool kInRegisters = InRegisters;
    static constexpr int kWarps = Warps, kThreads = Warps * kWarpSize, kMinBlocks = MinBlocks;
    static constexpr int kQueries = 16 * M * Warps;  // queries a block

    // Q and dout (kQueries, HD), then per stage K and V (kBlockN, HD), 16-bit.
    static constexpr std::size_t smem_bytes() {
        return static_cast<std::size_t>(2 * kQueries + 2 * kStages * kBlockN) * kHD * 2;
    }
    // The same count over S = Q K^T, dP = dO V^T, dQ += dS K: 256 / kM bytes of B each, and
    // 512 / (kBlockN / 8) for Q's or dout's A fragments in the first two when they come from the
    // tiles.
    static constexpr double smem_read_per_mma() {
        const double a = kInRegisters ? 0.0 : 512.0 / (kBlockN / 8);
        return (2.0 * a + 3.0 * 256.0 / kM) / 3.0;
    }
};

template <class Key, class Query>
struct BackwardTiles {
    static_assert(Key::kHD == Query::kHD);
    static constexpr int kHD = Key::kHD;
    using KeyPass = Key;
    using QueryPass = Query;
};

// The engine's tiles (attention_flash_mma_backward). Shared-memory reads per m16n8k16 product
// (the forward's note): 192 and 213 bytes at HD 64, 320 and 299 at HD 128 (one m-tile: dK and
// dV, or dQ, take 64 fp32 registers a lane each there). ptxas (nvcc 13, sm_80 and sm_90, 255
// registers) spills at most 8 bytes.
template <int kHD>
using DefaultBackwardTiles = std::conditional_t<
    kHD == 64, BackwardTiles<KeyTiles<64, 2, 32, 2, false>, QueryTiles<64, 2, 32, 2, false>>,
    BackwardTiles<KeyTiles<128, 1, 32, 2, false>, QueryTiles<128, 1, 64, 2, false>>>;

// D_i = dout_i . out_i and lse_i log2(e) (+inf past T) of the kQ queries [i0, i0 + kQ) of head h
// into d_s and lse_s, from the dout and out tiles in shared memory: kThreads / kQ threads per row.
// The whole block calls it. TileT: a Tile<D, kHD>, or attention_wgmma_backward.cuh's SwTile.
template <class D, int kHD, int kQ, int kThreads, class TileT>
__device__ void item_stats(float* d_s, float* lse_s, const Shared& sh, TileT go, TileT o,
                           const float* lse, const MmaLayout& l, std::int64_t b, int h,
                           std::int64_t i0) {
    constexpr int kPerRow = kThreads / kQ, kChunks = kHD / 8 / kPerRow;
    const int r = static_cast<int>(threadIdx.x) / kPerRow, part = threadIdx.x % kPerRow;
    float dot = 0.0f;
#pragma unroll
    for (int c = part * kChunks; c < (part + 1) * kChunks; ++c)
        dot += dot8(sh.ptr<const D>(go.chunk(r, c)), sh.ptr<const D>(o.chunk(r, c)));
#pragma unroll
    for (int x = 1; x < kPerRow; x *= 2)
        dot += __shfl_xor_sync(0xffffffffu, dot, x);
    if (part == 0) {
        const std::int64_t i = i0 + r;
        d_s[r] = dot;
        lse_s[r] = i < l.T ? lse[l.row(b, h, i)] * mma_detail::kLog2e : INFINITY;
    }
}

// Pass 1's block (a grid of (key tiles * B * KVH) blocks of Tiles::kThreads, the first key
// tiles first; shared memory: Tiles::smem_bytes() at smem). With Tiles::kRowStats, `stats` holds
// the row statistics (RowStatsLayout) and `out` is not read.
template <class D, class Tiles>
__device__ __forceinline__ void backward_key_block(unsigned char* smem, D* dqkv, const D* dout,
                                                   const D* out, const D* qkv, const float* lse,
                                                   const MmaLayout& l, const FlashDropout& drop,
                                                   const float* stats = nullptr) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads;
    using Tile = Tile<D, kHD>;
    constexpr int kM = Tiles::kM, kRows = Tiles::kKeys, kQ = Tiles::kQ, kNq = kQ / 8, kD = kHD / 8;
    constexpr int kStages = Tiles::kStages, kItemTiles = Tiles::kItemTiles;
    constexpr std::uint32_t kTileBytes = kQ * Tile::kRowBytes;
    const Shared sh{smem, shared_address(smem)};
    const Tile ks = sh.tile<D, kHD>(0), vs = sh.tile<D, kHD>(kRows * Tile::kRowBytes);
    const std::uint32_t stages = 2 * kRows * Tile::kRowBytes;  // Q, dout (, out) per stage
    auto q_tile = [=](int s) { return sh.tile<D, kHD>(stages + (kItemTiles * s) * kTileBytes); };
    auto go_tile = [=](int s) {
        return sh.tile<D, kHD>(stages + (kItemTiles * s + 1) * kTileBytes);
    };
    auto o_tile = [=](int s) { return sh.tile<D, kHD>(stages + (3 * s + 2) * kTileBytes); };
    // lse log2(e) and D of the item in stage s (one pair for every stage without kRowStats).
    const std::uint32_t stats_at = sh.at + stages + kItemTiles * kStages * kTileBytes;
    auto lse_at = [=](int s) {
        return stats_at + (Tiles::kRowStats ? s : 0) * 2 * kQ * sizeof(float);
    };

    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const std::int64_t heads = l.B * l.KVH, hd = l.HD;
    const std::int64_t kt = blockIdx.x / heads;
    const std::int64_t b = blockIdx.x % heads / l.KVH;
    const int kvh = static_cast<int>(blockIdx.x % heads % l.KVH);
    const std::int64_t j0 = kt * kRows;
    load_rows<kRows, kThreads>(ks, qkv + (l.NH + kvh) * hd, l.qkv_row, b, l.T, j0);
    load_rows<kRows, kThreads>(vs, qkv + (l.NH + l.KVH + kvh) * hd, l.qkv_row, b, l.T, j0);
    cp_async_commit();
    // Items: (query head of the group, query tile from the one holding key j0 on).
    const int qt0 = static_cast<int>(j0 / kQ);
    const int per_head = static_cast<int>((l.T + kQ - 1) / kQ) - qt0;
    auto items = make_pipeline<kStages>(
        [=](int item, int stage) {
            const std::int64_t h = kvh * l.group + item / per_head;
            const std::int64_t i0 = static_cast<std::int64_t>(qt0 + item % per_head) * kQ;
            load_key_item<kQ, kThreads, Tiles::kRowStats, kQ * Tile::kChunks / kThreads>(
                q_tile(stage), go_tile(stage), o_tile(stage), lse_at(stage), qkv, dout, out, stats,
                l, b, static_cast<int>(h), i0, static_cast<int>(threadIdx.x));
        },
        l.group * per_head);
    items.prologue();
    cp_async_wait<kStages - 1>();  // K and V: the oldest group
    __syncthreads();

    const int w_row0 = warp * 16 * kM;
    const std::int64_t kw0 = j0 + w_row0, kw_last = kw0 + 16 * kM - 1;  // the warp's keys
    const auto ka = a_source<Tiles::kInRegisters, kM>(ks, w_row0);
    const auto va = a_source<Tiles::kInRegisters, kM>(vs, w_row0);
    float dk[kM][kD][4], dv[kM][kD][4];
    zero(dk);
    zero(dv);

    for (int it = 0; it < l.group * per_head; ++it) {
        const int stage = items.next(it);
        const int h = kvh * l.group + it / per_head;
        const std::int64_t i0 = static_cast<std::int64_t>(qt0 + it % per_head) * kQ;
        float* const lse_s = sh.ptr<float>(lse_at(stage));
        float* const d_s = lse_s + kQ;
        if constexpr (!Tiles::kRowStats) {  // else landed with the item
            item_stats<D, kHD, kQ, kThreads>(d_s, lse_s, sh, go_tile(stage), o_tile(stage), lse, l,
                                             b, h, i0);
            __syncthreads();
        }
        if (kw0 >= l.T || i0 + kQ - 1 < kw0) continue;  // keys past the end, or after every query
        const bool masked = kw_last > i0;
        // Key minus query of the lane's first element (key kw0 + g, query i0 + 2 t).
        const int diagonal = static_cast<int>(kw0 - i0) + g - 2 * t;
        float st[kM][kNq][4];
        zero(st);
        warp_abt<D>(st, ka, q_tile(stage), 0);
        float pd[kM][kNq][4];       // P^T as dV takes it: dropped elements zeroed
        std::uint32_t dropped = 0;  // bit 4 (kNq m + n) + e of the lane's elements
        for_each_element<kM, kNq>([&](int m, int n, int e) {
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
        pack_a<D>(pa, pd);
        warp_ab<D>(dv, pa, go_tile(stage), 0);
        float dpt[kM][kNq][4];
        zero(dpt);
        warp_abt<D>(dpt, va, go_tile(stage), 0);
        for_each_element<kM, kNq>([&](int m, int n, int e) {
            float dp = dpt[m][n][e];
            if (drop.on)
                dp = (dropped >> (4 * (kNq * m + n) + e) & 1u) != 0 ? 0.0f : dp * drop.scale;
            st[m][n][e] *= (dp - d_s[8 * n + 2 * t + (e & 1)]) * l.scale;
        });
        pack_a<D>(pa, st);
        warp_ab<D>(dk, pa, q_tile(stage), 0);
    }

    const float dv_scale = drop.on ? drop.scale : 1.0f;  // dV summed the kept P unscaled
    for_each_row<kM>([&](int m, int hh) {
        const std::int64_t j = kw0 + 16 * m + g + 8 * hh;
        if (j >= l.T) return;
        store_row(dqkv + l.k(b, j, kvh), dk, m, hh, 1.0f, true);
        store_row(dqkv + l.v(b, j, kvh), dv, m, hh, dv_scale, true);
    });
}

// Pass 2's block (a grid of (query tiles * B * NH) blocks of Tiles::kThreads, the last query
// tiles first; shared memory: Tiles::smem_bytes() at smem).
template <class D, class Tiles>
__device__ __forceinline__ void backward_query_block(unsigned char* smem, D* dqkv, const D* dout,
                                                     const D* out, const D* qkv, const float* lse,
                                                     const MmaLayout& l, const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads;
    using Tile = Tile<D, kHD>;
    constexpr int kM = Tiles::kM, kRows = Tiles::kQueries, kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8, kStages = Tiles::kStages;
    constexpr std::uint32_t kTileBytes = kBlockN * Tile::kRowBytes;
    const Shared sh{smem, shared_address(smem)};
    const Tile qs = sh.tile<D, kHD>(0), gos = sh.tile<D, kHD>(kRows * Tile::kRowBytes);
    const std::uint32_t stages = 2 * kRows * Tile::kRowBytes;  // K, V per stage
    auto k_tile = [=](int s) { return sh.tile<D, kHD>(stages + (2 * s) * kTileBytes); };
    auto v_tile = [=](int s) { return sh.tile<D, kHD>(stages + (2 * s + 1) * kTileBytes); };

    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const std::int64_t hd = l.HD;
    const QueryBlock block = query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;  // (not structured bindings: lambdas take them)
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = causal_key_tiles<kBlockN>(l, i0, kRows);
    load_rows<kRows, kThreads>(qs, qkv + h * hd, l.qkv_row, b, l.T, i0);
    load_rows<kRows, kThreads>(gos, dout + h * hd, l.out_row, b, l.T, i0);
    cp_async_commit();
    auto kv = kv_pipeline<kStages, kBlockN, kThreads>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
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
                dot += dot8(sh.ptr<const D>(gos.chunk(r, c)), out + l.o(b, i, h) + 8 * c);
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            d_row[m][hh] = __shfl_sync(0xffffffffu, dot, 2 * (g + 8 * hh));
            const std::int64_t row = w_first + 16 * m + g + 8 * hh;
            lse_row[m][hh] = row < l.T ? lse[l.row(b, h, row)] * mma_detail::kLog2e : INFINITY;
        }
    }
    const auto qa = a_source<Tiles::kInRegisters, kM>(qs, w_row0);
    const auto ga = a_source<Tiles::kInRegisters, kM>(gos, w_row0);
    float dq[kM][kD][4];
    zero(dq);

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (w_first >= l.T || j0 > w_last) continue;  // nothing the warp's rows see
        const bool masked = j0 + kBlockN - 1 > w_first;
        const int diagonal = static_cast<int>(j0 - w_first) + 2 * t - g;  // key - query, e = 0
        float s[kM][kN][4], dp[kM][kN][4];
        zero(s);
        zero(dp);
        warp_abt<D>(s, qa, k_tile(stage), 0);
        warp_abt<D>(dp, ga, v_tile(stage), 0);
        for_each_element<kM, kN>([&](int m, int n, int e) {
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
        pack_a<D>(dsa, s);
        warp_ab<D>(dq, dsa, k_tile(stage), 0);
    }

    for_each_row<kM>([&](int m, int hh) {
        const std::int64_t i = w_first + 16 * m + g + 8 * hh;
        if (i < l.T) store_row(dqkv + l.q(b, i, h), dq, m, hh, 1.0f, true);
    });
}

}  // namespace napkin::cuda::fa2
