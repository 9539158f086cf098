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

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_fa2_forward.cuh"
#include "kernels/cuda/attention_mma.cuh"
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

// The forward's tiles on wgmma: warpgroups a block, keys a tile, stages, and whether a
// warpgroup's softmax overlaps its products (wgmma_forward_block_overlapped; 3 stages at least).
template <int HD, int Groups, int BlockN, int Stages, bool Overlap = false>
struct WgmmaForwardTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    static_assert(BlockN == 64 || BlockN == 128);
    static_assert(Stages >= (Overlap ? 3 : 2));
    static constexpr int kHD = HD, kGroups = Groups, kBlockN = BlockN, kStages = Stages;
    static constexpr bool kOverlap = Overlap;
    static constexpr int kThreads = 128 * Groups, kBlockM = 64 * Groups, kMinBlocks = 1;
    static constexpr int kWarps = 4 * Groups;
    using QTile = SwTile<kBlockM, HD>;
    using KvTile = SwTile<BlockN, HD>;
    // Q, then kStages K and kStages V tiles, and up to 1 KiB to align the first to 1024 bytes.
    static constexpr std::size_t smem_bytes() {
        return 1024 + QTile::kBytes + 2 * static_cast<std::size_t>(kStages) * KvTile::kBytes;
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
};

// What both bodies start with: the block's (b, h) and key tiles, the thread's warpgroup, warp
// and lane, its warpgroup's and warp's first rows; Q's load issued and committed.
template <class Tiles>
struct WgmmaForwardStart {
    WgmmaSmem<Tiles> sm;
    QueryBlock block;
    int key_tiles, group, warp;
    std::int64_t g_first, g_last, w_first;  // the warpgroup's rows, the warp's first
};

template <class Tiles, class D>
__device__ WgmmaForwardStart<Tiles> wgmma_forward_start(unsigned char* smem, const D* qkv,
                                                        const MmaLayout& l) {
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
    load_rows<kRows, Tiles::kThreads>(st.sm.q(), qkv + st.block.h * static_cast<std::int64_t>(l.HD),
                                      l.qkv_row, st.block.b, l.T, st.block.i0);
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
    auto issue_s = [&](int it) {
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                             st.sm.q().k_major(64 * st.group, ks),
                                             st.sm.k(it % kStages).k_major(0, ks), ks > 0);
        wgmma::commit();
    };
    auto softmax = [&](int it) {
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        softmax_tile<kDropout>(s, corr, mx, sum, st.w_first, j0, j0 + kBlockN - 1 > st.w_first,
                               p_row0, l, drop);
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

template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block(unsigned char* smem, D* out, float* lse,
                                                    const D* qkv, const MmaLayout& l,
                                                    const FlashDropout& drop) {
    if constexpr (Tiles::kOverlap)
        wgmma_forward_block_overlapped<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
    else
        wgmma_forward_block_serial<D, Tiles, kDropout>(smem, out, lse, qkv, l, drop);
}

}  // namespace napkin::cuda::fa2
