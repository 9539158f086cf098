// The forward of the mma.sync flash attention, as a template of its tiles (docs/CUDA.md "Flash
// attention on mma.sync"): the tile configuration (ForwardTiles), its shared-memory bytes, and the
// body of a block, which attention_fa2_forward.cu launches with the engine's tiles and
// bench/attention_fa2_candidates.cu with the candidates the sweep measures. Not a public header.
//
// A block of kWarps warps owns kBlockM = 16 kM kWarps queries of one (b, h), 16 kM per warp, the
// last query tiles (most keys) launched first. Q is loaded once by cp.async; K and V tiles of
// kBlockN keys stream through kStages shared-memory stages (fa2::Pipeline: tile it + kStages - 1
// is in flight while tile it is multiplied), up to the tile holding the block's last query
// (causal). Per key tile, each warp:
//   S = Q K^T         m16n8k16 over HD; Q's A fragments from registers or the tile
//   online softmax    in registers: the lane's scores of rows g, g + 8 of each m-tile, the row max
//                     across the quad by two shuffles; m moves every tile, the output accumulators
//                     take exp2(m_old - m_new); P = exp2(S log2(e) / sqrt(HD) - m) (the diagonal
//                     tiles masked, key j > query i); the row sum l takes P undropped, then
//                     dropped elements of P are zeroed (the lane knows each element's (i, j), so
//                     it draws kernels/dropout.h's bit of P's offset ((b NH + h) T + i) T + j)
//   O += P V          P packed to 16 bits straight from S's accumulators into A fragments; V read
//                     by ldmatrix.trans
// Warps whose rows all precede a key tile, or lie past T, skip it. At the end out = O / l
// (times 1 / (1 - p) with dropout) and lse = (m + log2 l) ln 2, stored from the fragments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::fa2 {

// The forward's tiles at head dimension HD: m-tiles per warp (M: each B fragment read from shared
// memory feeds M products), keys per tile, shared-memory stages of K and V, whether the warp's Q
// fragments stay in registers, warps per block, and the blocks per SM that __launch_bounds__
// bounds the registers for (at 4 warps, 1 and 2 both allow 255 a thread).
template <int HD, int M, int BlockN, int Stages, bool QInRegisters, int Warps = 4,
          int MinBlocks = 2>
struct ForwardTiles {
    static_assert(HD == 64 || HD == 128);
    static_assert(BlockN % 16 == 0 && Stages >= 2 && (Warps == 4 || Warps == 8));
    static constexpr int kHD = HD, kM = M, kBlockN = BlockN, kStages = Stages;
    static constexpr bool kQInRegisters = QInRegisters;
    static constexpr int kWarps = Warps, kThreads = Warps * kWarpSize, kMinBlocks = MinBlocks;
    static constexpr int kBlockM = 16 * M * Warps;  // queries a block

    // Q (kBlockM, HD), then kStages K tiles and kStages V tiles (kBlockN, HD), 16-bit.
    static constexpr std::size_t smem_bytes() {
        return static_cast<std::size_t>(kBlockM + 2 * kStages * kBlockN) * kHD * 2;
    }
    // Shared-memory bytes a warp reads per m16n8k16 product, S = Q K^T and O += P V alike in
    // number: an ldmatrix.x4 (512 bytes) of B feeds 2 kM products (256 / kM a product) in both;
    // Q's A fragments from the tile add 512 bytes per m-tile and k-step over S's kBlockN / 8
    // products of that m-tile.
    static constexpr double smem_read_per_mma() {
        const double a = kQInRegisters ? 0.0 : 512.0 / (kBlockN / 8);
        return (a + 256.0 / kM + 256.0 / kM) / 2.0;
    }
};

// The engine's tiles (attention_flash_mma_forward). Shared-memory reads per m16n8k16 product (an
// SM reads 128 bytes a clock; docs/CUDA.md, "Flash attention on mma.sync", has the arithmetic):
// 128 bytes at HD 64 (Q in registers, two m-tiles), 288 at HD 128 (one m-tile: O alone is 64 fp32
// registers a lane there). ptxas (nvcc 13, sm_80 and sm_90) spills nothing, with or without
// dropout.
template <int kHD>
using DefaultForwardTiles = std::conditional_t<kHD == 64, ForwardTiles<64, 2, 32, 3, true>,
                                               ForwardTiles<128, 1, 64, 2, false>>;

using mma_detail::MmaLayout;

// One key tile of the online softmax for the warp's rows, O aside: s (16 kM x 8 kN scores of rows
// row0 .., keys j0 ..) becomes P, zeroed where dropped; the running max mx (log2 units of the
// scaled score) and sum move, and corr receives each row's factor for O, exp2(m_old - m_new).
// `masked`: the tile crosses the diagonal.
template <bool kDropout, int kM, int kN>
__device__ void softmax_tile(float (&s)[kM][kN][4], float (&corr)[kM][2], float (&mx)[kM][2],
                             float (&sum)[kM][2], std::int64_t row0, std::int64_t j0, bool masked,
                             std::int64_t p_row0, const MmaLayout& l, const FlashDropout& drop) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    // Key minus query of the lane's first element, (j0 + 2 t) - (row0 + g): the causal mask in
    // 32 bits (j0 - row0 is within a tile or two of the diagonal when `masked`).
    const int diagonal = masked ? static_cast<int>(j0 - row0) + 2 * t - g : 0;
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& x = s[m][n][2 * hh + e];
                    if (masked && diagonal + 8 * n + e - 16 * m - 8 * hh > 0) x = -INFINITY;
                    tile_max = fmaxf(tile_max, x);
                }
            tile_max = quad_max(tile_max);
            const float m_new = fmaxf(mx[m][hh], tile_max * l.scale_log2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet
            const float correction = exp2f(mx[m][hh] - m_use);
            mx[m][hh] = m_new;
            sum[m][hh] *= correction;
            corr[m][hh] = correction;
#pragma unroll
            for (int n = 0; n < kN; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float& x = s[m][n][2 * hh + e];
                    float p = exp2f(fmaf(x, l.scale_log2, -m_use));
                    sum[m][hh] += p;  // the softmax's own sum: dropout comes after it
                    if constexpr (kDropout) {
                        const std::int64_t i = row0 + 16 * m + g + 8 * hh;
                        const std::int64_t j = j0 + 8 * n + 2 * t + e;
                        if (p != 0.0f && !drop.keep((p_row0 + i) * l.T + j)) p = 0.0f;
                    }
                    x = p;
                }
        }
    }
}

// O's rows scaled by softmax_tile's factors.
template <int kM, int kD>
__device__ void correct_rows(float (&o)[kM][kD][4], const float (&corr)[kM][2]) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
            for (int d = 0; d < kD; ++d) {
                o[m][d][2 * hh] *= corr[m][hh];
                o[m][d][2 * hh + 1] *= corr[m][hh];
            }
}

// One key tile of the online softmax with O's correction (softmax_tile, then correct_rows).
template <bool kDropout, int kM, int kN, int kD>
__device__ void online_softmax(float (&s)[kM][kN][4], float (&o)[kM][kD][4], float (&mx)[kM][2],
                               float (&sum)[kM][2], std::int64_t row0, std::int64_t j0, bool masked,
                               std::int64_t p_row0, const MmaLayout& l, const FlashDropout& drop) {
    float corr[kM][2];
    softmax_tile<kDropout>(s, corr, mx, sum, row0, j0, masked, p_row0, l, drop);
    correct_rows(o, corr);
}

// The warp's rows of the results: out = O / l (times 1 / (1 - p) with dropout) and
// lse = (m + log2 l) ln 2, rows w_first + 16 m + g + 8 hh below T.
template <bool kDropout, int kM, int kD, class D>
__device__ void store_forward_rows(D* out, float* lse, const float (&o)[kM][kD][4],
                                   const float (&mx)[kM][2], const float (&sum)[kM][2],
                                   std::int64_t w_first, std::int64_t b, int h, const MmaLayout& l,
                                   const FlashDropout& drop) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    for_each_row<kM>([&](int m, int hh) {
        const float total = quad_sum(sum[m][hh]);  // >= 1 for a row that saw a key
        const std::int64_t i = w_first + 16 * m + g + 8 * hh;
        if (i >= l.T) return;
        if (t == 0) lse[l.row(b, h, i)] = (mx[m][hh] + log2f(total)) * mma_detail::kLn2;
        store_row(out + l.o(b, i, h), o, m, hh, (kDropout ? drop.scale : 1.0f) / total, false);
    });
}

// The block's work (a grid of (query tiles * B * NH) blocks of Tiles::kThreads, the last query
// tiles first; shared memory: Tiles::smem_bytes() at smem).
template <class D, class Tiles, bool kDropout>
__device__ __forceinline__ void forward_block(unsigned char* smem, D* out, float* lse, const D* qkv,
                                              const MmaLayout& l, const FlashDropout& drop) {
    constexpr int kHD = Tiles::kHD, kThreads = Tiles::kThreads;
    constexpr int kM = Tiles::kM, kStages = Tiles::kStages, kRows = Tiles::kBlockM;
    constexpr int kBlockN = Tiles::kBlockN, kN = kBlockN / 8;  // keys per tile, S's n-tiles
    constexpr int kD = kHD / 8;                                // O's n-tiles
    using Tile = Tile<D, kHD>;
    const std::uint32_t base = shared_address(smem);
    const Tile q{base};
    auto k_tile = [=](int s) { return Tile{base + (kRows + s * kBlockN) * Tile::kRowBytes}; };
    auto v_tile = [=](int s) {
        return Tile{base + (kRows + (kStages + s) * kBlockN) * Tile::kRowBytes};
    };
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const QueryBlock block = query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;  // (not structured bindings: lambdas take them)
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = causal_key_tiles<kBlockN>(l, i0, kRows);

    const std::int64_t hd = l.HD;
    load_rows<kRows, kThreads>(q, qkv + h * hd, l.qkv_row, b, l.T, i0);
    cp_async_commit();
    auto kv = kv_pipeline<kStages, kBlockN, kThreads>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q: the oldest group
    __syncthreads();

    const int w_row0 = warp * 16 * kM;  // the warp's rows, from i0
    const std::int64_t w_first = i0 + w_row0, w_last = w_first + 16 * kM - 1;
    const auto qa = a_source<Tiles::kQInRegisters, kM>(q, w_row0);
    float o[kM][kD][4];
    zero(o);
    float mx[kM][2], sum[kM][2];  // per row: the running max (log2 units) and sum
    for_each_row<kM>([&](int m, int hh) {
        mx[m][hh] = -INFINITY;
        sum[m][hh] = 0.0f;
    });

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (w_first >= l.T || j0 > w_last) continue;  // nothing the warp's rows see
        float s[kM][kN][4];
        zero(s);
        warp_abt<D>(s, qa, k_tile(stage), 0);
        online_softmax<kDropout>(s, o, mx, sum, w_first, j0, j0 + kBlockN - 1 > w_first,
                                 l.row(b, h, 0), l, drop);
        std::uint32_t p[kM][kN / 2][4];
        pack_a<D>(p, s);
        warp_ab<D>(o, p, v_tile(stage), 0);
    }

    // store_forward_rows's work, written out: through the helper ptxas allocates these kernels'
    // registers differently (sm_80 f64 214 / 228 against 223 / 235), and the engine's kernels
    // stay as the H200 measured them until a GPU says otherwise.
    for_each_row<kM>([&](int m, int hh) {
        const float total = quad_sum(sum[m][hh]);  // >= 1 for a row that saw a key
        const std::int64_t i = w_first + 16 * m + g + 8 * hh;
        if (i >= l.T) return;
        if (t == 0) lse[l.row(b, h, i)] = (mx[m][hh] + log2f(total)) * mma_detail::kLn2;
        store_row(out + l.o(b, i, h), o, m, hh, (kDropout ? drop.scale : 1.0f) / total, false);
    });
}

}  // namespace napkin::cuda::fa2
