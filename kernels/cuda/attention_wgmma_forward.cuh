// The forward flash attention on Hopper's wgmma (sm_90a; docs/CUDA.md "wgmma (sm_90a)"): the
// mma.sync forward's algorithm (attention_fa2_forward.cuh) with its two products done by
// warpgroups from shared memory. Not yet the engine's: bench/attention_fa2_candidates.cu
// instantiates it as the candidates f64-wgmma and f128-wgmma, which the sweep times against the
// engine's tiles and AttentionFa2Candidates.MatchCpu holds to the CPU. Not a public header.
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
// A warpgroup skips a key tile none of its rows sees; the products are issued and waited for
// one batch at a time (no overlap of softmax and products yet: FlashAttention-3's ping-pong of
// two warpgroups is the next step). Out and lse as the mma.sync forward stores them.
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

// The forward's tiles on wgmma: warpgroups a block, keys a tile, stages.
template <int HD, int Groups, int BlockN, int Stages>
struct WgmmaForwardTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    static_assert(BlockN == 64 || BlockN == 128);
    static_assert(Stages >= 2);
    static constexpr int kHD = HD, kGroups = Groups, kBlockN = BlockN, kStages = Stages;
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

template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void wgmma_forward_block(unsigned char* smem, D* out, float* lse,
                                                    const D* qkv, const MmaLayout& l,
                                                    const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads, kRows = Tiles::kBlockM;
    constexpr int kStages = Tiles::kStages, kBlockN = Tiles::kBlockN;
    constexpr int kN = kBlockN / 8, kD = kHD / 8;  // S's and O's n-tiles a warp
    using QTile = typename Tiles::QTile;
    using KvTile = typename Tiles::KvTile;
    // The tiles from the first multiple of 1024 bytes of the shared window.
    const std::uint32_t window = shared_address(smem);
    const std::uint32_t base = (window + 1023u) & ~1023u;
    const QTile q{base};
    auto k_tile = [=](int s) { return KvTile{base + QTile::kBytes + s * KvTile::kBytes}; };
    auto v_tile = [=](int s) {
        return KvTile{base + QTile::kBytes + (kStages + s) * KvTile::kBytes};
    };
    const int group = static_cast<int>(threadIdx.x) / 128;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const QueryBlock block = query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = causal_key_tiles<kBlockN>(l, i0, kRows);

    const std::int64_t hd = l.HD;
    load_rows<kRows, kThreads>(q, qkv + h * hd, l.qkv_row, b, l.T, i0);
    cp_async_commit();
    auto kv = kv_pipeline<kStages, kBlockN, kThreads>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q: the oldest group
    // cp.async writes through the generic proxy: fenced for wgmma's reads (the pipeline's
    // barrier in next() follows).
    wgmma::fence_proxy_async();
    __syncthreads();

    const std::int64_t g_first = i0 + 64 * group, g_last = g_first + 63;  // the warpgroup's rows
    const std::int64_t w_first = g_first + 16 * warp;                     // the warp's
    float o[1][kD][4];
    zero(o);
    float mx[1][2] = {{-INFINITY, -INFINITY}}, sum[1][2] = {{0.0f, 0.0f}};

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        wgmma::fence_proxy_async();  // this thread's copies of the tile, for the products
        __syncthreads();
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (g_first >= l.T || j0 > g_last) continue;  // nothing the warpgroup's rows see
        float s[1][kN][4];
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                             q.k_major(64 * group, ks),
                                             k_tile(stage).k_major(0, ks), ks > 0);
        wgmma::commit();
        wgmma::wait<0>();
        online_softmax<kDropout>(s, o, mx, sum, w_first, j0, j0 + kBlockN - 1 > w_first,
                                 l.row(b, h, 0), l, drop);
        std::uint32_t p[1][kN / 2][4];
        pack_a<D>(p, s);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
            wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(o), p[0][kk],
                                        v_tile(stage).n_major(kk), true);
        wgmma::commit();
        wgmma::wait<0>();
    }

    for_each_row<1>([&](int m, int hh) {
        const float total = quad_sum(sum[m][hh]);  // >= 1 for a row that saw a key
        const std::int64_t i = w_first + g + 8 * hh;
        if (i >= l.T) return;
        if (t == 0) lse[l.row(b, h, i)] = (mx[m][hh] + log2f(total)) * mma_detail::kLn2;
        store_row(out + l.o(b, i, h), o, m, hh, (kDropout ? drop.scale : 1.0f) / total, false);
    });
}

}  // namespace napkin::cuda::fa2
