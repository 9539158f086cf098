// The building blocks of the mma.sync flash attention (attention_fa2_forward.cu,
// attention_fa2_backward.cu; docs/CUDA.md "Flash attention on mma.sync"): swizzled shared-memory
// tiles filled by cp.async, a multi-stage pipeline of tile loads, and a warp's two products on
// m16n8k16 fragments (kernels/cuda/mma.cuh has the layouts). Not a public header.
//
// Tiles. A tile is `rows` rows of kHD 16-bit elements (64 or 128: 128 or 256 bytes) in shared
// memory, unpadded, its 16-byte chunks swizzled: chunk c of row r sits at chunk c ^ (r % 8) of the
// row. ldmatrix reads one 8 x 8 matrix per phase, 8 rows of one chunk column: consecutive rows r
// land in 8 different chunks, so the phase's 8 rows of 16 bytes cover all 32 banks once, whether
// it reads rows as they are or transposed (.trans), and whichever chunk column. cp.async writes
// a row's chunks from consecutive threads, 8 chunks of 8 threads in 8 different bank groups too.
//
// Products of one warp, with fp32 accumulators acc[m][n][4] holding the m16n8 C fragments of a
// (16 kM) x (8 kN) result:
//   warp_abt: acc += A B^T with A (16 kM rows) and B (8 kN rows) both row-major over the kHD
//             columns of tiles (S = Q K^T, dP = dO V^T; transposed, S^T = K Q^T, dP^T = V dO^T).
//             A comes from a tile by ldmatrix, or from registers loaded once (a_fragments);
//   warp_ab:  acc += P X with P (16 kM x 16 kK) packed from a previous product's accumulators
//             (pack_a: the C fragments of n-tiles 2k, 2k + 1 are the A fragment of k-step k, so
//             P never leaves the registers) and X (16 kK rows of kHD) read transposed by
//             ldmatrix.trans (O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K).
// The lane's element e of n-tile n of m-tile m is row 16 m + g + 8 (e / 2), column
// 8 n + 2 t + e % 2 (g = lane / 4, t = lane % 4): the softmax's row max and sum reduce over the
// lane's elements, then across the quad of lanes 4 g .. 4 g + 3 (two xor shuffles).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma.cuh"

namespace napkin::cuda::fa2 {

// A swizzled tile of rows of kHD elements of D in shared memory, at shared address `at`
// (mma.cuh's shared_address: all of its addressing is 32-bit).
template <class D, int kHD>
struct Tile {
    static constexpr int kChunks = kHD / 8;  // 16-byte chunks per row
    static constexpr int kRowBytes = kHD * 2;
    std::uint32_t at;

    // The shared address of chunk c (8 elements) of row `row`.
    __device__ std::uint32_t chunk(int row, int c) const {
        return at + row * kRowBytes + ((c ^ (row & 7)) << 4);
    }
};

// The block's dynamic shared memory: tiles by shared address, and ordinary pointers into it for
// the loads and stores that are not ldmatrix or cp.async.
struct Shared {
    unsigned char* p;  // generic
    std::uint32_t at;  // p's shared address

    template <class D, int kHD>
    __device__ Tile<D, kHD> tile(std::uint32_t offset_bytes) const {
        return Tile<D, kHD>{at + offset_bytes};
    }
    template <class X>
    __device__ X* ptr(std::uint32_t address) const {
        return reinterpret_cast<X*>(p + (address - at));
    }
};

// Rows [t0, t0 + kRows) of one head of a packed (B, T, stride) buffer (head at `src`: the head's
// column offset already added) into `dst` by cp.async, zeros past T. kThreads threads call it,
// `thread` their rank among them (the whole block: threadIdx.x); the caller commits. TileT: a
// Tile, or any tile with kChunks and chunk(row, c) (attention_wgmma_forward.cuh's). kUnroll:
// the copies a thread issues unrolled (all by default; a producer warpgroup short of registers
// unrolls fewer).
template <int kRows, int kThreads, class TileT, class D,
          int kUnroll = kRows * TileT::kChunks / kThreads>
__device__ void load_rows(TileT dst, const D* src, std::int64_t stride, std::int64_t b,
                          std::int64_t T, std::int64_t t0,
                          int thread = static_cast<int>(threadIdx.x)) {
    constexpr int kChunks = TileT::kChunks;
    static_assert(kRows * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll(kUnroll)
    for (int k = 0; k < kRows * kChunks / kThreads; ++k) {
        const int idx = k * kThreads + thread;
        const int r = idx / kChunks, c = idx % kChunks;
        const std::int64_t t = t0 + r;
        const bool valid = t < T;
        cp_async_16(dst.chunk(r, c), valid ? src + (b * T + t) * stride + c * 8 : src, valid);
    }
}

// A pipeline of `items` tile loads through kStages shared-memory stages: issue(i) loads item i
// into stage i % kStages (by the block's cp.async, `load(item, stage)`) and commits one group,
// empty past the last item, so that every thread counts the same groups. The loop over the
// items calls next(it) first: it waits for item it, and a barrier tells the block it has landed
// and that every warp is done with item it - 1, whose stage then takes item it + kStages - 1.
template <int kStages, class Load>
struct Pipeline {
    static_assert(kStages >= 2, "double buffering at least");
    Load load;
    int items;

    __device__ void issue(int item) {
        if (item < items) load(item, item % kStages);
        cp_async_commit();
    }
    // Items 0 .. kStages - 2, before the loop.
    __device__ void prologue() {
#pragma unroll
        for (int s = 0; s < kStages - 1; ++s)
            issue(s);
    }
    // The stage that holds item `it`.
    __device__ int next(int it) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        issue(it + kStages - 1);
        return it % kStages;
    }
};

template <int kStages, class Load>
__device__ Pipeline<kStages, Load> make_pipeline(Load load, int items) {
    return Pipeline<kStages, Load>{load, items};
}

// The block of a grid of (query tiles * B * NH) blocks of `rows` queries: its (b, h), kv head and
// first query, the last query tiles (most keys, causal) first.
struct QueryBlock {
    std::int64_t b, i0;
    int h, kvh;
};
__device__ inline QueryBlock query_block(const mma_detail::MmaLayout& l, int rows) {
    const std::int64_t heads = l.B * l.NH;
    const std::int64_t query_tiles = (l.T + rows - 1) / rows;
    const int h = static_cast<int>(blockIdx.x % heads % l.NH);
    return QueryBlock{static_cast<std::int64_t>(blockIdx.x % heads / l.NH),
                      (query_tiles - 1 - blockIdx.x / heads) * rows, h, h / l.group};
}

// The key tiles of kBlockN keys that the queries [i0, i0 + rows) see (causal): up to the one
// holding the last of them, or T's last key.
template <int kBlockN>
__device__ int causal_key_tiles(const mma_detail::MmaLayout& l, std::int64_t i0, int rows) {
    return static_cast<int>(min((l.T + kBlockN - 1) / kBlockN, (i0 + rows - 1) / kBlockN + 1));
}

// The pipeline of `tiles` tiles of kBlockN keys of kv head kvh (batch b): K into k_tile(stage),
// V into v_tile(stage), by a block of kThreads.
template <int kStages, int kBlockN, int kThreads, class D, class KTile, class VTile>
__device__ auto kv_pipeline(KTile k_tile, VTile v_tile, const D* qkv,
                            const mma_detail::MmaLayout& l, std::int64_t b, int kvh, int tiles) {
    const std::int64_t hd = l.HD, stride = l.qkv_row, T = l.T;
    const D* k_src = qkv + (l.NH + kvh) * hd;
    const D* v_src = qkv + (l.NH + l.KVH + kvh) * hd;
    return make_pipeline<kStages>(
        [=](int tile, int stage) {
            const std::int64_t j0 = static_cast<std::int64_t>(tile) * kBlockN;
            load_rows<kBlockN, kThreads>(k_tile(stage), k_src, stride, b, T, j0);
            load_rows<kBlockN, kThreads>(v_tile(stage), v_src, stride, b, T, j0);
        },
        tiles);
}

// ---- fragments ----

// A fragments straight from a tile: m-tile m of rows row0 + 16 m .., k-step ks.
template <class D, int kHD>
struct TileA {
    static constexpr bool kInRegisters = false;
    Tile<D, kHD> tile;
    int row0;

    __device__ void get(std::uint32_t (&a)[4], int m, int ks) const {
        const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
        ldmatrix_x4(a, tile.chunk(row0 + 16 * m + (lane & 15), 2 * ks + (lane >> 4)));
    }
};

// A fragments kept in registers for a whole block's work (the warp's queries, keys or values),
// loaded once from a tile.
template <int kM, int kHD>
struct RegisterA {
    static constexpr bool kInRegisters = true;
    std::uint32_t f[kM][kHD / 16][4];

    template <class D>
    __device__ void load(const TileA<D, kHD>& from) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int ks = 0; ks < kHD / 16; ++ks)
                from.get(f[m][ks], m, ks);
    }
    __device__ void get(std::uint32_t (&a)[4], int m, int ks) const {
#pragma unroll
        for (int r = 0; r < 4; ++r)
            a[r] = f[m][ks][r];
    }
};

// The warp's A operand over rows row0 .. row0 + 16 kM of `tile`: read from the tile at every use,
// or (kInRegisters) loaded into registers once.
template <bool kInRegisters, int kM, class D, int kHD>
__device__ auto a_source(Tile<D, kHD> tile, int row0) {
    const TileA<D, kHD> from{tile, row0};
    if constexpr (kInRegisters) {
        RegisterA<kM, kHD> regs;
        regs.load(from);
        return regs;
    } else {
        return from;
    }
}

// f(m, n, e) for every element e of every n-tile n of every m-tile m of a warp's accumulators,
// unrolled (so that f indexes register arrays with constants).
template <int kM, int kN, class F>
__device__ __forceinline__ void for_each_element(F f) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                f(m, n, e);
}

// f(m, hh) for the lane's rows 16 m + g + 8 hh of a warp's kM m-tiles.
template <int kM, class F>
__device__ __forceinline__ void for_each_row(F f) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
            f(m, hh);
}

template <int kM, int kN>
__device__ void zero(float (&acc)[kM][kN][4]) {
    for_each_element<kM, kN>([&](int m, int n, int e) { acc[m][n][e] = 0.0f; });
}

// acc[m][n0] and acc[m][n0 + 1] += A_m B for every m-tile m, B the two n-tiles an ldmatrix.x4
// gave (bf[0..1], bf[2..3]) and A_m = a(m).
template <class D, int kM, int kN, class A>
__device__ void mma_n_pair(float (&acc)[kM][kN][4], int n0, const std::uint32_t (&bf)[4], A a) {
    const std::uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
    for (int m = 0; m < kM; ++m) {
        mma_m16n8k16<D>(acc[m][n0], a(m), b0);
        mma_m16n8k16<D>(acc[m][n0 + 1], a(m), b1);
    }
}

// One k-step (16 columns, ks) of warp_abt.
template <class D, int kM, int kN, int kHD, class ASource>
__device__ void abt_step(float (&acc)[kM][kN][4], const ASource& a, Tile<D, kHD> b, int b_row,
                         int b_col, int ks) {
    std::uint32_t af[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m)
        a.get(af[m], m, ks);
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
        std::uint32_t bf[4];
        ldmatrix_x4(bf, b.chunk(b_row + 16 * np, 2 * ks + b_col));
        mma_n_pair<D>(acc, 2 * np, bf, [&](int m) -> const std::uint32_t(&)[4] { return af[m]; });
    }
}

// acc (16 kM x 8 kN) += A B^T over kHD: A from `a` (TileA or RegisterA), B rows b_row0 ..
// b_row0 + 8 kN of tile b. The k-steps are a loop that ptxas keeps (unrolled, it would load every
// step's fragments ahead and run out of registers), except over A fragments in registers, which
// only constant indices keep there.
template <class D, int kM, int kN, int kHD, class ASource>
__device__ void warp_abt(float (&acc)[kM][kN][4], const ASource& a, Tile<D, kHD> b, int b_row0) {
    static_assert(kN % 2 == 0, "B rows come 16 at a time");
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int b_row = b_row0 + (lane & 7) + ((lane >> 4) << 3), b_col = (lane >> 3) & 1;
    if constexpr (ASource::kInRegisters) {
#pragma unroll
        for (int ks = 0; ks < kHD / 16; ++ks)
            abt_step<D>(acc, a, b, b_row, b_col, ks);
    } else {
#pragma unroll 1
        for (int ks = 0; ks < kHD / 16; ++ks)
            abt_step<D>(acc, a, b, b_row, b_col, ks);
    }
}

// The A fragments (16 kM x 8 kN, kN even) of the 16-bit rounding of accumulators c.
template <class D, int kM, int kN>
__device__ void pack_a(std::uint32_t (&a)[kM][kN / 2][4], const float (&c)[kM][kN][4]) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int k = 0; k < kN / 2; ++k) {
            a[m][k][0] = pack2<D>(c[m][2 * k][0], c[m][2 * k][1]);
            a[m][k][1] = pack2<D>(c[m][2 * k][2], c[m][2 * k][3]);
            a[m][k][2] = pack2<D>(c[m][2 * k + 1][0], c[m][2 * k + 1][1]);
            a[m][k][3] = pack2<D>(c[m][2 * k + 1][2], c[m][2 * k + 1][3]);
        }
}

// acc (16 kM x kHD) += P X: P (16 kM x 16 kK) as A fragments, X rows x_row0 .. x_row0 + 16 kK of
// tile x (k by kHD, read transposed).
template <class D, int kM, int kK, int kHD>
__device__ void warp_ab(float (&acc)[kM][kHD / 8][4], const std::uint32_t (&p)[kM][kK][4],
                        Tile<D, kHD> x, int x_row0) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int x_row = x_row0 + (lane & 7) + (((lane >> 3) & 1) << 3), x_col = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
#pragma unroll
        for (int np = 0; np < kHD / 16; ++np) {
            std::uint32_t bf[4];
            ldmatrix_x4_trans(bf, x.chunk(x_row + 16 * kk, 2 * np + x_col));
            mma_n_pair<D>(acc, 2 * np, bf,
                          [&](int m) -> const std::uint32_t(&)[4] { return p[m][kk]; });
        }
    }
}

// ---- per-lane helpers ----

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The dot product of 8 elements at a and b (16-byte aligned), in fp32.
template <class D>
__device__ float dot8(const D* a, const D* b) {
    alignas(16) D x[8], y[8];
    *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(a);
    *reinterpret_cast<uint4*>(y) = *reinterpret_cast<const uint4*>(b);
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e)
        sum += to_f32(x[e]) * to_f32(y[e]);
    return sum;
}

// dst[0..1] = (a, b) rounded to D, or += (a, b) with `add` (one rounding of the fp32 sum).
template <class D>
__device__ void store_pair(D* dst, float a, float b, bool add) {
    if (add) {
        alignas(4) D old[2];
        *reinterpret_cast<std::uint32_t*>(old) = *reinterpret_cast<const std::uint32_t*>(dst);
        a += to_f32(old[0]);
        b += to_f32(old[1]);
    }
    *reinterpret_cast<std::uint32_t*>(dst) = pack2<D>(a, b);
}

// The lane's elements of row (m, hh) of accumulators acc (16 kM x 8 kD), times `scale`, into the
// row at dst (columns 8 d + 2 t, + 1), or added to it.
template <class D, int kM, int kD>
__device__ void store_row(D* dst, const float (&acc)[kM][kD][4], int m, int hh, float scale,
                          bool add) {
    dst += 2 * (threadIdx.x % 4);
#pragma unroll
    for (int d = 0; d < kD; ++d)
        store_pair(dst + 8 * d, acc[m][d][2 * hh] * scale, acc[m][d][2 * hh + 1] * scale, add);
}

}  // namespace napkin::cuda::fa2
