// The forward flash attention on Hopper's wgmma (sm_90a; docs/CUDA.md "wgmma (sm_90a)"): the
// mma.sync forward's algorithm (attention_fa2_forward.cuh) with its two products done by
// warpgroups from shared memory. Not yet the engine's: bench/attention_fa2_candidates.cu
// instantiates it as the candidates f64-wgmma, f128-wgmma and their -ov variants, which the sweep
// times against the engine's tiles and AttentionFa2Candidates.MatchCpu holds to the CPU. Not a
// public header.
//
// A block of kGroups warpgroups owns 64 kGroups queries of one (b, h) (the last query tiles
// first), 64 a warpgroup. Q is loaded once; K and V tiles of kBlockN keys stream through kStages
// stages (fa2::Pipeline, cp.async), all in the 128-byte-swizzled K-major layout wgmma reads
// (SwTile: for HD 128, two 64-column halves one after the other). Per key tile each warpgroup:
//   S = Q K^T     HD / 16 wgmma.mma_async m64n<kBlockN>k16, Q and K from shared memory
//                 (K-major both), one group, waited for
//   softmax       fa2::online_softmax on the accumulators: each warp's 16 rows are an mma.sync
//                 m-tile of kBlockN / 8 n-tiles, so the mma.sync kernels' code runs unchanged
//                 (causal mask, running max and sum, O's correction, dropout)
//   O += P V      kBlockN / 16 m64n<HD>k16 with P packed from S's accumulators into A
//                 registers (fa2::pack_a) and V from shared memory N-major (imm-trans-b)
// A warpgroup skips a key tile none of its rows sees. wgmma_forward_block_serial waits for each
// batch of products before the softmax runs; wgmma_forward_block_overlapped (Tiles::kOverlap)
// runs the softmax of tile j + 1 while O += P_j V_j is in flight (FlashAttention-3's
// intra-warpgroup pipelining; not yet its ping-pong of two warpgroups or a TMA producer warp).
// Out and lse as the mma.sync forward stores them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_fa2_forward.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/named_barrier.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace napkin::cuda::fa2 {

// kRows rows of kHD 16-bit elements as wgmma's K-major 128-byte-swizzled layout: 64-column
// halves of kRows x 128 bytes one after the other, chunk c of row r of a half at chunk
// c ^ (r % 8) of its 128-byte row. `at` must be a multiple of 1024 in the shared window.
template <int kRows, int kHD>
struct SwTile {
    static_assert(kHD == 64 || kHD == 128);
    static_assert(kRows % 8 == 0);
    static constexpr int kChunks = kHD / 8;
    static constexpr std::uint32_t kHalfBytes = kRows * 128;
    static constexpr std::uint32_t kBytes = kHalfBytes * (kHD / 64);
    std::uint32_t at;

    __device__ std::uint32_t chunk(int row, int c) const {
        return at + (c >> 3) * kHalfBytes + row * 128 + (((c & 7) ^ (row & 7)) << 4);
    }
    // The descriptor of rows row0 .. as a K-major operand at k-step ks (16 columns).
    __device__ std::uint64_t k_major(int row0, int ks) const {
        return wgmma::descriptor(at + (ks >> 2) * kHalfBytes + row0 * 128 + (ks & 3) * 32, 16, 1024,
                                 wgmma::Swizzle::k128);
    }
    // The descriptor of rows 16 kk .. 16 kk + 15 as an N-major B (k = rows, n = the kHD
    // columns: halves kHalfBytes apart).
    __device__ std::uint64_t n_major(int kk) const {
        return wgmma::descriptor(at + kk * 16 * 128, kHalfBytes, 1024, wgmma::Swizzle::k128);
    }
};

// The forward's tiles on wgmma: warpgroups a block, keys a tile, stages, whether a warpgroup's
// softmax overlaps its products (wgmma_forward_block_overlapped; 3 stages at least), whether
// a producer warpgroup loads the tiles for two ping-ponged consumer warpgroups
// (wgmma_forward_block_specialized; overlapped, 3 or 4 stages), and whether that producer loads
// them by TMA (one thread issues each tile's copies, which signal the stage's mbarrier) rather
// than by cp.async.
template <int HD, int Groups, int BlockN, int Stages, bool Overlap = false,
          bool Specialized = false, bool Tma = false>
struct WgmmaForwardTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    static_assert(BlockN == 64 || BlockN == 128);
    static_assert(Stages >= (Overlap ? 3 : 2));
    static_assert(!Specialized || (Groups == 2 && Overlap && Stages <= 4));
    static_assert(!Tma || Specialized);
    static constexpr int kHD = HD, kGroups = Groups, kBlockN = BlockN, kStages = Stages;
    static constexpr bool kOverlap = Overlap, kSpecialized = Specialized, kTma = Tma;
    // The consumer warpgroups' threads, then the producer's.
    static constexpr int kConsumers = 128 * Groups;
    static constexpr int kThreads = kConsumers + (Specialized ? 128 : 0);
    static constexpr int kBlockM = 64 * Groups, kMinBlocks = 1;
    // setmaxnreg's split of the 168 registers a thread of 384 (65536 a block): the producer's
    // and the consumers' (128 x 40 + 256 x 232 = 384 x 168; by TMA the producer keeps only a
    // loop and a thread's test: 128 x 24 + 256 x 240).
    static constexpr int kProducerRegs = Tma ? 24 : 40, kConsumerRegs = Tma ? 240 : 232;
    using QTile = SwTile<kBlockM, HD>;
    using KvTile = SwTile<BlockN, HD>;
    // Q, then kStages K and kStages V tiles, by TMA one 8-byte mbarrier a stage, and up to 1 KiB
    // to align the first to 1024 bytes.
    static constexpr std::size_t smem_bytes() {
        return 1024 + QTile::kBytes + 2 * static_cast<std::size_t>(kStages) * KvTile::kBytes +
               (Tma ? 8 * static_cast<std::size_t>(kStages) : 0);
    }
    // Shared-memory bytes per m16n8k16-sized product, comparable with the mma.sync tiles':
    // a warpgroup's m64nNk16 reads B (32 N bytes) once for its 4 warps' N / 2 such products, 64
    // bytes each, and in S also Q's A tile (2048 bytes: 4096 / kBlockN each); P V's A is in
    // registers. S and P V are equal in number.
    static constexpr double smem_read_per_mma() { return (64.0 + 4096.0 / BlockN + 64.0) / 2.0; }
};

// A block's shared memory: Q's tile, then kStages K and kStages V tiles, from `base`, the first
// multiple of 1024 bytes of its shared window.
template <class Tiles>
struct WgmmaSmem {
    using QTile = typename Tiles::QTile;
    using KvTile = typename Tiles::KvTile;
    std::uint32_t base;

    __device__ QTile q() const { return QTile{base}; }
    __device__ KvTile k(int stage) const {
        return KvTile{base + QTile::kBytes + stage * KvTile::kBytes};
    }
    __device__ KvTile v(int stage) const {
        return KvTile{base + QTile::kBytes + (Tiles::kStages + stage) * KvTile::kBytes};
    }
    // By TMA: the mbarrier of the stage's copies, after the tiles.
    __device__ std::uint32_t full(int stage) const {
        return base + QTile::kBytes + 2 * Tiles::kStages * KvTile::kBytes + 8 * stage;
    }
};

// The tensor maps a TMA kernel loads through (tma.cuh): qkv as (B, T, (NH + 2 KVH) HD) 16-bit
// elements, inner dimension first, in boxes of 64 columns (128 bytes, 128-byte swizzle) by a
// query block's rows (`q`) or a key tile's (`kv`); the backward's passes also dout, (B, T, NH HD)
// in the query block's boxes, and pass 1 the row statistics (`stats`: RowStatsLayout's floats
// as (B NH, 2, padded T), no swizzle, boxes of an item's lse then its D). Rows past T arrive as
// zeros.
struct TmaMaps {
    CUtensorMap q, kv, dout, stats;
};

// Host side: the maps of one call (dout's when given), boxes of q_rows and kv_rows rows; empty
// when made, else why not.
template <class D>
std::string make_tma_maps(TmaMaps* maps, const D* qkv, const MmaLayout& l, int q_rows, int kv_rows,
                          const D* dout = nullptr) {
    constexpr bool kBf16 = std::is_same_v<D, __nv_bfloat16>;
    auto encode = [&](CUtensorMap* map, const D* base, std::int64_t row, int rows) {
        const cuuint64_t dims[3] = {static_cast<cuuint64_t>(row), static_cast<cuuint64_t>(l.T),
                                    static_cast<cuuint64_t>(l.B)};
        const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row) * sizeof(D),
                                       static_cast<cuuint64_t>(row * l.T) * sizeof(D)};
        const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(rows), 1};
        return tma::encode_16bit_3d(map, kBf16, base, dims, strides, box);
    };
    std::string why = encode(&maps->q, qkv, l.qkv_row, q_rows);
    if (why.empty()) why = encode(&maps->kv, qkv, l.qkv_row, kv_rows);
    if (why.empty() && dout != nullptr) why = encode(&maps->dout, dout, l.out_row, q_rows);
    return why;
}

// The Tile of `rows` rows from row `row0` of batch b, columns col .. col + HD - 1, by TMA: one
// copy a 64-column half, each counted on `bar`.
template <class Tile>
__device__ __forceinline__ void tma_load_tile(const Tile& tile, const CUtensorMap& map, int col,
                                              std::int64_t row0, std::int64_t b,
                                              std::uint32_t bar) {
#pragma unroll
    for (int half = 0; half < Tile::kChunks / 8; ++half)
        tma::load_3d(tile.at + half * Tile::kHalfBytes, &map, col + 64 * half,
                     static_cast<int>(row0), static_cast<int>(b), bar);
}

// What both bodies start with: the block's (b, h) and key tiles, the thread's warpgroup, warp
// and lane, its warpgroup's and warp's first rows; Q's load issued and committed.
template <class Tiles>
struct WgmmaForwardStart {
    WgmmaSmem<Tiles> sm;
    QueryBlock block;
    int key_tiles, group, warp;
    std::int64_t g_first, g_last, w_first;  // the warpgroup's rows, the warp's first
};

// The block's place without any load (the warp-specialized body loads Q in its producer).
template <class Tiles>
__device__ WgmmaForwardStart<Tiles> wgmma_forward_place(unsigned char* smem, const MmaLayout& l) {
    constexpr int kRows = Tiles::kBlockM;
    const std::uint32_t window = shared_address(smem);
    WgmmaForwardStart<Tiles> st{};
    st.sm.base = (window + 1023u) & ~1023u;
    st.block = query_block(l, kRows);
    st.key_tiles = causal_key_tiles<Tiles::kBlockN>(l, st.block.i0, kRows);
    st.group = static_cast<int>(threadIdx.x) / 128;
    st.warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    st.g_first = st.block.i0 + 64 * st.group;
    st.g_last = st.g_first + 63;
    st.w_first = st.g_first + 16 * st.warp;
    return st;
}

// Q's rows of the block into its tile by kThreads threads, `thread` this one's rank among them.
template <class Tiles, int kThreads, class D>
__device__ void wgmma_load_q(const WgmmaForwardStart<Tiles>& st, const D* qkv, const MmaLayout& l,
                             int thread) {
    load_rows<Tiles::kBlockM, kThreads>(st.sm.q(),
                                        qkv + st.block.h * static_cast<std::int64_t>(l.HD),
                                        l.qkv_row, st.block.b, l.T, st.block.i0, thread);
}

template <class Tiles, class D>
__device__ WgmmaForwardStart<Tiles> wgmma_forward_start(unsigned char* smem, const D* qkv,
                                                        const MmaLayout& l) {
    const WgmmaForwardStart<Tiles> st = wgmma_forward_place<Tiles>(smem, l);
    wgmma_load_q<Tiles, Tiles::kThreads>(st, qkv, l, static_cast<int>(threadIdx.x));
    cp_async_commit();
    return st;
}

// The K and V tiles' pipeline (fa2::Pipeline): item x is the block's cp.async group x + 1.
template <class Tiles, class D>
__device__ auto wgmma_kv_pipeline(const WgmmaForwardStart<Tiles>& st, const D* qkv,
                                  const MmaLayout& l) {
    const WgmmaSmem<Tiles> sm = st.sm;
    return kv_pipeline<Tiles::kStages, Tiles::kBlockN, Tiles::kThreads>(
        [sm](int s) { return sm.k(s); }, [sm](int s) { return sm.v(s); }, qkv, l, st.block.b,
        st.block.kvh, st.key_tiles);
}

// Each batch of products waited for before the softmax runs.
template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block_serial(unsigned char* smem, D* out, float* lse,
                                                           const D* qkv, const MmaLayout& l,
                                                           const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kStages = Tiles::kStages, kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8;  // S's and O's n-tiles a warp
    const WgmmaForwardStart<Tiles> st = wgmma_forward_start<Tiles>(smem, qkv, l);
    auto kv = wgmma_kv_pipeline(st, qkv, l);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q: the oldest group
    // cp.async writes through the generic proxy: fenced for wgmma's reads.
    wgmma::fence_proxy_async();
    __syncthreads();

    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    float o[1][kD][4];
    zero(o);
    float mx[1][2] = {{-INFINITY, -INFINITY}}, sum[1][2] = {{0.0f, 0.0f}};

    for (int it = 0; it < st.key_tiles; ++it) {
        const int stage = kv.next(it);
        wgmma::fence_proxy_async();  // this thread's copies of the tile, for the products
        __syncthreads();
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (st.g_first >= l.T || j0 > st.g_last) continue;  // nothing the warpgroup's rows see
        float s[1][kN][4];
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                             st.sm.q().k_major(64 * st.group, ks),
                                             st.sm.k(stage).k_major(0, ks), ks > 0);
        wgmma::commit();
        wgmma::wait<0>();
        online_softmax<kDropout>(s, o, mx, sum, st.w_first, j0, j0 + kBlockN - 1 > st.w_first,
                                 l.row(b, h, 0), l, drop);
        std::uint32_t p[1][kN / 2][4];
        pack_a<D>(p, s);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
            wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(o), p[0][kk],
                                        st.sm.v(stage).n_major(kk), true);
        wgmma::commit();
        wgmma::wait<0>();
    }
    store_forward_rows<kDropout>(out, lse, o, mx, sum, st.w_first, b, h, l, drop);
}

// S = Q K^T of the warpgroup's rows against the K tile in `stage`, issued and committed as one
// group (the overlapped bodies'; the caller fences).
template <class D, class Tiles>
__device__ __forceinline__ void wgmma_issue_s(float (&s)[1][Tiles::kBlockN / 8][4],
                                              const WgmmaForwardStart<Tiles>& st, int stage) {
    constexpr int kBlockN = Tiles::kBlockN;
#pragma unroll
    for (int ks = 0; ks < Tiles::kHD / 16; ++ks)
        wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                         st.sm.q().k_major(64 * st.group, ks),
                                         st.sm.k(stage).k_major(0, ks), ks > 0);
    wgmma::commit();
}

// The online softmax of key tile `it`'s scores in s, O's row factors into corr (the overlapped
// bodies': O is corrected after the wait for its running product).
template <bool kDropout, class Tiles>
__device__ __forceinline__ void wgmma_softmax(float (&s)[1][Tiles::kBlockN / 8][4],
                                              float (&corr)[1][2], float (&mx)[1][2],
                                              float (&sum)[1][2],
                                              const WgmmaForwardStart<Tiles>& st, int it,
                                              std::int64_t p_row0, const MmaLayout& l,
                                              const FlashDropout& drop) {
    const std::int64_t j0 = static_cast<std::int64_t>(it) * Tiles::kBlockN;
    softmax_tile<kDropout>(s, corr, mx, sum, st.w_first, j0, j0 + Tiles::kBlockN - 1 > st.w_first,
                           p_row0, l, drop);
}

// The warpgroup's products overlap its softmax (FlashAttention-3's intra-warpgroup pipelining):
// while O += P_j V_j runs, S_{j+1} = Q K_{j+1}^T has been issued before it and its softmax runs
// as soon as it lands; O takes that softmax's correction once P_j V_j is waited for, and P_{j+1}
// is packed then (P_j's registers are the running product's until its wait). So tile j + 1's K
// must have landed while tile j's V is still read: item j + 1 is waited for at iteration j, and
// the stage that takes a new item is that of item j - 1, which every warpgroup has finished
// (the barrier). Hence kStages >= 3: kStages - 3 items in flight beyond the next.
template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block_overlapped(unsigned char* smem, D* out,
                                                               float* lse, const D* qkv,
                                                               const MmaLayout& l,
                                                               const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kStages = Tiles::kStages, kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8;
    const WgmmaForwardStart<Tiles> st = wgmma_forward_start<Tiles>(smem, qkv, l);
    auto kv = wgmma_kv_pipeline(st, qkv, l);
    kv.prologue();
    cp_async_wait<kStages - 2>();  // Q and item 0
    wgmma::fence_proxy_async();
    __syncthreads();

    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    const int visible =
        st.g_first >= l.T ? 0 : min(st.key_tiles, static_cast<int>(st.g_last / kBlockN) + 1);
    const std::int64_t p_row0 = l.row(b, h, 0);
    float o[1][kD][4];
    zero(o);
    float mx[1][2] = {{-INFINITY, -INFINITY}}, sum[1][2] = {{0.0f, 0.0f}}, corr[1][2];
    float s[1][kN][4];
    std::uint32_t p[1][kN / 2][4];
    auto issue_s = [&](int it) { wgmma_issue_s<D>(s, st, it % kStages); };
    auto softmax = [&](int it) {
        wgmma_softmax<kDropout>(s, corr, mx, sum, st, it, p_row0, l, drop);
    };
    if (visible > 0) {
        wgmma::fence();
        issue_s(0);
        wgmma::wait<0>();
        softmax(0);  // O is zero: no correction
        pack_a<D>(p, s);
    }
    for (int it = 0; it < st.key_tiles; ++it) {
        cp_async_wait<kStages - 3>();  // item it + 1; every warpgroup is done with item it - 1
        wgmma::fence_proxy_async();
        __syncthreads();
        kv.issue(it + kStages - 1);  // into item it - 1's stage
        if (it >= visible) continue;
        // S_{it+1} is issued even past the warpgroup's last tile (a stale stage's product, never
        // read): wgmma on one path only would make ptxas serialize every product (C7520).
        const bool more = it + 1 < visible;
        wgmma::fence();
        issue_s(it + 1);
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
            wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(o), p[0][kk],
                                        st.sm.v(it % kStages).n_major(kk), true);
        wgmma::commit();
        wgmma::wait<1>();  // S_{it+1}; P_it V_it may still run
        if (more) softmax(it + 1);
        wgmma::wait<0>();
        if (more) {
            correct_rows(o, corr);
            pack_a<D>(p, s);
        }
    }
    store_forward_rows<kDropout>(out, lse, o, mx, sum, st.w_first, b, h, l, drop);
}

// The named barriers of the warp-specialized forward (named_barrier.cuh): per stage s one
// "full" barrier per consumer warpgroup g (the producer's 128 threads arrive once the stage's
// tile has landed, the warpgroup's 128 wait: 256), one "empty" barrier (the consumers' 256 arrive
// when done with the stage, the producer's 128 wait before loading into it: 384), and one
// scheduling barrier per consumer warpgroup (it waits for its turn there, the other warpgroup
// arrives when its turn is over: 256).
template <int kStages>
struct WgmmaPingPongBarriers {
    static_assert(3 * kStages + 2 <= 15, "barriers 1 to 15");
    __device__ static constexpr int full(int stage, int group) { return 1 + 2 * stage + group; }
    __device__ static constexpr int empty(int stage) { return 1 + 2 * kStages + stage; }
    __device__ static constexpr int turn(int group) { return 1 + 3 * kStages + group; }
};

// The producer warpgroup of a warp-specialized block (its 128 threads): `first()` loads what the
// consumers read throughout into the first group with item 0, then the block's kt items stream
// through kStages stages (`load(x, stage)` loads item x): items 0 .. kStages - 2 at once, then at
// step x it waits for item x, fences it for the async proxy, arrives at both consumers'
// full(x) and, if item x + kStages - 1 exists, waits for empty(x - 1) (x >= 1) and loads it
// into that stage. One commit a step.
template <int kStages, int kConsumers, class Bar, class First, class Load>
__device__ __forceinline__ void wgmma_produce_items(int kt, First first, Load load) {
    constexpr int kProducer = 128;
    first();
#pragma unroll
    for (int x = 0; x < kStages - 1; ++x) {
        if (x < kt) load(x, x);
        cp_async_commit();
    }
    for (int x = 0; x < kt; ++x) {
        cp_async_wait<kStages - 2>();  // item x (and what first() loaded)
        wgmma::fence_proxy_async();
        bar_arrive(Bar::full(x % kStages, 0), kProducer + 128);
        bar_arrive(Bar::full(x % kStages, 1), kProducer + 128);
        const int y = x + kStages - 1;
        if (y < kt) {
            if (x >= 1) bar_sync(Bar::empty((x - 1) % kStages), kProducer + kConsumers);
            load(y, y % kStages);
        }
        cp_async_commit();
    }
}

// The producer of the forward and the dq pass (`thread`: its rank among the 128): `first()` loads
// Q (and dout in the dq pass) with key tile 0, then the K and V tiles of the block's kt stream
// through the stages (wgmma_produce_items).
template <class Tiles, class D, int kStages, class Bar, class First, class KTile, class VTile>
__device__ __forceinline__ void wgmma_produce(const QueryBlock& block, int kt, const D* qkv,
                                              const MmaLayout& l, int thread, First first,
                                              KTile k_tile, VTile v_tile) {
    constexpr int kProducer = 128, kBlockN = Tiles::kBlockN;
    using KvTile = typename Tiles::KvTile;
    const std::int64_t hd = l.HD, stride = l.qkv_row;
    const D* k_src = qkv + (l.NH + block.kvh) * hd;
    const D* v_src = qkv + (l.NH + l.KVH + block.kvh) * hd;
    wgmma_produce_items<kStages, Tiles::kConsumers, Bar>(kt, first, [&](int x, int stage) {
        const std::int64_t j0 = static_cast<std::int64_t>(x) * kBlockN;
        // Two copies unrolled: all of them would take more than the producer's registers.
        load_rows<kBlockN, kProducer, KvTile, D, 2>(k_tile(stage), k_src, stride, block.b, l.T, j0,
                                                    thread);
        load_rows<kBlockN, kProducer, KvTile, D, 2>(v_tile(stage), v_src, stride, block.b, l.T, j0,
                                                    thread);
    });
}

// A producer warpgroup by TMA (`thread`: its rank among the 128): item x goes into stage
// x % kStages once the consumers are done with item x - kStages there (its empty barrier, which
// all 128 wait at); thread 0 announces the item's `bytes(x)` on the stage's mbarrier
// (`full(stage)`) and issues its copies (`load(x, stage, bar)`), which complete phase
// x / kStages of it. The consumers wait on the mbarrier with that phase's parity. All kStages
// stages are in flight.
template <int kStages, int kConsumers, class Bar, class Full, class Bytes, class Load>
__device__ __forceinline__ void wgmma_produce_items_tma(int kt, int thread, Full full, Bytes bytes,
                                                        Load load) {
    constexpr int kProducer = 128;
    for (int x = 0; x < kt; ++x) {
        const int stage = x % kStages;
        if (x >= kStages) bar_sync(Bar::empty(stage), kProducer + kConsumers);
        if (thread != 0) continue;
        const std::uint32_t bar = full(stage);
        tma::arrive_expect_tx(bar, bytes(x));
        load(x, stage, bar);
    }
}

// The mbarriers of a TMA block's stages set up (by thread `first`, one arrival a phase: the
// producer's), before the roles part; the whole block passes the barrier after.
template <int kStages, class Full>
__device__ __forceinline__ void tma_init_stages(int first, Full full) {
    if (static_cast<int>(threadIdx.x) == first) {
        for (int s = 0; s < kStages; ++s)
            tma::init(full(s), 1);
        tma::fence_init();
    }
    __syncthreads();
}

// The TMA producer of the forward and the dq pass (as wgmma_produce): item x is key tile x's K
// and V of the block's kv head, into k_tile(stage) and v_tile(stage); with item 0, `first(bar)`
// issues the copies of what the consumers read throughout (Q, and dout in the dq pass), whose
// `first_bytes` item 0's announcement counts too.
template <class Tiles, class Bar, class Full, class First, class KTile, class VTile>
__device__ __forceinline__ void wgmma_produce_tma(const QueryBlock& block, int kt,
                                                  const MmaLayout& l, int thread,
                                                  const TmaMaps& maps, Full full,
                                                  std::uint32_t first_bytes, First first,
                                                  KTile k_tile, VTile v_tile) {
    constexpr std::uint32_t kKv = 2 * Tiles::KvTile::kBytes;
    const int k_col = (l.NH + block.kvh) * l.HD, v_col = (l.NH + l.KVH + block.kvh) * l.HD;
    wgmma_produce_items_tma<Tiles::kStages, Tiles::kConsumers, Bar>(
        kt, thread, full, [&](int x) { return x == 0 ? first_bytes + kKv : kKv; },
        [&](int x, int stage, std::uint32_t bar) {
            if (x == 0) first(bar);
            const std::int64_t j0 = static_cast<std::int64_t>(x) * Tiles::kBlockN;
            tma_load_tile(k_tile(stage), maps.kv, k_col, j0, block.b, bar);
            tma_load_tile(v_tile(stage), maps.kv, v_col, j0, block.b, bar);
        });
}

// A consumer's wait for item x of a warp-specialized block: by TMA the phase x / kStages of the
// stage's mbarrier (`full(stage)`), else warpgroup g's named full barrier of the stage.
template <bool kTma, int kStages, class Bar, class Full>
__device__ __forceinline__ void wgmma_wait_full(int x, int g, Full full) {
    if constexpr (kTma)
        tma::wait(full(x % kStages), static_cast<std::uint32_t>(x / kStages) & 1u);
    else
        bar_sync(Bar::full(x % kStages, g), 128 + 128);  // the producer's and the warpgroup's
}

// A consumer warpgroup's side of the warp-specialized schedule, after tile 0's full barrier
// (`wait_full(x)` waits for item x: its named full barrier, or its TMA copies' mbarrier):
// turn 0 issues tile 0's first products (`first()`, S; only if `visible` > 0), turn it + 1 the
// next tile's first products with this tile's last (`issue(it, stage)`: the first products from
// `stage`, tile it + 1's, or tile it's past the last); between the waits `mid(it + 1)` works on
// tile it + 1's first products while this tile's last run, and after them `end(it + 1)` (both
// only when tile it + 1 is visible; after turn 0, mid and end of tile 0). Each warpgroup waits
// for its turn and arrives at the other's once its products are issued; the last turn's arrival
// is left out, and a stage is released after the wait that retires its last product when the
// producer loads it again. The waits stay off any branch of their own (ptxas's C7518).
template <int kStages, int kConsumers, class Bar, class WaitFull, class First, class Issue,
          class Mid, class End>
__device__ __forceinline__ void wgmma_consume(int g, int kt, int visible, WaitFull wait_full,
                                              First first, Issue issue, Mid mid, End end) {
    constexpr int kProducer = 128, kPair = 2 * 128;  // a turn: one warpgroup waits, one arrives
    if (g == 1) bar_arrive(Bar::turn(0), kPair);     // warpgroup 0 takes the first turn
    bar_sync(Bar::turn(g), kPair);
    if (visible > 0) {
        wgmma::fence();
        first();
    }
    bar_arrive(Bar::turn(1 - g), kPair);
    wgmma::wait<0>();
    if (visible > 0) {
        mid(0);
        end(0);
    }
    for (int it = 0; it < kt; ++it) {
        const bool more = it + 1 < kt;
        if (more) wait_full(it + 1);
        bar_sync(Bar::turn(g), kPair);
        const bool free_stage = it + kStages < kt;  // the producer loads into it again
        if (it >= visible) {  // nothing the warpgroup's rows see: the turn and the stage pass on
            if (g == 0 || more) bar_arrive(Bar::turn(1 - g), kPair);
            if (free_stage) bar_arrive(Bar::empty(it % kStages), kProducer + kConsumers);
            continue;
        }
        wgmma::fence();
        issue(it, (more ? it + 1 : it) % kStages);
        if (g == 0 || more) bar_arrive(Bar::turn(1 - g), kPair);
        const bool next = it + 1 < visible;
        wgmma::wait<1>();  // tile it + 1's first products; tile it's last may still run
        if (next) mid(it + 1);
        wgmma::wait<0>();
        if (next) end(it + 1);
        if (free_stage) bar_arrive(Bar::empty(it % kStages), kProducer + kConsumers);
    }
}

// The overlapped forward with FlashAttention-3's warp specialization and ping-pong: a producer
// warpgroup (the block's third) cp.asyncs Q and the K and V tiles into kStages stages and hands
// each to the consumers through named barriers, so the consumers never wait for the whole block;
// the two consumer warpgroups take turns to issue their products (S_{j+1} and P_j V_j), each
// arriving at the other's turn barrier once issued, so one warpgroup's softmax runs while the
// other's products do. The producer keeps 40 registers a thread, the consumers take 232
// (setmaxnreg). Both consumers take a turn at every key tile of the block, issuing nothing at a
// tile none of their rows sees, so that the turns alternate to the end; the last turn's arrival is
// left out (nobody waits for it). A stage's empty arrival is made only for a tile whose stage
// takes another, so every barrier ends counting from zero.
//
// Turns and stages, for consumer g and item (key tile) x of the block's kt:
//   producer: items 0 .. kStages - 2 (Q with item 0), then at step x: wait for item x, fence,
//             arrive full(x, 0) and full(x, 1); if x + kStages - 1 < kt: wait empty(x - 1)
//             (x >= 1), load item x + kStages - 1 into that stage. One commit a step.
//   consumer: turn 0: full(0, g), S_0; turn x + 1 (x < kt): full(x + 1, g) if it exists, S_{x+1}
//             (K_{x+1}, or K_x when x is the last: never read) and P_x V_x; its softmax of
//             S_{x+1} under P_x V_x as wgmma_forward_block_overlapped; then empty(x) if
//             x + kStages < kt.
//
// By TMA (Tiles::kTma; `maps` the call's, tma.cuh) the producer's thread 0 copies each item into
// its stage and the consumers wait on the stage's mbarrier instead of its full barriers
// (wgmma_produce_tma); the rest is the same.
template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block_specialized(unsigned char* smem, D* out,
                                                                float* lse, const D* qkv,
                                                                const MmaLayout& l,
                                                                const FlashDropout& drop,
                                                                const TmaMaps* maps) {
    constexpr int kHD = Tiles::kHD, kStages = Tiles::kStages, kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8;
    constexpr int kProducer = 128, kConsumers = Tiles::kConsumers;
    using Bar = WgmmaPingPongBarriers<kStages>;
    WgmmaForwardStart<Tiles> st = wgmma_forward_place<Tiles>(smem, l);
    // The warpgroup as a value ptxas knows to be warp-uniform (a shuffle's): else it takes the
    // roles' branches as divergent and serializes every wgmma (its C7518 note).
    st.group = __shfl_sync(0xffffffffu, st.group, 0);
    const int kt = st.key_tiles;
    if constexpr (Tiles::kTma)
        tma_init_stages<kStages>(kConsumers, [&](int s) { return st.sm.full(s); });

    if (st.group == Tiles::kGroups) {  // the producer warpgroup
        wgmma::release_registers<Tiles::kProducerRegs>();
        const int thread = static_cast<int>(threadIdx.x) - kConsumers;
        if constexpr (Tiles::kTma)
            wgmma_produce_tma<Tiles, Bar>(
                st.block, kt, l, thread, *maps, [&](int s) { return st.sm.full(s); },
                Tiles::QTile::kBytes,
                [&](std::uint32_t bar) {
                    tma_load_tile(st.sm.q(), maps->q, st.block.h * l.HD, st.block.i0, st.block.b,
                                  bar);
                },
                [&](int s) { return st.sm.k(s); }, [&](int s) { return st.sm.v(s); });
        else
            wgmma_produce<Tiles, D, kStages, Bar>(
                st.block, st.key_tiles, qkv, l, thread,
                [&] { wgmma_load_q<Tiles, kProducer>(st, qkv, l, thread); },
                [&](int s) { return st.sm.k(s); }, [&](int s) { return st.sm.v(s); });
        return;
    }

    wgmma::claim_registers<Tiles::kConsumerRegs>();
    const int g = st.group;
    const std::int64_t b = st.block.b;
    const int h = st.block.h;
    const int visible = st.g_first >= l.T ? 0 : min(kt, static_cast<int>(st.g_last / kBlockN) + 1);
    const std::int64_t p_row0 = l.row(b, h, 0);
    float o[1][kD][4];
    zero(o);
    float mx[1][2] = {{-INFINITY, -INFINITY}}, sum[1][2] = {{0.0f, 0.0f}}, corr[1][2];
    float s[1][kN][4];
    std::uint32_t p[1][kN / 2][4];
    auto issue_s = [&](int stage) { wgmma_issue_s<D>(s, st, stage); };
    auto softmax = [&](int it) {
        wgmma_softmax<kDropout>(s, corr, mx, sum, st, it, p_row0, l, drop);
    };
    auto wait_full = [&](int x) {
        wgmma_wait_full<Tiles::kTma, kStages, Bar>(x, g, [&](int i) { return st.sm.full(i); });
    };
    wait_full(0);
    wgmma_consume<kStages, kConsumers, Bar>(
        g, kt, visible, wait_full, [&] { issue_s(0); },
        [&](int it, int stage) {  // S_{it+1}, then O += P_it V_it
            issue_s(stage);
#pragma unroll
            for (int kk = 0; kk < kBlockN / 16; ++kk)
                wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(o), p[0][kk],
                                            st.sm.v(it % kStages).n_major(kk), true);
            wgmma::commit();
        },
        [&](int it) { softmax(it); },
        [&](int it) {
            if (it > 0) correct_rows(o, corr);  // O is zero before tile 0
            pack_a<D>(p, s);
        });
    store_forward_rows<kDropout>(out, lse, o, mx, sum, st.w_first, b, h, l, drop);
}

// `maps`: the call's tensor maps when Tiles::kTma (make_tma_maps), else unused.
template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block(unsigned char* smem, D* out, float* lse,
                                                    const D* qkv, const MmaLayout& l,
                                                    const FlashDropout& drop,
                                                    const TmaMaps* maps = nullptr) {
    if constexpr (Tiles::kSpecialized)
        wgmma_forward_block_specialized<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop, maps);
    else if constexpr (Tiles::kOverlap)
        wgmma_forward_block_overlapped<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
    else
        wgmma_forward_block_serial<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
}

}  // namespace napkin::cuda::fa2
