// The backward on Hopper's wgmma (sm_90a; docs/CUDA.md "wgmma (sm_90a)"): the mma.sync backward's
// two passes (attention_fa2_backward.cuh) with their products on warpgroups; the dq pass first,
// the dK, dV pass at the end. Not the engine's: bench/attention_fa2_candidates.cu runs the dq pass
// after the engine's mma.sync key pass (b64-wgmma-q, b128-wgmma-q) and both on wgmma (b64-wgmma,
// b128-wgmma). Not a public header.
//
// A block of kGroups warpgroups owns 64 kGroups queries of one (b, h), 64 a warpgroup. Q and dout
// are loaded once, K and V tiles of kBlockN keys stream through kStages stages, all as SwTiles
// (wgmma's K-major 128-byte-swizzled layout). Per key tile each warpgroup issues, in one group,
//   S = Q K^T and dP = dO V^T   2 HD / 16 m64n<kBlockN>k16, A and B from shared memory
// waits, forms dS = P (dP k - D) / sqrt(HD) in registers as the mma.sync pass does (the same
// per-element code on the same fragment layout), packs it into A registers, and issues
//   dQ += dS K                   kBlockN / 16 m64n<HD>k16, K read N-major (imm-trans-b)
// then waits. dq is added into dqkv once at the end, one writer per element: a run repeats bit
// for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_fa2_backward.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_wgmma_forward.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace napkin::cuda::fa2 {

// The dq pass's tiles on wgmma: warpgroups a block, keys a tile, stages, whether a warpgroup's
// dS overlaps its products (wgmma_backward_query_block_overlapped; 3 stages at least), whether
// a producer warpgroup loads for two ping-ponged consumers (..._specialized; as the forward's),
// and whether it loads by TMA (as WgmmaForwardTiles').
template <int HD, int Groups, int BlockN, int Stages, bool Overlap = false,
          bool Specialized = false, bool Tma = false>
struct WgmmaQueryTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    static_assert(BlockN == 64 || BlockN == 128);
    static_assert(Stages >= (Overlap ? 3 : 2));
    static_assert(!Specialized || (Groups == 2 && Overlap && Stages <= 4));
    static_assert(!Tma || Specialized);
    static constexpr int kHD = HD, kGroups = Groups, kBlockN = BlockN, kStages = Stages;
    static constexpr bool kOverlap = Overlap, kSpecialized = Specialized, kTma = Tma;
    static constexpr int kConsumers = 128 * Groups;
    static constexpr int kThreads = kConsumers + (Specialized ? 128 : 0);
    static constexpr int kQueries = 64 * Groups, kMinBlocks = 1;
    // setmaxnreg's split, as WgmmaForwardTiles'.
    static constexpr int kProducerRegs = Tma ? 24 : 40, kConsumerRegs = Tma ? 240 : 232;
    using QTile = SwTile<kQueries, HD>;  // Q, and dout
    using KvTile = SwTile<BlockN, HD>;
    // Q and dout, then per stage K and V, by TMA an 8-byte mbarrier a stage, and up to 1 KiB to
    // align the first to 1024 bytes.
    static constexpr std::size_t smem_bytes() {
        return 1024 + 2 * QTile::kBytes + 2 * static_cast<std::size_t>(kStages) * KvTile::kBytes +
               (Tma ? 8 * static_cast<std::size_t>(kStages) : 0);
    }
    // As WgmmaForwardTiles': S and dP each read A (2048 bytes) and B (32 kBlockN) per m64 product,
    // dQ B alone (A in registers); the three are equal in number.
    static constexpr double smem_read_per_mma() {
        return (2.0 * (64.0 + 4096.0 / BlockN) + 64.0) / 3.0;
    }
};

// dS = P (dP k - D) / sqrt(HD) for the warp's rows (w_first + g + 8 hh) and the key tile at
// j0, into s: P = exp2(S log2(e) / sqrt(HD) - lse log2(e)) from s, zero where the key follows
// the query; k = 1, or with dropout 1 / (1 - p) where the element is kept, 0 where dropped. The
// mma.sync pass's per-element code (backward_query_block), on the same fragment layout; the
// engine's kernel keeps its own copy written out, as ptxas allocates it (through a helper it
// spilled 8 bytes where it spills none).
template <int kN>
__device__ __forceinline__ void wgmma_query_ds(float (&s)[1][kN][4], const float (&dp)[1][kN][4],
                                               const float (&d_row)[1][2],
                                               const float (&lse_row)[1][2], std::int64_t w_first,
                                               std::int64_t j0, std::int64_t b, int h,
                                               const MmaLayout& l, const FlashDropout& drop) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const bool masked = j0 + 8 * kN - 1 > w_first;
    const int diagonal = static_cast<int>(j0 - w_first) + 2 * t - g;  // key - query, e = 0
    for_each_element<1, kN>([&](int m, int n, int e) {
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
}

// What both dq-pass bodies start with: the block's tiles and place, the warp's rows, and D and
// lse log2(e) of the lane's rows g, g + 8 (two lanes per row, each half of dout (shared memory)
// . out (global), gathered by shuffles). Q and dout are loaded and the K and V pipeline's
// prologue issued; `landed` items of it waited for with them, fenced, and a barrier passed.
template <class Tiles>
struct WgmmaQueryStart {
    typename Tiles::QTile qs, gos;
    std::uint32_t stages;
    QueryBlock block;
    int key_tiles, group;
    std::int64_t w_first, g_first, g_last;
    float d_row[1][2], lse_row[1][2];

    __device__ typename Tiles::KvTile k_tile(int s) const {
        return typename Tiles::KvTile{stages + (2 * s) * Tiles::KvTile::kBytes};
    }
    __device__ typename Tiles::KvTile v_tile(int s) const {
        return typename Tiles::KvTile{stages + (2 * s + 1) * Tiles::KvTile::kBytes};
    }
    // By TMA: the mbarrier of stage s's copies, after the stages.
    __device__ std::uint32_t full(int s) const {
        return stages + 2 * Tiles::kStages * Tiles::KvTile::kBytes + 8 * s;
    }
};

// The warp's rows, and D and lse log2(e) of the lane's rows, once dout's tile has landed.
template <class Tiles, class D>
__device__ __forceinline__ void wgmma_query_row_stats(WgmmaQueryStart<Tiles>& st, const Shared& sh,
                                                      const D* out, const float* lse,
                                                      const MmaLayout& l) {
    constexpr int kD = Tiles::kHD / 8;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2;
    const std::int64_t b = st.block.b, i0 = st.block.i0;
    const int h = st.block.h;
    const int w_row0 = 64 * st.group + 16 * warp;  // the warp's rows, from i0
    st.w_first = i0 + w_row0;
    st.g_first = i0 + 64 * st.group;
    st.g_last = st.g_first + 63;
    const int r = w_row0 + lane / 2, half = lane % 2;
    const std::int64_t i = i0 + r;
    float dot = 0.0f;
    if (i < l.T) {
#pragma unroll
        for (int c = half * kD / 2; c < (half + 1) * kD / 2; ++c)
            dot += dot8(sh.ptr<const D>(st.gos.chunk(r, c)), out + l.o(b, i, h) + 8 * c);
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        st.d_row[0][hh] = __shfl_sync(0xffffffffu, dot, 2 * (g + 8 * hh));
        const std::int64_t row = st.w_first + g + 8 * hh;
        st.lse_row[0][hh] = row < l.T ? lse[l.row(b, h, row)] * mma_detail::kLog2e : INFINITY;
    }
}

template <class Tiles, int kLanded, class D, class Pipeline>
__device__ __forceinline__ void wgmma_query_start(WgmmaQueryStart<Tiles>& st, Pipeline& kv,
                                                  const Shared& sh, const D* out, const float* lse,
                                                  const MmaLayout& l) {
    kv.prologue();
    cp_async_wait<Tiles::kStages - 1 - kLanded>();  // Q and dout: the oldest group
    wgmma::fence_proxy_async();
    __syncthreads();
    wgmma_query_row_stats(st, sh, out, lse, l);
}

// The block's place and tiles, before any load.
template <class Tiles>
__device__ __forceinline__ WgmmaQueryStart<Tiles> wgmma_query_place(unsigned char* smem,
                                                                    const MmaLayout& l) {
    constexpr int kRows = Tiles::kQueries;
    const std::uint32_t base = (shared_address(smem) + 1023u) & ~1023u;
    WgmmaQueryStart<Tiles> st{};
    st.qs = typename Tiles::QTile{base};
    st.gos = typename Tiles::QTile{base + Tiles::QTile::kBytes};
    st.stages = base + 2 * Tiles::QTile::kBytes;
    st.block = query_block(l, kRows);
    st.key_tiles = causal_key_tiles<Tiles::kBlockN>(l, st.block.i0, kRows);
    st.group = static_cast<int>(threadIdx.x) / 128;
    return st;
}

// Q's and dout's rows of the block into their tiles by kThreads threads (`thread` this one's
// rank); the caller commits.
template <class Tiles, int kThreads, class D,
          int kUnroll = Tiles::kQueries* Tiles::QTile::kChunks / kThreads>
__device__ __forceinline__ void wgmma_query_load(const WgmmaQueryStart<Tiles>& st, const D* dout,
                                                 const D* qkv, const MmaLayout& l, int thread) {
    constexpr int kRows = Tiles::kQueries;
    using QTile = typename Tiles::QTile;
    const std::int64_t hd = l.HD;
    load_rows<kRows, kThreads, QTile, D, kUnroll>(st.qs, qkv + st.block.h * hd, l.qkv_row,
                                                  st.block.b, l.T, st.block.i0, thread);
    load_rows<kRows, kThreads, QTile, D, kUnroll>(st.gos, dout + st.block.h * hd, l.out_row,
                                                  st.block.b, l.T, st.block.i0, thread);
}

// The place, Q and dout loaded by the whole block (committed): the start before the pipeline.
template <class Tiles, class D>
__device__ __forceinline__ WgmmaQueryStart<Tiles> wgmma_query_place(unsigned char* smem,
                                                                    const D* dout, const D* qkv,
                                                                    const MmaLayout& l) {
    WgmmaQueryStart<Tiles> st = wgmma_query_place<Tiles>(smem, l);
    wgmma_query_load<Tiles, Tiles::kThreads>(st, dout, qkv, l, static_cast<int>(threadIdx.x));
    cp_async_commit();
    return st;
}

// S = Q K^T and dP = dO V^T of the warpgroup's rows against the tiles in `stage`, one group.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_issue_s_dp(float (&s)[1][Tiles::kBlockN / 8][4],
                                                 float (&dp)[1][Tiles::kBlockN / 8][4],
                                                 const WgmmaQueryStart<Tiles>& st, int stage) {
    constexpr int kBlockN = Tiles::kBlockN;
#pragma unroll
    for (int ks = 0; ks < Tiles::kHD / 16; ++ks)
        wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                         st.qs.k_major(64 * st.group, ks),
                                         st.k_tile(stage).k_major(0, ks), ks > 0);
#pragma unroll
    for (int ks = 0; ks < Tiles::kHD / 16; ++ks)
        wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(dp),
                                         st.gos.k_major(64 * st.group, ks),
                                         st.v_tile(stage).k_major(0, ks), ks > 0);
    wgmma::commit();
}

// dQ += dS K_stage, dS packed in A registers, one group.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_issue_dq(
    float (&dq)[1][Tiles::kHD / 8][4], const std::uint32_t (&dsa)[1][Tiles::kBlockN / 16][4],
    const WgmmaQueryStart<Tiles>& st, int stage) {
#pragma unroll
    for (int kk = 0; kk < Tiles::kBlockN / 16; ++kk)
        wgmma::mma_rs<D, Tiles::kHD, true>(reinterpret_cast<float(&)[Tiles::kHD / 2]>(dq),
                                           dsa[0][kk], st.k_tile(stage).n_major(kk), true);
    wgmma::commit();
}

// dq of the warp's rows into dqkv, one writer per element.
template <class Tiles, class D>
__device__ __forceinline__ void wgmma_store_dq(D* dqkv, const float (&dq)[1][Tiles::kHD / 8][4],
                                               const WgmmaQueryStart<Tiles>& st,
                                               const MmaLayout& l) {
    const int g = static_cast<int>(threadIdx.x) % kWarpSize >> 2;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const std::int64_t i = st.w_first + g + 8 * hh;
        if (i < l.T) store_row(dqkv + l.q(st.block.b, i, st.block.h), dq, 0, hh, 1.0f, true);
    }
}

// The K and V tiles' pipeline of the dq pass (as the forward's wgmma_kv_pipeline).
template <class Tiles, class D>
__device__ auto wgmma_kv_pipeline(const WgmmaQueryStart<Tiles>& st, const D* qkv,
                                  const MmaLayout& l) {
    return kv_pipeline<Tiles::kStages, Tiles::kBlockN, Tiles::kThreads>(
        [st](int s) { return st.k_tile(s); }, [st](int s) { return st.v_tile(s); }, qkv, l,
        st.block.b, st.block.kvh, st.key_tiles);
}

template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_query_block_serial(unsigned char* smem, D* dqkv,
                                                                  const D* dout, const D* out,
                                                                  const D* qkv, const float* lse,
                                                                  const MmaLayout& l,
                                                                  const FlashDropout& drop) {
    constexpr int kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = Tiles::kHD / 8;
    const Shared sh{smem, shared_address(smem)};
    WgmmaQueryStart<Tiles> st = wgmma_query_place<Tiles>(smem, dout, qkv, l);
    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    auto kv = wgmma_kv_pipeline(st, qkv, l);
    wgmma_query_start<Tiles, 0>(st, kv, sh, out, lse, l);
    float dq[1][kD][4];
    zero(dq);

    for (int it = 0; it < st.key_tiles; ++it) {
        const int stage = kv.next(it);
        wgmma::fence_proxy_async();  // this thread's copies of the tile, for the products
        __syncthreads();
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (st.g_first >= l.T || j0 > st.g_last) continue;  // nothing the warpgroup's rows see
        float s[1][kN][4], dp[1][kN][4];
        wgmma::fence();
        wgmma_issue_s_dp<D>(s, dp, st, stage);
        wgmma::wait<0>();
        wgmma_query_ds(s, dp, st.d_row, st.lse_row, st.w_first, j0, b, h, l, drop);
        std::uint32_t dsa[1][kN / 2][4];
        pack_a<D>(dsa, s);
        wgmma::fence();
        wgmma_issue_dq<D>(dq, dsa, st, stage);
        wgmma::wait<0>();
    }
    wgmma_store_dq(dqkv, dq, st, l);
}

// The dq pass with a warpgroup's dS under its products (the forward's overlapped schedule): S and
// dP of tile j + 1 are issued before dQ += dS_j K_j and waited for alone, dS_{j+1} is formed while
// dQ's product still reads dS_j's A registers, and packed once it is waited for. Tile j + 1 must
// have landed while tile j's K is still read: 3 stages at least, as the forward's.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_query_block_overlapped(
    unsigned char* smem, D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
    const MmaLayout& l, const FlashDropout& drop) {
    constexpr int kBlockN = Tiles::kBlockN, kStages = Tiles::kStages;
    constexpr int kN = kBlockN / 8, kD = Tiles::kHD / 8;
    const Shared sh{smem, shared_address(smem)};
    WgmmaQueryStart<Tiles> st = wgmma_query_place<Tiles>(smem, dout, qkv, l);
    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    auto kv = wgmma_kv_pipeline(st, qkv, l);
    wgmma_query_start<Tiles, 1>(st, kv, sh, out, lse, l);  // and item 0
    const int visible =
        st.g_first >= l.T ? 0 : min(st.key_tiles, static_cast<int>(st.g_last / kBlockN) + 1);
    float dq[1][kD][4];
    zero(dq);
    float s[1][kN][4], dp[1][kN][4];
    std::uint32_t dsa[1][kN / 2][4];
    auto ds = [&](int it) {
        wgmma_query_ds(s, dp, st.d_row, st.lse_row, st.w_first,
                       static_cast<std::int64_t>(it) * kBlockN, b, h, l, drop);
    };
    if (visible > 0) {
        wgmma::fence();
        wgmma_issue_s_dp<D>(s, dp, st, 0);
        wgmma::wait<0>();
        ds(0);
        pack_a<D>(dsa, s);
    }
    for (int it = 0; it < st.key_tiles; ++it) {
        cp_async_wait<kStages - 3>();  // item it + 1; every warpgroup is done with item it - 1
        wgmma::fence_proxy_async();
        __syncthreads();
        kv.issue(it + kStages - 1);  // into item it - 1's stage
        if (it >= visible) continue;
        // S and dP of tile it + 1 are issued past the warpgroup's last tile too (a stale stage,
        // never read): the forward's reason (ptxas's C7520 with the products on one path only).
        const bool more = it + 1 < visible;
        wgmma::fence();
        wgmma_issue_s_dp<D>(s, dp, st, (it + 1) % kStages);
        wgmma_issue_dq<D>(dq, dsa, st, it % kStages);
        wgmma::wait<1>();  // S and dP of tile it + 1; dQ's product may still run
        if (more) ds(it + 1);
        wgmma::wait<0>();
        if (more) pack_a<D>(dsa, s);
    }
    wgmma_store_dq(dqkv, dq, st, l);
}

// The overlapped dq pass with the forward's warp specialization and ping-pong
// (wgmma_forward_block_specialized: the same producer, barriers and turns): the producer loads Q
// and dout with key tile 0, the consumers take D and lse from them once that has landed, then
// take turns to issue S and dP of tile j + 1 and dQ += dS_j K_j. By TMA (Tiles::kTma, `maps`
// with dout's) as the forward's.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_query_block_specialized(
    unsigned char* smem, D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
    const MmaLayout& l, const FlashDropout& drop, const TmaMaps* maps) {
    constexpr int kBlockN = Tiles::kBlockN, kStages = Tiles::kStages;
    constexpr int kN = kBlockN / 8, kD = Tiles::kHD / 8;
    constexpr int kProducer = 128, kConsumers = Tiles::kConsumers;
    using Bar = WgmmaPingPongBarriers<kStages>;
    const Shared sh{smem, shared_address(smem)};
    WgmmaQueryStart<Tiles> st = wgmma_query_place<Tiles>(smem, l);
    st.group = __shfl_sync(0xffffffffu, st.group, 0);  // warp-uniform to ptxas (see the forward)
    const int kt = st.key_tiles;
    if constexpr (Tiles::kTma)
        tma_init_stages<kStages>(kConsumers, [&](int s) { return st.full(s); });

    if (st.group == Tiles::kGroups) {  // the producer warpgroup
        wgmma::release_registers<Tiles::kProducerRegs>();
        const int thread = static_cast<int>(threadIdx.x) - kConsumers;
        if constexpr (Tiles::kTma)
            wgmma_produce_tma<Tiles, Bar>(
                st.block, kt, l, thread, *maps, [&](int s) { return st.full(s); },
                2 * Tiles::QTile::kBytes,
                [&](std::uint32_t bar) {  // Q and dout
                    const int col = st.block.h * l.HD;
                    tma_load_tile(st.qs, maps->q, col, st.block.i0, st.block.b, bar);
                    tma_load_tile(st.gos, maps->dout, col, st.block.i0, st.block.b, bar);
                },
                [&](int s) { return st.k_tile(s); }, [&](int s) { return st.v_tile(s); });
        else
            wgmma_produce<Tiles, D, kStages, Bar>(
                st.block, kt, qkv, l, thread,
                [&] { wgmma_query_load<Tiles, kProducer, D, 2>(st, dout, qkv, l, thread); },
                [&](int s) { return st.k_tile(s); }, [&](int s) { return st.v_tile(s); });
        return;
    }

    wgmma::claim_registers<Tiles::kConsumerRegs>();
    const int g = st.group;
    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    auto wait_full = [&](int x) {
        wgmma_wait_full<Tiles::kTma, kStages, Bar>(x, g, [&](int i) { return st.full(i); });
    };
    wait_full(0);
    wgmma_query_row_stats(st, sh, out, lse, l);  // dout landed with tile 0
    const int visible = st.g_first >= l.T ? 0 : min(kt, static_cast<int>(st.g_last / kBlockN) + 1);
    float dq[1][kD][4];
    zero(dq);
    float s[1][kN][4], dp[1][kN][4];
    std::uint32_t dsa[1][kN / 2][4];
    auto ds = [&](int it) {
        wgmma_query_ds(s, dp, st.d_row, st.lse_row, st.w_first,
                       static_cast<std::int64_t>(it) * kBlockN, b, h, l, drop);
    };
    wgmma_consume<kStages, kConsumers, Bar>(
        g, kt, visible, wait_full, [&] { wgmma_issue_s_dp<D>(s, dp, st, 0); },
        [&](int it, int stage) {  // S, dP of tile it + 1, then dQ += dS_it K_it
            wgmma_issue_s_dp<D>(s, dp, st, stage);
            wgmma_issue_dq<D>(dq, dsa, st, it % kStages);
        },
        [&](int it) { ds(it); }, [&](int) { pack_a<D>(dsa, s); });
    wgmma_store_dq(dqkv, dq, st, l);
}

// `maps`: the call's tensor maps, dout's among them, when Tiles::kTma; else unused.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_query_block(
    unsigned char* smem, D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
    const MmaLayout& l, const FlashDropout& drop, const TmaMaps* maps = nullptr) {
    if constexpr (Tiles::kSpecialized)
        wgmma_backward_query_block_specialized<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop,
                                                         maps);
    else if constexpr (Tiles::kOverlap)
        wgmma_backward_query_block_overlapped<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
    else
        wgmma_backward_query_block_serial<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop);
}

// The dK, dV pass's tiles on wgmma: warpgroups a block (64 keys each), queries an item, stages,
// whether the next item's S^T and dP^T overlap this one's products (3 stages at least), whether
// the items' D and lse come precomputed (as KeyTiles' RowStats), whether a producer warpgroup
// loads for the two ping-ponged consumers (as WgmmaForwardTiles'; overlapped, with RowStats),
// and whether it loads by TMA (as WgmmaForwardTiles').
template <int HD, int Groups, int Q, int Stages, bool Overlap = false, bool RowStats = false,
          bool Specialized = false, bool Tma = false>
struct WgmmaKeyTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    // 32-query items halve S^T's and dP^T's registers (dK and dV hold 128 a thread at HD 128).
    static_assert(Q == 32 || Q == 64, "the lane's dropped bits fit one register at 8 n-tiles");
    static_assert(Stages >= (Overlap ? 3 : 2));
    static constexpr int kHD = HD, kGroups = Groups, kQ = Q, kStages = Stages;
    static_assert(!Specialized || (Groups == 2 && Overlap && RowStats && Stages <= 4));
    static_assert(!Tma || Specialized);
    static constexpr bool kOverlap = Overlap, kRowStats = RowStats, kSpecialized = Specialized;
    static constexpr bool kTma = Tma;
    static constexpr bool kWgmma = true;  // as KeyTiles' (false there)
    static constexpr int kConsumers = 128 * Groups;
    static constexpr int kThreads = kConsumers + (Specialized ? 128 : 0);
    static constexpr int kKeys = 64 * Groups, kMinBlocks = 1;
    // setmaxnreg's split (each a multiple of 8, 128 kProducerRegs + 256 kConsumerRegs <= 64 Ki):
    // at HD 128 the consumers hold dK and dV (128 a thread) and take 240, the producer 24; by
    // TMA the producer needs no more at HD 64 either.
    static constexpr int kProducerRegs = HD == 128 || Tma ? 24 : 40;
    static constexpr int kConsumerRegs = HD == 128 || Tma ? 240 : 232;
    static constexpr int kItemTiles = RowStats ? 2 : 3;  // Q, dout (and out) an item
    static_assert(RowStats || (kThreads % Q == 0 && (HD / 8) % (kThreads / Q) == 0),
                  "item_stats' rows");
    using KTile = SwTile<kKeys, HD>;  // K, and V
    using ItemTile = SwTile<Q, HD>;   // Q, dout (, out) of an item
    // K and V, then per stage Q, dout (and out), then lse and D (kQ floats each; a pair per stage
    // with RowStats), by TMA an 8-byte mbarrier a stage, and up to 1 KiB to align the first to
    // 1024 bytes.
    static constexpr std::size_t smem_bytes() {
        return 1024 + 2 * KTile::kBytes +
               static_cast<std::size_t>(kItemTiles * kStages) * ItemTile::kBytes +
               (RowStats ? kStages : 1) * 2 * kQ * sizeof(float) +
               (Tma ? 8 * static_cast<std::size_t>(kStages) : 0);
    }
    // As WgmmaQueryTiles': S^T and dP^T read A (2048 bytes) and B (32 kQ) per m64 product, dV
    // and dK B alone; the four are equal in number.
    static constexpr double smem_read_per_mma() {
        return (2.0 * (64.0 + 4096.0 / Q) + 2.0 * 64.0) / 4.0;
    }
};

// P^T (dropped elements zeroed, as dV takes it) into pd and dS^T = P^T (dP^T k - D) / sqrt(HD)
// into st (which holds S^T), for the warp's keys kw0 .. kw0 + 15 and the item's queries i0 .. of
// head h, lse log2(e) and D of those queries in lse_s and d_s: the mma.sync pass's per-element
// code, on the same fragment layout.
template <int kNq>
__device__ __forceinline__ void wgmma_key_form(float (&st)[1][kNq][4],
                                               const float (&dpt)[1][kNq][4],
                                               float (&pd)[1][kNq][4], const float* lse_s,
                                               const float* d_s, std::int64_t kw0, std::int64_t i0,
                                               std::int64_t b, int h, const MmaLayout& l,
                                               const FlashDropout& drop) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const bool masked = kw0 + 15 > i0;
    // Key minus query of the lane's first element (key kw0 + g, query i0 + 2 t).
    const int diagonal = static_cast<int>(kw0 - i0) + g - 2 * t;
    std::uint32_t dropped = 0;  // bit 4 n + e of the lane's elements
    for_each_element<1, kNq>([&](int m, int n, int e) {
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
    for_each_element<1, kNq>([&](int m, int n, int e) {
        float dp = dpt[m][n][e];
        if (drop.on) dp = (dropped >> (4 * (kNq * m + n) + e) & 1u) != 0 ? 0.0f : dp * drop.scale;
        st[m][n][e] *= (dp - d_s[8 * n + 2 * t + (e & 1)]) * l.scale;
    });
}

// Pass 1's shared memory on wgmma: K and V (kKeys rows each), then per stage Q, dout (and out),
// then lse log2(e) and D (kQ floats each; a pair per stage with RowStats), from the first
// 1024-byte boundary of the window.
template <class Tiles>
struct WgmmaKeySmem {
    using KTile = typename Tiles::KTile;
    using ItemTile = typename Tiles::ItemTile;
    static constexpr int kItemTiles = Tiles::kItemTiles;
    KTile ks, vs;
    std::uint32_t stages;

    __device__ explicit WgmmaKeySmem(std::uint32_t window)
        : ks{(window + 1023u) & ~1023u},
          vs{ks.at + KTile::kBytes},
          stages{ks.at + 2 * KTile::kBytes} {}
    __device__ ItemTile q(int s) const {
        return ItemTile{stages + (kItemTiles * s) * ItemTile::kBytes};
    }
    __device__ ItemTile go(int s) const {
        return ItemTile{stages + (kItemTiles * s + 1) * ItemTile::kBytes};
    }
    __device__ ItemTile o(int s) const { return ItemTile{stages + (3 * s + 2) * ItemTile::kBytes}; }
    // lse log2(e) of the item in stage s (the one pair without RowStats); its D kQ floats on.
    __device__ std::uint32_t lse_at(int s) const {
        return stages + kItemTiles * Tiles::kStages * ItemTile::kBytes +
               (Tiles::kRowStats ? s : 0) * 2 * Tiles::kQ * sizeof(float);
    }
    // By TMA (with RowStats): the mbarrier of stage s's copies, after the statistics.
    __device__ std::uint32_t full(int s) const { return lse_at(Tiles::kStages) + 8 * s; }
};

// Host side: the row statistics' map of one call (TmaMaps::stats), boxes of an item's kQ
// queries' lse then D.
template <int kQ>
std::string make_stats_map(CUtensorMap* map, const float* stats, const MmaLayout& l) {
    const std::int64_t tp = RowStatsLayout::padded(l.T);
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(tp), 2,
                                static_cast<cuuint64_t>(l.B * l.NH)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(tp) * sizeof(float),
                                   static_cast<cuuint64_t>(2 * tp) * sizeof(float)};
    const cuuint32_t box[3] = {kQ, 2, 1};
    return tma::encode_3d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, stats, dims, strides, box,
                          CU_TENSOR_MAP_SWIZZLE_NONE);
}

// S^T = K Q^T and dP^T = V dO^T of warpgroup `group`'s keys and the item in `stage`, one group.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_issue_st_dpt(float (&st)[1][Tiles::kQ / 8][4],
                                                   float (&dpt)[1][Tiles::kQ / 8][4],
                                                   const WgmmaKeySmem<Tiles>& sm, int group,
                                                   int stage) {
    constexpr int kQ = Tiles::kQ;
#pragma unroll
    for (int k = 0; k < Tiles::kHD / 16; ++k)
        wgmma::mma_ss<D, kQ, false>(reinterpret_cast<float(&)[kQ / 2]>(st),
                                    sm.ks.k_major(64 * group, k), sm.q(stage).k_major(0, k), k > 0);
#pragma unroll
    for (int k = 0; k < Tiles::kHD / 16; ++k)
        wgmma::mma_ss<D, kQ, false>(reinterpret_cast<float(&)[kQ / 2]>(dpt),
                                    sm.vs.k_major(64 * group, k), sm.go(stage).k_major(0, k),
                                    k > 0);
    wgmma::commit();
}

// dV += P^T dO and dK += dS^T Q of the item in `stage`, P^T and dS^T in A registers; one group.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_issue_dv_dk(float (&dv)[1][Tiles::kHD / 8][4],
                                                  float (&dk)[1][Tiles::kHD / 8][4],
                                                  const std::uint32_t (&pa)[1][Tiles::kQ / 16][4],
                                                  const std::uint32_t (&sa)[1][Tiles::kQ / 16][4],
                                                  const WgmmaKeySmem<Tiles>& sm, int stage) {
    constexpr int kHD = Tiles::kHD;
#pragma unroll
    for (int kk = 0; kk < Tiles::kQ / 16; ++kk)
        wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(dv), pa[0][kk],
                                    sm.go(stage).n_major(kk), true);
#pragma unroll
    for (int kk = 0; kk < Tiles::kQ / 16; ++kk)
        wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(dk), sa[0][kk],
                                    sm.q(stage).n_major(kk), true);
    wgmma::commit();
}

// Pass 1's block place: its (b, kv head), first key, and its items (query head of the group,
// query tile from the one holding key j0 on): item x is head kvh group + x / per_head, queries
// from (qt0 + x % per_head) kQ.
struct WgmmaKeyPlace {
    std::int64_t b, j0;
    int kvh, qt0, per_head, items;
    __device__ int head(const MmaLayout& l, int x) const { return kvh * l.group + x / per_head; }
    template <int kQ>
    __device__ std::int64_t first_query(int x) const {
        return static_cast<std::int64_t>(qt0 + x % per_head) * kQ;
    }
};
template <class Tiles>
__device__ __forceinline__ WgmmaKeyPlace wgmma_key_place(const MmaLayout& l) {
    constexpr int kQ = Tiles::kQ;
    const std::int64_t heads = l.B * l.KVH;
    WgmmaKeyPlace p{};
    p.b = blockIdx.x % heads / l.KVH;
    p.kvh = static_cast<int>(blockIdx.x % heads % l.KVH);
    p.j0 = static_cast<std::int64_t>(blockIdx.x / heads) * Tiles::kKeys;
    p.qt0 = static_cast<int>(p.j0 / kQ);
    p.per_head = static_cast<int>((l.T + kQ - 1) / kQ) - p.qt0;
    p.items = l.group * p.per_head;
    return p;
}

// dK and dV of the warp's keys kw0 .. into dqkv, one writer per element.
template <class Tiles, class D>
__device__ __forceinline__ void wgmma_store_dk_dv(D* dqkv, const float (&dk)[1][Tiles::kHD / 8][4],
                                                  const float (&dv)[1][Tiles::kHD / 8][4],
                                                  std::int64_t kw0, std::int64_t b, int kvh,
                                                  const MmaLayout& l, const FlashDropout& drop) {
    const int g = static_cast<int>(threadIdx.x) % kWarpSize >> 2;
    const float dv_scale = drop.on ? drop.scale : 1.0f;  // dV summed the kept P unscaled
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const std::int64_t j = kw0 + g + 8 * hh;
        if (j >= l.T) continue;
        store_row(dqkv + l.k(b, j, kvh), dk, 0, hh, 1.0f, true);
        store_row(dqkv + l.v(b, j, kvh), dv, 0, hh, dv_scale, true);
    }
}

// Pass 1 on wgmma: the mma.sync backward_key_block's algorithm (a block owns kKeys keys of one
// (b, kv head), 64 a warpgroup, and walks every (query head of the group, query tile at or after
// the diagonal) item, Q, dout and out streaming through kStages stages). Per item each
// warpgroup issues, in one group,
//   S^T = K Q^T and dP^T = V dO^T    2 HD / 16 m64n<kQ>k16, K, V, Q and dout K-major
// waits, forms P^T (dropped elements zeroed for dV) and dS^T = P^T (dP^T k - D) / sqrt(HD) in
// registers by the mma.sync pass's per-element code, and issues, in one group,
//   dV += P^T dO and dK += dS^T Q    2 kQ / 16 m64n<HD>k16, dO and Q read N-major
// then waits. dK and dV are added into dqkv once at the end, one writer per element.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_key_block_pipelined(
    unsigned char* smem, D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
    const MmaLayout& l, const FlashDropout& drop, const float* row_stats) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads, kRows = Tiles::kKeys;
    constexpr int kQ = Tiles::kQ, kNq = kQ / 8, kD = kHD / 8, kStages = Tiles::kStages;
    constexpr bool kRowStats = Tiles::kRowStats;
    const Shared sh{smem, shared_address(smem)};
    const WgmmaKeySmem<Tiles> sm(sh.at);
    const WgmmaKeyPlace pl = wgmma_key_place<Tiles>(l);
    const std::int64_t b = pl.b, hd = l.HD;
    const int kvh = pl.kvh;
    const int group = static_cast<int>(threadIdx.x) / 128;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    load_rows<kRows, kThreads>(sm.ks, qkv + (l.NH + kvh) * hd, l.qkv_row, b, l.T, pl.j0);
    load_rows<kRows, kThreads>(sm.vs, qkv + (l.NH + l.KVH + kvh) * hd, l.qkv_row, b, l.T, pl.j0);
    cp_async_commit();
    auto items = make_pipeline<kStages>(
        [=](int item, int stage) {
            const int h = pl.head(l, item);
            const std::int64_t i0 = pl.first_query<kQ>(item);
            load_key_item<kQ, kThreads, kRowStats, kQ * Tiles::ItemTile::kChunks / kThreads>(
                sm.q(stage), sm.go(stage), sm.o(stage), sm.lse_at(stage), qkv, dout, out, row_stats,
                l, b, h, i0, static_cast<int>(threadIdx.x));
        },
        pl.items);
    items.prologue();
    // K and V: the oldest group; overlapped, item 0 too.
    cp_async_wait<kStages - 1 - (Tiles::kOverlap ? 1 : 0)>();
    wgmma::fence_proxy_async();
    __syncthreads();

    const std::int64_t kg0 = pl.j0 + 64 * group;  // the warpgroup's first key
    const std::int64_t kw0 = kg0 + 16 * warp;     // the warp's first key
    float dk[1][kD][4], dv[1][kD][4];
    zero(dk);
    zero(dv);
    auto issue_st_dpt = [&](float(&st)[1][kNq][4], float(&dpt)[1][kNq][4], int stage) {
        wgmma_issue_st_dpt<D, Tiles>(st, dpt, sm, group, stage);
    };
    auto issue_dv_dk = [&](const std::uint32_t(&pa)[1][kNq / 2][4],
                           const std::uint32_t(&sa)[1][kNq / 2][4],
                           int stage) { wgmma_issue_dv_dk<D, Tiles>(dv, dk, pa, sa, sm, stage); };

    // lse log2(e) and D of the item in `stage`.
    auto lse_of = [&](int stage) { return sh.ptr<float>(sm.lse_at(stage)); };
    if constexpr (Tiles::kOverlap) {
        // S^T and dP^T of item it + 1 are issued before dV += P^T_it dO_it and dK += dS^T_it Q_it
        // and waited for alone; P^T and dS^T of item it + 1 are formed while those run, and
        // packed after their wait. Item it + 1's lse and D are formed at iteration it, over item
        // it's (used at iteration it - 1, before the barrier), or landed with it (kRowStats);
        // items whose queries all precede the warpgroup's keys are not skipped (their P^T and
        // dS^T are zero), so that the products stay off any branch of their own.
        const int n_items = pl.items;
        float st[1][kNq][4], dpt[1][kNq][4], pd[1][kNq][4];
        std::uint32_t pa[1][kNq / 2][4], sa[1][kNq / 2][4];
        auto stats = [&](int item) {
            const int stage = item % kStages;
            const int h = pl.head(l, item);
            const std::int64_t i0 = pl.first_query<kQ>(item);
            float* const lse_s = lse_of(stage);
            item_stats<D, kHD, kQ, kThreads>(lse_s + kQ, lse_s, sh, sm.go(stage), sm.o(stage), lse,
                                             l, b, h, i0);
        };
        // P^T into pd and dS^T into st for item `item`.
        auto form = [&](int item) {
            const int h = pl.head(l, item);
            const std::int64_t i0 = pl.first_query<kQ>(item);
            const float* const lse_s = lse_of(item % kStages);
            wgmma_key_form(st, dpt, pd, lse_s, lse_s + kQ, kw0, i0, b, h, l, drop);
        };
        const bool keys = kg0 < l.T;  // the warpgroup has keys
        if constexpr (!kRowStats) {
            stats(0);
            __syncthreads();
        }
        if (keys) {
            wgmma::fence();
            issue_st_dpt(st, dpt, 0);
        }
        wgmma::wait<0>();
        if (keys) {
            form(0);
            pack_a<D>(pa, pd);
            pack_a<D>(sa, st);
        }
        for (int it = 0; it < n_items; ++it) {
            cp_async_wait<kStages - 3>();  // item it + 1; every warp is done with item it - 1
            wgmma::fence_proxy_async();
            __syncthreads();
            items.issue(it + kStages - 1);  // into item it - 1's stage
            const bool more = it + 1 < n_items;
            if constexpr (!kRowStats) {
                if (more) stats(it + 1);
                __syncthreads();
            }
            if (!keys) continue;
            const int stage = it % kStages;
            wgmma::fence();
            // Past the last item, S^T and dP^T of a stale stage (never read): the products stay
            // on one path (ptxas's C7520 otherwise, as the forward's).
            issue_st_dpt(st, dpt, (it + 1) % kStages);
            issue_dv_dk(pa, sa, stage);
            wgmma::wait<1>();  // S^T and dP^T of item it + 1; dV's and dK's products may run
            if (more) form(it + 1);
            wgmma::wait<0>();
            if (more) {
                pack_a<D>(pa, pd);
                pack_a<D>(sa, st);
            }
        }
    }
    for (int it = 0; !Tiles::kOverlap && it < pl.items; ++it) {
        int stage = it % kStages;
        if constexpr (kRowStats) {
            cp_async_wait<kStages - 2>();  // item it, and its lse and D
            wgmma::fence_proxy_async();    // this thread's copies of the item, for the products
            __syncthreads();               // every warp is done with item it - 1
            items.issue(it + kStages - 1);
        } else {
            stage = items.next(it);
            wgmma::fence_proxy_async();  // this thread's copies of the item, for the products
        }
        const int h = pl.head(l, it);
        const std::int64_t i0 = pl.first_query<kQ>(it);
        float* const lse_s = lse_of(stage);
        if constexpr (!kRowStats) {
            item_stats<D, kHD, kQ, kThreads>(lse_s + kQ, lse_s, sh, sm.go(stage), sm.o(stage), lse,
                                             l, b, h, i0);
            __syncthreads();
        }
        if (kg0 >= l.T || i0 + kQ - 1 < kg0) continue;  // keys past the end, or after every query
        float st[1][kNq][4], dpt[1][kNq][4];
        wgmma::fence();
        issue_st_dpt(st, dpt, stage);
        wgmma::wait<0>();
        float pd[1][kNq][4];  // P^T as dV takes it: dropped elements zeroed
        wgmma_key_form(st, dpt, pd, lse_s, lse_s + kQ, kw0, i0, b, h, l, drop);
        std::uint32_t pa[1][kNq / 2][4], sa[1][kNq / 2][4];
        pack_a<D>(pa, pd);
        pack_a<D>(sa, st);
        wgmma::fence();
        issue_dv_dk(pa, sa, stage);
        wgmma::wait<0>();
    }

    wgmma_store_dk_dv<Tiles>(dqkv, dk, dv, kw0, b, kvh, l, drop);
}

// Pass 1 with FlashAttention-3's warp specialization and ping-pong (the forward's
// wgmma_forward_block_specialized, on items): a producer warpgroup (the block's third, 24 or 40
// registers) cp.asyncs K and V with item 0, then each item's Q, dout and its row statistics into
// kStages stages (wgmma_produce_items), and the two consumer warpgroups (64 keys each) take turns
// to issue S^T, dP^T of item it + 1 and dV, dK of item it (wgmma_consume), forming P^T and dS^T
// of item it + 1 while the other's products run. Items whose queries all precede a warpgroup's
// keys are computed (zero P^T and dS^T), as the overlapped pass's; a warpgroup whose keys lie
// past T takes its turns and issues nothing.
//
// By TMA (Tiles::kTma; `maps` with dout's and the statistics'): the forward's TMA producer on
// items: K and V go with item 0, each item's Q, dout and statistics (lse then D, one copy) into
// its stage, on the stage's mbarrier.
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_key_block_specialized(
    unsigned char* smem, D* dqkv, const D* dout, const D* qkv, const MmaLayout& l,
    const FlashDropout& drop, const float* row_stats, const TmaMaps* maps) {
    constexpr int kHD = Tiles::kHD, kRows = Tiles::kKeys, kQ = Tiles::kQ, kNq = kQ / 8;
    constexpr int kD = kHD / 8, kStages = Tiles::kStages;
    constexpr int kProducer = 128, kConsumers = Tiles::kConsumers;
    using Bar = WgmmaPingPongBarriers<kStages>;
    using KTile = typename Tiles::KTile;
    const Shared sh{smem, shared_address(smem)};
    const WgmmaKeySmem<Tiles> sm(sh.at);
    const WgmmaKeyPlace pl = wgmma_key_place<Tiles>(l);
    const std::int64_t b = pl.b, hd = l.HD;
    const int kvh = pl.kvh;
    // The warpgroup as a value ptxas knows to be warp-uniform (the forward's note).
    const int group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);

    if constexpr (Tiles::kTma)
        tma_init_stages<kStages>(kConsumers, [&](int s) { return sm.full(s); });

    if (group == Tiles::kGroups) {  // the producer warpgroup
        wgmma::release_registers<Tiles::kProducerRegs>();
        const int thread = static_cast<int>(threadIdx.x) - kConsumers;
        if constexpr (Tiles::kTma) {
            constexpr std::uint32_t kItem =
                2 * Tiles::ItemTile::kBytes + 2 * kQ * static_cast<std::uint32_t>(sizeof(float));
            const int k_col = (l.NH + kvh) * l.HD, v_col = (l.NH + l.KVH + kvh) * l.HD;
            wgmma_produce_items_tma<kStages, kConsumers, Bar>(
                pl.items, thread, [&](int s) { return sm.full(s); },
                [](int x) { return x == 0 ? 2 * KTile::kBytes + kItem : kItem; },
                [&](int item, int stage, std::uint32_t bar) {
                    if (item == 0) {
                        tma_load_tile(sm.ks, maps->kv, k_col, pl.j0, b, bar);
                        tma_load_tile(sm.vs, maps->kv, v_col, pl.j0, b, bar);
                    }
                    const int h = pl.head(l, item);
                    const std::int64_t i0 = pl.first_query<kQ>(item);
                    tma_load_tile(sm.q(stage), maps->q, h * l.HD, i0, b, bar);
                    tma_load_tile(sm.go(stage), maps->dout, h * l.HD, i0, b, bar);
                    tma::load_3d(sm.lse_at(stage), &maps->stats, static_cast<int>(i0), 0,
                                 static_cast<int>(b * l.NH + h), bar);
                });
        } else {
            wgmma_produce_items<kStages, kConsumers, Bar>(
                pl.items,
                [&] {
                    load_rows<kRows, kProducer, KTile, D, 2>(sm.ks, qkv + (l.NH + kvh) * hd,
                                                             l.qkv_row, b, l.T, pl.j0, thread);
                    load_rows<kRows, kProducer, KTile, D, 2>(sm.vs, qkv + (l.NH + l.KVH + kvh) * hd,
                                                             l.qkv_row, b, l.T, pl.j0, thread);
                },
                [&](int item, int stage) {
                    const int h = pl.head(l, item);
                    const std::int64_t i0 = pl.first_query<kQ>(item);
                    // Two copies unrolled, as the forward's producer.
                    load_key_item<kQ, kProducer, true, 2>(
                        sm.q(stage), sm.go(stage), sm.o(stage), sm.lse_at(stage), qkv, dout,
                        static_cast<const D*>(nullptr), row_stats, l, b, h, i0, thread);
                });
        }
        return;
    }

    wgmma::claim_registers<Tiles::kConsumerRegs>();
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    const std::int64_t kg0 = pl.j0 + 64 * group;  // the warpgroup's first key
    const std::int64_t kw0 = kg0 + 16 * warp;     // the warp's first key
    float dk[1][kD][4], dv[1][kD][4];
    zero(dk);
    zero(dv);
    float st[1][kNq][4], dpt[1][kNq][4], pd[1][kNq][4];
    std::uint32_t pa[1][kNq / 2][4], sa[1][kNq / 2][4];
    auto wait_full = [&](int x) {
        wgmma_wait_full<Tiles::kTma, kStages, Bar>(x, group, [&](int s) { return sm.full(s); });
    };
    wait_full(0);  // K, V and item 0
    wgmma_consume<kStages, kConsumers, Bar>(
        group, pl.items, kg0 < l.T ? pl.items : 0, wait_full,
        [&] { wgmma_issue_st_dpt<D, Tiles>(st, dpt, sm, group, 0); },
        [&](int it, int stage) {  // S^T, dP^T of item it + 1, then dV, dK of item it
            wgmma_issue_st_dpt<D, Tiles>(st, dpt, sm, group, stage);
            wgmma_issue_dv_dk<D, Tiles>(dv, dk, pa, sa, sm, it % kStages);
        },
        [&](int it) {  // P^T and dS^T of item it
            const float* const lse_s = sh.ptr<float>(sm.lse_at(it % kStages));
            wgmma_key_form(st, dpt, pd, lse_s, lse_s + kQ, kw0, pl.first_query<kQ>(it), b,
                           pl.head(l, it), l, drop);
        },
        [&](int) {
            pack_a<D>(pa, pd);
            pack_a<D>(sa, st);
        });
    wgmma_store_dk_dv<Tiles>(dqkv, dk, dv, kw0, b, kvh, l, drop);
}

template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_key_block(unsigned char* smem, D* dqkv,
                                                         const D* dout, const D* out, const D* qkv,
                                                         const float* lse, const MmaLayout& l,
                                                         const FlashDropout& drop,
                                                         const float* row_stats = nullptr,
                                                         const TmaMaps* maps = nullptr) {
    if constexpr (Tiles::kSpecialized)
        wgmma_backward_key_block_specialized<D, Tiles>(smem, dqkv, dout, qkv, l, drop, row_stats,
                                                       maps);
    else
        wgmma_backward_key_block_pipelined<D, Tiles>(smem, dqkv, dout, out, qkv, lse, l, drop,
                                                     row_stats);
}

}  // namespace napkin::cuda::fa2
