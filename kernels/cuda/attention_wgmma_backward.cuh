// The backward's dq pass on Hopper's wgmma (sm_90a; docs/CUDA.md "wgmma (sm_90a)"): the mma.sync
// backward's pass 2 (attention_fa2_backward.cuh, backward_query_block) with its three products on
// warpgroups. Not the engine's: bench/attention_fa2_candidates.cu pairs it with the engine's
// mma.sync key pass as the candidates b64-wgmma-q and b128-wgmma-q. Not a public header.
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

// The dq pass's tiles on wgmma: warpgroups a block, keys a tile, stages.
template <int HD, int Groups, int BlockN, int Stages>
struct WgmmaQueryTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(Groups == 1 || Groups == 2);
    static_assert(BlockN == 64 || BlockN == 128);
    static_assert(Stages >= 2);
    static constexpr int kHD = HD, kGroups = Groups, kBlockN = BlockN, kStages = Stages;
    static constexpr int kThreads = 128 * Groups, kQueries = 64 * Groups, kMinBlocks = 1;
    using QTile = SwTile<kQueries, HD>;  // Q, and dout
    using KvTile = SwTile<BlockN, HD>;
    // Q and dout, then per stage K and V, and up to 1 KiB to align the first to 1024 bytes.
    static constexpr std::size_t smem_bytes() {
        return 1024 + 2 * QTile::kBytes + 2 * static_cast<std::size_t>(kStages) * KvTile::kBytes;
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

template <class D, class Tiles>
__device__ __forceinline__ void wgmma_backward_query_block(unsigned char* smem, D* dqkv,
                                                           const D* dout, const D* out,
                                                           const D* qkv, const float* lse,
                                                           const MmaLayout& l,
                                                           const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads, kRows = Tiles::kQueries;
    constexpr int kBlockN = Tiles::kBlockN, kStages = Tiles::kStages;
    constexpr int kN = kBlockN / 8, kD = kHD / 8;
    using QTile = typename Tiles::QTile;
    using KvTile = typename Tiles::KvTile;
    const std::uint32_t window = shared_address(smem);
    const Shared sh{smem, window};
    const std::uint32_t base = (window + 1023u) & ~1023u;
    const QTile qs{base}, gos{base + QTile::kBytes};
    const std::uint32_t stages = base + 2 * QTile::kBytes;
    auto k_tile = [=](int s) { return KvTile{stages + (2 * s) * KvTile::kBytes}; };
    auto v_tile = [=](int s) { return KvTile{stages + (2 * s + 1) * KvTile::kBytes}; };

    const int group = static_cast<int>(threadIdx.x) / 128;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize % 4;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2;
    const std::int64_t hd = l.HD;
    const QueryBlock block = query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = causal_key_tiles<kBlockN>(l, i0, kRows);
    load_rows<kRows, kThreads>(qs, qkv + h * hd, l.qkv_row, b, l.T, i0);
    load_rows<kRows, kThreads>(gos, dout + h * hd, l.out_row, b, l.T, i0);
    cp_async_commit();
    auto kv = kv_pipeline<kStages, kBlockN, kThreads>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q and dout: the oldest group
    wgmma::fence_proxy_async();
    __syncthreads();

    const int w_row0 = 64 * group + 16 * warp;  // the warp's rows, from i0
    const std::int64_t w_first = i0 + w_row0;
    const std::int64_t g_first = i0 + 64 * group, g_last = g_first + 63;
    // D and lse log2(e) of the lane's rows g, g + 8: two lanes per row, each half of dout
    // (shared memory) . out (global), then gathered by shuffles.
    float d_row[1][2], lse_row[1][2];
    {
        const int r = w_row0 + lane / 2, half = lane % 2;
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
            d_row[0][hh] = __shfl_sync(0xffffffffu, dot, 2 * (g + 8 * hh));
            const std::int64_t row = w_first + g + 8 * hh;
            lse_row[0][hh] = row < l.T ? lse[l.row(b, h, row)] * mma_detail::kLog2e : INFINITY;
        }
    }
    float dq[1][kD][4];
    zero(dq);

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        wgmma::fence_proxy_async();  // this thread's copies of the tile, for the products
        __syncthreads();
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (g_first >= l.T || j0 > g_last) continue;  // nothing the warpgroup's rows see
        float s[1][kN][4], dp[1][kN][4];
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(s),
                                             qs.k_major(64 * group, ks),
                                             k_tile(stage).k_major(0, ks), ks > 0);
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            wgmma::mma_ss<D, kBlockN, false>(reinterpret_cast<float(&)[kBlockN / 2]>(dp),
                                             gos.k_major(64 * group, ks),
                                             v_tile(stage).k_major(0, ks), ks > 0);
        wgmma::commit();
        wgmma::wait<0>();
        wgmma_query_ds(s, dp, d_row, lse_row, w_first, j0, b, h, l, drop);
        std::uint32_t dsa[1][kN / 2][4];
        pack_a<D>(dsa, s);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
            wgmma::mma_rs<D, kHD, true>(reinterpret_cast<float(&)[kHD / 2]>(dq), dsa[0][kk],
                                        k_tile(stage).n_major(kk), true);
        wgmma::commit();
        wgmma::wait<0>();
    }

#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const std::int64_t i = w_first + g + 8 * hh;
        if (i < l.T) store_row(dqkv + l.q(b, i, h), dq, 0, hh, 1.0f, true);
    }
}

}  // namespace napkin::cuda::fa2
