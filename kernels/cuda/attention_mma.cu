// Causal flash attention on tensor cores (declared in kernels/attention.h as
// cuda::attention_flash_mma_forward/backward; attention.cu's attention_flash_forward/backward
// choose it for bf16 and fp16 storage with HD a multiple of 16 up to 128). The same contract as
// the SIMT flash kernels of attention.cu and the CPU's kernels/cpu/attention.cpp: out and the
// fp32 logsumexp lse forward, dq, dk, dv accumulated into the packed dqkv backward, GQA/MQA,
// scale 1/sqrt(HD), fp32 softmax statistics and accumulation, no atomics.
//
// At HD 64 and 128 on sm_80 and later the entry points run the mma.sync kernels of
// attention_fa2_forward.cu and attention_fa2_backward.cu (attention_mma.cuh); the WMMA kernels
// below take the other head dimensions, and older GPUs.
//
// The products run through WMMA (nvcuda::wmma, m16n16k16, fp32 accumulators); the rest is the
// SIMT kernels' arithmetic. A block is 4 warps; each owns 16 rows of the block's 64 (queries in
// the forward and the dq pass, keys in the dk/dv pass) and walks tiles of 64 keys (queries),
// staged in shared memory as Elem rows padded by 8 elements (16 bytes, so that the 8 rows a
// tensor-core load reads at once fall in different banks). The accumulator's element-to-lane
// mapping is unspecified, so a product that feeds row-wise work (the softmax, dS = P (dP - D))
// goes through an fp32 tile in shared memory, where lane l owns row l % 16 and half l / 16 of
// the columns (rotated by the row, so that the 32 lanes hit 32 banks; dP comes back 16 x 16 at a
// time, element (2 e + l / 16, l % 16) to lane l, 32 consecutive floats per read), and the
// result is rounded to Elem in shared memory for the next product. The forward and the dq pass
// hold the warp's 16 query (and dout) rows as fragments for the whole block.
//
// Forward, per block (b, h, 64 queries), per key tile: S = Q K^T; the online softmax with a
// lazily moved row max m: p = 2^(s log2(e) / sqrt(HD) - m) while no score exceeds m by more than
// 2^8 (p <= 256, safe in bf16 and fp16), else m moves up and the warp's output accumulators take
// the factor 2^(m_old - m_new), stored to shared memory, scaled by row, loaded back (rare after
// the first tiles, so O stays in registers); O += P V. lse = (m + log2 l) ln 2.
// Backward pass 1, per block (b, kv head g, 64 keys), over the group's query heads and the query
// tiles that see the keys: S^T = K Q^T, P^T = 2^(S^T log2(e) / sqrt(HD) - lse log2(e)),
// dV += P^T dO, dP^T = V dO^T 16 x 16 at a time, dS^T = P^T (dP^T - D) / sqrt(HD),
// dK += dS^T Q; D_i = dout_i . out_i computed per query tile. Pass 2, per block (b, h, 64
// queries), over the key tiles: S, P, dP = dO V^T, dS, dQ += dS K. Causal: the forward and dq
// blocks see key tiles up to their own and the warps skip the 16-key blocks past their rows on
// the diagonal tile; the dk/dv blocks start at the diagonal query tile. Blocks with the most
// tiles are launched first. Tail rows and keys past T are zero in shared memory and masked.
//
// Dropout on P (AttentionDropout's p and seed; nothing kept): the keep bit of (b, h, i, j) is
// kernels/dropout.h's hash of P's offset ((b NH + h) T + i) T + j, drawn by the lane that computes
// that element of P in shared memory, where its (query, key) coordinates are known (never from a
// fragment's opaque layout). Forward: the row sum l takes P undropped; the 16-bit P that
// multiplies V has its dropped elements zeroed but is not scaled (it stays within 2^8), and
// out = O (1 / (1 - p)) / l. The lane draws its 32 bits of a tile row into one mask before the
// softmax loop; the kernel is compiled apart with and without dropout, so that the one without
// keeps its registers. Backward: dV takes the same zeroed P^T and its 1 / (1 - p) at the store;
// dP = (dO V^T) k with k = 0 or 1 / (1 - p), which the fp32 P tile carries to the dS loop as P's
// sign (P >= 0; a dropped P is stored as -P), since that loop reads dP's elements in another
// lane order.
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/attention_dropout.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dropout.h"

namespace napkin::cuda {

namespace {

namespace wmma = nvcuda::wmma;
using mma_detail::kLn2;
using mma_detail::kLog2e;
using mma_detail::make_mma_layout;
using mma_detail::mma_grid;
using mma_detail::MmaLayout;

constexpr int kRows = 64;  // queries (keys) a block owns
constexpr int kCols = 64;  // keys (queries) per shared-memory tile
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kFrag = 16;                 // the WMMA tile: 16 x 16 x 16
constexpr int kColFrags = kCols / kFrag;  // 4
constexpr int kPad = 8;                   // Elem per 16-bit row beyond HD: 16 bytes
constexpr int kScoreLd = kCols + 4;       // fp32 score rows (floats; WMMA: a multiple of 4)
constexpr int kProbLd = kCols + kPad;     // 16-bit P / dS rows
constexpr int kScratchLd = kFrag;  // a warp's 16 x 16 fp32 scratch, unpadded (see kBackwardBlocks)
constexpr std::int64_t kMaxHD = 128;
constexpr float kRescaleAbove = 8.0f;  // log2 units: the forward moves a row's max past 2^8

// Blocks per SM each kernel is compiled to fit (__launch_bounds__: at most 65536 / (128 * blocks)
// registers a thread): what its shared memory allows on an H100 (227 KiB) at the largest HD of
// its instantiation. Forward: 41, 53, 77 KiB at HD 32, 64, 128; backward: 50.5, 66.5, 98.5 KiB
// (under the 99 KiB of sm_86/89 too).
template <int kFrags>
constexpr int kForwardBlocks = kFrags == 8 ? 2 : 4;
template <int kFrags>
constexpr int kBackwardBlocks = kFrags == 8 ? 2 : (kFrags == 4 ? 3 : 4);

template <class D>
using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, D, wmma::row_major>;
template <class D>
using FragBRow = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, D, wmma::row_major>;
template <class D>
using FragBCol = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, D, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// ---- shared memory: every region starts 32-byte aligned, as WMMA pointers must ----

int row_ld(std::int64_t HD) {  // 16-bit tile rows, in elements (a multiple of 8)
    return static_cast<int>(HD) + kPad;
}

// Forward: Q, K, V tiles (64, ld) Elem, scores (64, kScoreLd) fp32, P (64, kProbLd) Elem.
std::size_t forward_smem_bytes(std::int64_t HD) {
    return (3 * kRows * row_ld(HD) + kRows * kProbLd) * sizeof(__half) +
           kRows * kScoreLd * sizeof(float);
}

// Backward (both passes): four (64, ld) Elem tiles, P (64, kScoreLd) fp32, a (16, kScratchLd)
// fp32 scratch per warp, P then dS (64, kProbLd) Elem, and 64 floats each of lse and D.
std::size_t backward_smem_bytes(std::int64_t HD) {
    return (4 * kRows * row_ld(HD) + kRows * kProbLd) * sizeof(__half) +
           (kRows * kScoreLd + kWarps * kFrag * kScratchLd + 2 * kRows) * sizeof(float);
}

// Carves the block's dynamic shared memory in order.
struct Carve {
    unsigned char* at;
    template <class X>
    __device__ X* take(std::size_t n) {
        X* p = reinterpret_cast<X*>(at);
        at += n * sizeof(X);
        return p;
    }
};

// ---- tiles ----

// dst (kRows, ld) <- rows [t0, t0 + kRows) of one head of the packed buffer (rows of
// row_stride elements, the head at `offset`), zeros past T; 16 bytes per access. The whole block
// calls it.
template <class D>
__device__ void load_rows(D* dst, int ld, const D* src, std::int64_t row_stride, std::int64_t b,
                          std::int64_t T, std::int64_t t0, std::int64_t offset, int HD) {
    const int chunks = HD / 8;
    for (int idx = static_cast<int>(threadIdx.x); idx < kRows * chunks; idx += kThreads) {
        const int r = idx / chunks, c = idx % chunks;
        const std::int64_t t = t0 + r;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (t < T)
            v = *reinterpret_cast<const uint4*>(src + (b * T + t) * row_stride + offset + c * 8);
        *reinterpret_cast<uint4*>(dst + r * ld + c * 8) = v;
    }
}

// The 8 elements at src, as floats.
template <class D>
__device__ void load8(float* v, const D* src) {
    alignas(16) D x[8];
    *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(src);
#pragma unroll
    for (int e = 0; e < 8; ++e)
        v[e] = to_f32(x[e]);
}

// dst[0..8) = v (rounded), or += v with `add` (the backward's accumulation into dqkv).
template <class D>
__device__ void store8(D* dst, const float* v, bool add) {
    alignas(16) D x[8];
    if (add) *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(dst);
#pragma unroll
    for (int e = 0; e < 8; ++e)
        x[e] = from_f32<D>(add ? to_f32(x[e]) + v[e] : v[e]);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(x);
}

// D_i = dout_i . out_i for the block's 64 query rows [i0, i0 + 64) (0 past T): two threads per
// row, each half of HD; go is the dout tile in shared memory. The whole block calls it.
template <class D>
__device__ void row_dots(float* d_s, const D* go, int ld, const D* out, const MmaLayout& l,
                         std::int64_t b, int h, std::int64_t i0) {
    const int r = static_cast<int>(threadIdx.x) / 2, half = static_cast<int>(threadIdx.x) % 2;
    const std::int64_t i = i0 + r;
    float part = 0.0f;
    if (i < l.T) {
        for (int d = half * l.HD / 2; d < (half + 1) * l.HD / 2; d += 8) {
            float o[8];
            load8(o, out + l.o(b, i, h) + d);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                part += to_f32(go[r * ld + d + e]) * o[e];
        }
    }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    if (half == 0) d_s[r] = part;
}

// ---- warp products (each warp on its own 16 rows) ----

// acc = A B^T, the 16 x 16 product of A (16, HD) and B (16, HD), both row-major with `ld`.
template <class D, int kFrags>
__device__ void mma_abt(FragC& acc, const D* a, const D* b, int ld, int frags) {
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        FragA<D> fa;
        FragBCol<D> fb;
        wmma::load_matrix_sync(fa, a + f * kFrag, ld);
        wmma::load_matrix_sync(fb, b + f * kFrag, ld);
        wmma::mma_sync(acc, fa, fb, acc);
    }
}

// acc = A B^T as mma_abt does, A given as its fragments (loaded once for all the tiles).
template <class D, int kFrags>
__device__ void mma_fragments_bt(FragC& acc, const FragA<D> (&a)[kFrags], const D* b, int ld,
                                 int frags) {
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        FragBCol<D> fb;
        wmma::load_matrix_sync(fb, b + f * kFrag, ld);
        wmma::mma_sync(acc, a[f], fb, acc);
    }
}

// acc[f] += A X for the 16-column blocks f of X: A (16, 64) row-major with lda, X (64, HD)
// row-major with ld, only the 16-wide k blocks [lo, hi) (the rest are masked).
template <class D, int kFrags>
__device__ void mma_ax(FragC (&acc)[kFrags], const D* a, int lda, const D* x, int ld, int lo,
                       int hi, int frags) {
    FragA<D> fa[kColFrags];
#pragma unroll
    for (int kk = 0; kk < kColFrags; ++kk)
        if (kk >= lo && kk < hi) wmma::load_matrix_sync(fa[kk], a + kk * kFrag, lda);
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
#pragma unroll
        for (int kk = 0; kk < kColFrags; ++kk) {
            if (kk < lo || kk >= hi) continue;
            FragBRow<D> fx;
            wmma::load_matrix_sync(fx, x + kk * kFrag * ld + f * kFrag, ld);
            wmma::mma_sync(acc[f], fa[kk], fx, acc[f]);
        }
    }
}

// The lane's 8 elements (row lane % 16, columns 8 (lane / 16) ..) of the 16 x 16 `frag`, through
// the warp's scratch (16, kScratchLd): a row's 8 neighbours, for the stores to global memory.
__device__ void fragment_row8(float* v, const FragC& frag, float* scratch) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    __syncwarp();
    wmma::store_matrix_sync(scratch, frag, kScratchLd, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int e = 0; e < 8; ++e)
        v[e] = scratch[(lane % kFrag) * kScratchLd + lane / kFrag * 8 + e];
}

// The same through the scratch, the lane's elements interleaved: v[e] is element (2 e + lane /
// 16, lane % 16), so that each read of the warp is 32 consecutive floats (no bank conflict).
__device__ void fragment_interleaved(float* v, const FragC& frag, float* scratch) {
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    __syncwarp();
    wmma::store_matrix_sync(scratch, frag, kScratchLd, wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int e = 0; e < 8; ++e)
        v[e] = scratch[e * kWarpSize + lane];
}

// Column c of the lane's half (k = 0..31): rotated by the row so that the warp's 32 lanes, 16
// rows of kScoreLd floats apart, read 32 different banks.
__device__ int rotated_col(int k, int r, int half) {
    return half * 32 + (k + r + 16 * half) % 32;
}

// ---- forward ----

// Grid: (tiles * B * NH) blocks, the last query tiles first. Shared: forward_smem_bytes.
// kDropout: P's keep bits drawn (drop), else drop is unused.
template <class D, int kFrags, bool kDropout>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<kFrags>)
    attention_flash_mma_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l,
                                       FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int ld = l.HD + kPad;
    Carve carve{smem};
    D* qs = carve.take<D>(kRows * ld);                // (64, ld) queries
    D* ks = carve.take<D>(kCols * ld);                // (64, ld) keys
    D* vs = carve.take<D>(kCols * ld);                // (64, ld) values
    D* ps = carve.take<D>(kRows * kProbLd);           // (64, kProbLd) P
    float* ss = carve.take<float>(kRows * kScoreLd);  // (64, kScoreLd) S, then the rescale's
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int frags = l.HD / kFrag;
    const std::int64_t heads = l.B * l.NH;
    const std::int64_t tiles = (l.T + kRows - 1) / kRows;
    const std::int64_t qt = tiles - 1 - blockIdx.x / heads;
    const std::int64_t b = blockIdx.x % heads / l.NH;
    const int h = static_cast<int>(blockIdx.x % heads % l.NH);
    const int g = h / l.group;
    const std::int64_t i0 = qt * kRows;
    load_rows(qs, ld, qkv, l.qkv_row, b, l.T, i0, static_cast<std::int64_t>(h) * l.HD, l.HD);

    const int r = lane % kFrag, half = lane / kFrag;  // the lane's softmax row and half
    const std::int64_t w0 = i0 + warp * kFrag;        // the warp's first query
    const std::int64_t i = w0 + r;
    const D* qw = qs + warp * kFrag * ld;
    D* pw = ps + warp * kFrag * kProbLd;
    float* sw = ss + warp * kFrag * kScoreLd;
    float m = -INFINITY;  // the row's max, log2 units of the scaled score
    float lsum = 0.0f;    // sum of 2^(s - m)
    FragC acc[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
        wmma::fill_fragment(acc[f], 0.0f);
    // The warp's queries as fragments, for every key tile (shared memory then moves only K).
    __syncthreads();
    FragA<D> qa[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
        if (f < frags) wmma::load_matrix_sync(qa[f], qw + f * kFrag, ld);

    for (std::int64_t kt = 0; kt <= qt; ++kt) {
        const std::int64_t j0 = kt * kCols;
        __syncthreads();  // the previous K and V tiles are no longer read
        load_rows(ks, ld, qkv, l.qkv_row, b, l.T, j0, static_cast<std::int64_t>(l.NH + g) * l.HD,
                  l.HD);
        load_rows(vs, ld, qkv, l.qkv_row, b, l.T, j0,
                  static_cast<std::int64_t>(l.NH + l.KVH + g) * l.HD, l.HD);
        __syncthreads();
        if (w0 >= l.T) continue;  // the warp's queries are all past the end
        // 16-key blocks the warp sees: on the diagonal tile up to its own rows; none past T.
        const int nsub = static_cast<int>(
            min(static_cast<std::int64_t>(kt == qt ? warp + 1 : kColFrags), (l.T - j0 + 15) / 16));
        for (int kk = 0; kk < nsub; ++kk) {
            FragC s;
            mma_fragments_bt<D, kFrags>(s, qa, ks + kk * kFrag * ld, ld, frags);
            wmma::store_matrix_sync(sw + kk * kFrag, s, kScoreLd, wmma::mem_row_major);
        }
        __syncwarp();
        const int cols = nsub * kFrag;
        // The lane's scaled score in column c, -inf where masked.
        auto score = [&](int c) {
            const std::int64_t j = j0 + c;
            return c < cols && j <= i && j < l.T ? sw[r * kScoreLd + c] * l.scale_log2 : -INFINITY;
        };
        float tile_max = -INFINITY;
#pragma unroll 8
        for (int k = 0; k < 32; ++k)
            tile_max = fmaxf(tile_max, score(rotated_col(k, r, half)));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
        // The max moves only when a score passes it by 2^kRescaleAbove (always on the first tile).
        float factor = 1.0f;
        const bool rescale = tile_max > m + kRescaleAbove;
        if (rescale) {
            factor = exp2f(m - tile_max);  // 0 from m = -inf
            m = tile_max;
        }
        // Dropout: bit k of `kept` cleared where the lane's column rotated_col(k, r, half) is
        // dropped: one register, drawn before the loop below (drawn inside it, the kernels at
        // HD <= 64 spilled at sm_90).
        unsigned kept = ~0u;
        if (kDropout) {
            const std::int64_t at = l.row(b, h, i) * l.T + j0;  // P's offset of (i, j0)
#pragma unroll 1
            for (int k = 0; k < 32; ++k) {
                const int c = rotated_col(k, r, half);
                const std::int64_t j = j0 + c;
                if (c < cols && j <= i && j < l.T && !drop.keep(at + c)) kept &= ~(1u << k);
            }
        }
        float psum = 0.0f;
#pragma unroll 8
        for (int k = 0; k < 32; ++k) {
            const int c = rotated_col(k, r, half);
            const float s = score(c);
            const float p = s > -INFINITY ? exp2f(s - m) : 0.0f;
            psum += p;  // the softmax's own sum: dropout comes after it
            // What multiplies v_j: P, or 0 where dropped (1 / (1 - p) is applied to out).
            if (c < cols) pw[r * kProbLd + c] = from_f32<D>((kept >> k & 1u) != 0 ? p : 0.0f);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 16);
        lsum = lsum * factor + psum;
        // Rows whose max moved scale their output: through the warp's score rows, now free.
        if (__any_sync(0xffffffffu, rescale && factor > 0.0f)) {
#pragma unroll
            for (int f = 0; f < kFrags; ++f) {
                if (f >= frags) break;
                __syncwarp();
                wmma::store_matrix_sync(sw, acc[f], kScoreLd, wmma::mem_row_major);
                __syncwarp();
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    sw[r * kScoreLd + half * 8 + e] *= factor;
                __syncwarp();
                wmma::load_matrix_sync(acc[f], sw, kScoreLd, wmma::mem_row_major);
            }
        }
        __syncwarp();
        mma_ax<D, kFrags>(acc, pw, kProbLd, vs, ld, 0, nsub, frags);
    }
    if (w0 >= l.T) return;
    float inv = 1.0f / lsum;  // lsum >= 1: the max term is 2^0
    if (kDropout) inv *= drop.scale;
    if (half == 0 && i < l.T) lse[l.row(b, h, i)] = (m + log2f(lsum)) * kLn2;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        float v[8];
        fragment_row8(v, acc[f], sw);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            v[e] *= inv;
        if (i < l.T) store8(out + l.o(b, i, h) + f * kFrag + half * 8, v, false);
    }
}

// ---- backward ----

// Pass 1: dk, dv. Grid: (tiles * B * KVH) blocks, the first key tiles (most queries) first.
// Warp w owns keys j0 + 16 w .. + 16, their dK and dV in fragments. Shared: backward_smem_bytes.
template <class D, int kFrags>
__global__ void __launch_bounds__(kThreads, kBackwardBlocks<kFrags>)
    attention_flash_mma_backward_key_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                            const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int ld = l.HD + kPad;
    Carve carve{smem};
    D* ks = carve.take<D>(kRows * ld);                // (64, ld) the block's keys
    D* vs = carve.take<D>(kRows * ld);                // (64, ld) their values
    D* qs = carve.take<D>(kCols * ld);                // (64, ld) queries
    D* gos = carve.take<D>(kCols * ld);               // (64, ld) their dout
    D* ps = carve.take<D>(kRows * kProbLd);           // (64, kProbLd) P^T, then dS^T
    float* ss = carve.take<float>(kRows * kScoreLd);  // (64, kScoreLd) P^T in fp32
    float* scratch = carve.take<float>(kWarps * kFrag * kScratchLd);
    float* lse_s = carve.take<float>(kCols);  // (64) lse * log2(e)
    float* d_s = carve.take<float>(kCols);    // (64) D
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int frags = l.HD / kFrag;
    const std::int64_t heads = l.B * l.KVH;
    const std::int64_t tiles = (l.T + kRows - 1) / kRows;
    const std::int64_t kt = blockIdx.x / heads;
    const std::int64_t b = blockIdx.x % heads / l.KVH;
    const int g = static_cast<int>(blockIdx.x % heads % l.KVH);
    const std::int64_t j0 = kt * kRows;
    load_rows(ks, ld, qkv, l.qkv_row, b, l.T, j0, static_cast<std::int64_t>(l.NH + g) * l.HD, l.HD);
    load_rows(vs, ld, qkv, l.qkv_row, b, l.T, j0,
              static_cast<std::int64_t>(l.NH + l.KVH + g) * l.HD, l.HD);

    const int r = lane % kFrag, half = lane / kFrag;
    const std::int64_t w0 = j0 + warp * kFrag;  // the warp's first key
    const std::int64_t j = w0 + r;
    const D* kw = ks + warp * kFrag * ld;
    const D* vw = vs + warp * kFrag * ld;
    D* pw = ps + warp * kFrag * kProbLd;
    float* sw = ss + warp * kFrag * kScoreLd;
    float* scr = scratch + warp * kFrag * kScratchLd;
    FragC dk[kFrags], dv[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        wmma::fill_fragment(dk[f], 0.0f);
        wmma::fill_fragment(dv[f], 0.0f);
    }

    for (int h = g * l.group; h < (g + 1) * l.group; ++h) {
        for (std::int64_t qt = kt; qt < tiles; ++qt) {  // earlier queries see none of the keys
            const std::int64_t i0 = qt * kCols;
            __syncthreads();  // the previous query tile is no longer read
            const std::int64_t q_at = static_cast<std::int64_t>(h) * l.HD;
            load_rows(qs, ld, qkv, l.qkv_row, b, l.T, i0, q_at, l.HD);
            load_rows(gos, ld, dout, l.out_row, b, l.T, i0, q_at, l.HD);
            if (threadIdx.x < kCols) {
                const std::int64_t i = i0 + threadIdx.x;
                lse_s[threadIdx.x] = i < l.T ? lse[l.row(b, h, i)] * kLog2e : INFINITY;
            }
            __syncthreads();
            row_dots(d_s, gos, ld, out, l, b, h, i0);
            __syncthreads();
            if (w0 >= l.T) continue;  // the warp's keys are all past the end
            // 16-query blocks that see the warp's keys: from the diagonal on; none past T.
            const int lo = qt == kt ? warp : 0;
            const int hi =
                static_cast<int>(min(static_cast<std::int64_t>(kColFrags), (l.T - i0 + 15) / 16));
            for (int qq = lo; qq < hi; ++qq) {
                FragC s;
                mma_abt<D, kFrags>(s, kw, qs + qq * kFrag * ld, ld, frags);
                wmma::store_matrix_sync(sw + qq * kFrag, s, kScoreLd, wmma::mem_row_major);
            }
            __syncwarp();
#pragma unroll 4
            for (int k = 0; k < 32; ++k) {
                const int c = rotated_col(k, r, half);
                if (c < lo * kFrag || c >= hi * kFrag) continue;
                const std::int64_t i = i0 + c;
                const bool seen = j <= i && i < l.T && j < l.T;
                const float p = seen ? exp2f(sw[r * kScoreLd + c] * l.scale_log2 - lse_s[c]) : 0.0f;
                // Dropped: 0 into dV, -P for the dS loop below.
                const bool dropped = drop.on && seen && !drop.keep(l.row(b, h, i) * l.T + j);
                sw[r * kScoreLd + c] = dropped ? -p : p;
                pw[r * kProbLd + c] = from_f32<D>(dropped ? 0.0f : p);
            }
            __syncwarp();
            mma_ax<D, kFrags>(dv, pw, kProbLd, gos, ld, lo, hi, frags);
            // dP^T and dS^T block by block; dS^T overwrites P^T's 16-bit copy, used up above.
            for (int qq = lo; qq < hi; ++qq) {
                FragC dp;
                mma_abt<D, kFrags>(dp, vw, gos + qq * kFrag * ld, ld, frags);
                float v[8];
                fragment_interleaved(v, dp, scr);
                const int c = qq * kFrag + r;  // the lane's column: query c, D_c
                const float Dc = d_s[c];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int row = 2 * e + half;  // key j0 + 16 warp + row
                    float pe = sw[row * kScoreLd + c], dpe = v[e];
                    if (drop.on) {  // dP = (dout . v) k: k = 0 where P was stored negative
                        dpe *= pe < 0.0f ? 0.0f : drop.scale;
                        pe = fabsf(pe);
                    }
                    pw[row * kProbLd + c] = from_f32<D>(pe * (dpe - Dc) * l.scale);
                }
            }
            __syncwarp();
            mma_ax<D, kFrags>(dk, pw, kProbLd, qs, ld, lo, hi, frags);
        }
    }
    if (w0 >= l.T) return;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        float v[8];
        fragment_row8(v, dk[f], scr);
        if (j < l.T) store8(dqkv + l.k(b, j, g) + f * kFrag + half * 8, v, true);
        fragment_row8(v, dv[f], scr);
        if (drop.on) {  // dV summed the kept P unscaled
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] *= drop.scale;
        }
        if (j < l.T) store8(dqkv + l.v(b, j, g) + f * kFrag + half * 8, v, true);
    }
}

// Pass 2: dq. Grid: (tiles * B * NH) blocks, the last query tiles first; warp w owns queries
// i0 + 16 w .. + 16, their dQ in fragments. Shared: backward_smem_bytes.
template <class D, int kFrags>
__global__ void __launch_bounds__(kThreads, kBackwardBlocks<kFrags>)
    attention_flash_mma_backward_query_kernel(D* dqkv, const D* dout, const D* out, const D* qkv,
                                              const float* lse, MmaLayout l, FlashDropout drop) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int ld = l.HD + kPad;
    Carve carve{smem};
    D* qs = carve.take<D>(kRows * ld);                // (64, ld) the block's queries
    D* gos = carve.take<D>(kRows * ld);               // (64, ld) their dout
    D* ks = carve.take<D>(kCols * ld);                // (64, ld) keys
    D* vs = carve.take<D>(kCols * ld);                // (64, ld) values
    D* ps = carve.take<D>(kRows * kProbLd);           // (64, kProbLd) dS
    float* ss = carve.take<float>(kRows * kScoreLd);  // (64, kScoreLd) P in fp32
    float* scratch = carve.take<float>(kWarps * kFrag * kScratchLd);
    float* lse_s = carve.take<float>(kRows);  // (64) lse * log2(e)
    float* d_s = carve.take<float>(kRows);    // (64) D
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int frags = l.HD / kFrag;
    const std::int64_t heads = l.B * l.NH;
    const std::int64_t tiles = (l.T + kRows - 1) / kRows;
    const std::int64_t qt = tiles - 1 - blockIdx.x / heads;
    const std::int64_t b = blockIdx.x % heads / l.NH;
    const int h = static_cast<int>(blockIdx.x % heads % l.NH);
    const int g = h / l.group;
    const std::int64_t i0 = qt * kRows;
    const std::int64_t q_at = static_cast<std::int64_t>(h) * l.HD;
    load_rows(qs, ld, qkv, l.qkv_row, b, l.T, i0, q_at, l.HD);
    load_rows(gos, ld, dout, l.out_row, b, l.T, i0, q_at, l.HD);
    if (threadIdx.x < kRows) {
        const std::int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < l.T ? lse[l.row(b, h, i)] * kLog2e : INFINITY;
    }
    __syncthreads();
    row_dots(d_s, gos, ld, out, l, b, h, i0);

    const int r = lane % kFrag, half = lane / kFrag;
    const std::int64_t w0 = i0 + warp * kFrag;  // the warp's first query
    const std::int64_t i = w0 + r;
    const D* qw = qs + warp * kFrag * ld;
    const D* gw = gos + warp * kFrag * ld;
    D* pw = ps + warp * kFrag * kProbLd;
    float* sw = ss + warp * kFrag * kScoreLd;
    float* scr = scratch + warp * kFrag * kScratchLd;
    FragC dq[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f)
        wmma::fill_fragment(dq[f], 0.0f);
    // The warp's queries and dout rows as fragments, for every key tile.
    FragA<D> qa[kFrags], ga[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        wmma::load_matrix_sync(qa[f], qw + f * kFrag, ld);
        wmma::load_matrix_sync(ga[f], gw + f * kFrag, ld);
    }

    for (std::int64_t kt = 0; kt <= qt; ++kt) {
        const std::int64_t j0 = kt * kCols;
        __syncthreads();  // the previous K and V tiles are no longer read (and d_s is written)
        load_rows(ks, ld, qkv, l.qkv_row, b, l.T, j0, static_cast<std::int64_t>(l.NH + g) * l.HD,
                  l.HD);
        load_rows(vs, ld, qkv, l.qkv_row, b, l.T, j0,
                  static_cast<std::int64_t>(l.NH + l.KVH + g) * l.HD, l.HD);
        __syncthreads();
        if (w0 >= l.T) continue;
        const int nsub = static_cast<int>(
            min(static_cast<std::int64_t>(kt == qt ? warp + 1 : kColFrags), (l.T - j0 + 15) / 16));
        for (int kk = 0; kk < nsub; ++kk) {
            FragC s;
            mma_fragments_bt<D, kFrags>(s, qa, ks + kk * kFrag * ld, ld, frags);
            wmma::store_matrix_sync(sw + kk * kFrag, s, kScoreLd, wmma::mem_row_major);
        }
        __syncwarp();
        const float L = lse_s[warp * kFrag + r];
#pragma unroll 4
        for (int k = 0; k < 32; ++k) {
            const int c = rotated_col(k, r, half);
            if (c >= nsub * kFrag) continue;
            const std::int64_t jj = j0 + c;
            const bool seen = jj <= i && jj < l.T;
            const float p = seen ? exp2f(sw[r * kScoreLd + c] * l.scale_log2 - L) : 0.0f;
            // Dropped: -P, for the dS loop below.
            const bool dropped =
                drop.on && seen && i < l.T && !drop.keep(l.row(b, h, i) * l.T + jj);
            sw[r * kScoreLd + c] = dropped ? -p : p;
        }
        __syncwarp();
        for (int kk = 0; kk < nsub; ++kk) {
            FragC dp;
            mma_fragments_bt<D, kFrags>(dp, ga, vs + kk * kFrag * ld, ld, frags);
            float v[8];
            fragment_interleaved(v, dp, scr);
            const int c = kk * kFrag + r;  // the lane's column: key j0 + c
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int row = 2 * e + half;  // query i0 + 16 warp + row
                float pe = sw[row * kScoreLd + c], dpe = v[e];
                if (drop.on) {  // dP = (dout . v) k: k = 0 where P was stored negative
                    dpe *= pe < 0.0f ? 0.0f : drop.scale;
                    pe = fabsf(pe);
                }
                pw[row * kProbLd + c] = from_f32<D>(pe * (dpe - d_s[warp * kFrag + row]) * l.scale);
            }
        }
        __syncwarp();
        mma_ax<D, kFrags>(dq, pw, kProbLd, ks, ld, 0, nsub, frags);
    }
    if (w0 >= l.T) return;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
        if (f >= frags) break;
        float v[8];
        fragment_row8(v, dq[f], scr);
        if (i < l.T) store8(dqkv + l.q(b, i, h) + f * kFrag + half * 8, v, true);
    }
}

// ---- host side ----

bool aligned16(std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    return true;
}

// The kernels compiled for HD: 2, 4 or 8 fragments of 16 columns, so that the accumulator
// arrays stay in registers (their indices known at compile time).
template <class D>
auto forward_kernel_for(std::int64_t HD, bool dropout) {
    if (dropout) {
        if (HD <= 32) return attention_flash_mma_forward_kernel<D, 2, true>;
        if (HD <= 64) return attention_flash_mma_forward_kernel<D, 4, true>;
        return attention_flash_mma_forward_kernel<D, 8, true>;
    }
    if (HD <= 32) return attention_flash_mma_forward_kernel<D, 2, false>;
    if (HD <= 64) return attention_flash_mma_forward_kernel<D, 4, false>;
    return attention_flash_mma_forward_kernel<D, 8, false>;
}
template <class D>
auto key_kernel_for(std::int64_t HD) {
    if (HD <= 32) return attention_flash_mma_backward_key_kernel<D, 2>;
    if (HD <= 64) return attention_flash_mma_backward_key_kernel<D, 4>;
    return attention_flash_mma_backward_key_kernel<D, 8>;
}
template <class D>
auto query_kernel_for(std::int64_t HD) {
    if (HD <= 32) return attention_flash_mma_backward_query_kernel<D, 2>;
    if (HD <= 64) return attention_flash_mma_backward_query_kernel<D, 4>;
    return attention_flash_mma_backward_query_kernel<D, 8>;
}

template <class Elem>
void require_supported(const char* op, std::int64_t HD,
                       std::initializer_list<const void*> pointers) {
    NAPKIN_CUDA_REQUIRE(attention_flash_mma_supported<Elem>(HD, pointers),
                        op << ": takes bf16 or fp16 storage, HD a multiple of 16 in [16, 128] and "
                              "16-byte aligned pointers (HD "
                           << HD << ")");
}

}  // namespace

namespace mma_detail {

MmaLayout make_mma_layout(const char* op, std::int64_t B, std::int64_t T, int NH, int KVH,
                          std::int64_t HD) {
    NAPKIN_CUDA_REQUIRE(B >= 0 && T >= 0, op << ": B " << B << ", T " << T);
    NAPKIN_CUDA_REQUIRE(NH >= 1 && KVH >= 1 && NH % KVH == 0,
                        op << ": KVH " << KVH << " must divide NH " << NH);
    NAPKIN_CUDA_REQUIRE(HD >= kFrag && HD <= kMaxHD && HD % kFrag == 0,
                        op << ": HD " << HD << " is not a multiple of 16 in [16, 128]");
    MmaLayout l;
    l.B = B;
    l.T = T;
    l.HD = static_cast<int>(HD);
    l.NH = NH;
    l.KVH = KVH;
    l.group = NH / KVH;
    l.qkv_row = (NH + 2ll * KVH) * HD;
    l.out_row = NH * HD;
    l.scale = 1.0f / sqrtf(static_cast<float>(HD));
    l.scale_log2 = l.scale * kLog2e;
    return l;
}

unsigned mma_grid(const char* op, std::int64_t tiles, std::int64_t heads) {
    NAPKIN_CUDA_REQUIRE(tiles * heads <= kMaxGridX,
                        op << ": " << tiles << " tiles of " << heads << " heads");
    return static_cast<unsigned>(tiles * heads);
}

}  // namespace mma_detail

template <class Elem>
bool attention_flash_mma_supported(std::int64_t HD, std::initializer_list<const void*> pointers) {
    const bool sixteen_bit = !std::is_same_v<Elem, float>;
    return sixteen_bit && HD >= kFrag && HD <= kMaxHD && HD % kFrag == 0 && aligned16(pointers);
}

template <class Elem>
void attention_flash_mma_forward(const AttentionFlashForwardArgs<Elem>& args,
                                 const Launch& launch) {
    const auto& [out, lse, qkv, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const char* op = "attention_flash_mma_forward";
    require_supported<Elem>(op, HD, {out, qkv});
    const MmaLayout l = make_mma_layout(op, B, T, NH, KVH, HD);
    const FlashDropout drop = flash_dropout(op, dropout);
    if (B * T == 0) return;
    if (mma_detail::fa2_supported(HD))
        return mma_detail::fa2_forward(dev(out), lse, dev(qkv), l, drop, stream);
    const std::int64_t tiles = (T + kRows - 1) / kRows;
    const unsigned grid = mma_grid(op, tiles, B * NH);
    const std::size_t smem = forward_smem_bytes(HD);
    auto kernel = forward_kernel_for<device_t<Elem>>(HD, drop.on);
    allow_smem(kernel, smem, op);
    kernel<<<grid, kThreads, smem, stream>>>(dev(out), lse, dev(qkv), l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Elem>
void attention_flash_mma_backward(const AttentionFlashBackwardArgs<Elem>& args,
                                  const Launch& launch) {
    const auto& [dqkv, dout, out, qkv, lse, dims, dropout] = args;
    const auto& [B, T, NH, KVH, HD] = dims;
    cudaStream_t stream = launch.stream;
    const char* op = "attention_flash_mma_backward";
    require_supported<Elem>(op, HD, {dqkv, dout, out, qkv});
    const MmaLayout l = make_mma_layout(op, B, T, NH, KVH, HD);
    const FlashDropout drop = flash_dropout(op, dropout);
    if (B * T == 0) return;
    if (mma_detail::fa2_supported(HD))
        return mma_detail::fa2_backward(dev(dqkv), dev(dout), dev(out), dev(qkv), lse, l, drop,
                                        stream);
    const std::int64_t tiles = (T + kRows - 1) / kRows;
    const std::size_t smem = backward_smem_bytes(HD);
    auto key_kernel = key_kernel_for<device_t<Elem>>(HD);
    allow_smem(key_kernel, smem, op);
    key_kernel<<<mma_grid(op, tiles, B * KVH), kThreads, smem, stream>>>(
        dev(dqkv), dev(dout), dev(out), dev(qkv), lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
    auto query_kernel = query_kernel_for<device_t<Elem>>(HD);
    allow_smem(query_kernel, smem, op);
    query_kernel<<<mma_grid(op, tiles, B * NH), kThreads, smem, stream>>>(
        dev(dqkv), dev(dout), dev(out), dev(qkv), lse, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template bool attention_flash_mma_supported<float>(std::int64_t,
                                                   std::initializer_list<const void*>);
#define NAPKIN_CUDA_ATTENTION_MMA_INSTANTIATE(E)                                        \
    template bool attention_flash_mma_supported<E>(std::int64_t,                        \
                                                   std::initializer_list<const void*>); \
    template void attention_flash_mma_forward<E>(const AttentionFlashForwardArgs<E>&,   \
                                                 const Launch&);                        \
    template void attention_flash_mma_backward<E>(const AttentionFlashBackwardArgs<E>&, \
                                                  const Launch&);
NAPKIN_CUDA_ATTENTION_MMA_INSTANTIATE(bf16_t)
NAPKIN_CUDA_ATTENTION_MMA_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_ATTENTION_MMA_INSTANTIATE

}  // namespace napkin::cuda
