// The forward of the mma.sync flash attention (FlashAttention-2's algorithm; docs/CUDA.md "Flash
// attention on mma.sync"), behind cuda::attention_flash_mma_forward for HD 64 and 128 on sm_80
// and later (attention_mma.cuh). The contract is the SIMT kernels' and the CPU's
// (kernels/cpu/attention.cpp): out and the fp32 logsumexp lse (natural log of the scaled
// scores), causal, GQA/MQA, scale 1 / sqrt(HD), fp32 softmax statistics and accumulation,
// optional dropout on P with the CPU's keep bits.
//
// A block of 4 warps owns kBlockM = 64 kM queries of one (b, h), 16 kM per warp, the last query
// tiles (most keys) launched first. Q is loaded once by cp.async; K and V tiles of 64 keys stream
// through kStages shared-memory stages (fa2::Pipeline: tile it + kStages - 1 is in flight while
// tile it is multiplied), up to the tile holding the block's last query (causal). Per key tile,
// each warp:
//   S = Q K^T         m16n8k16 over HD; Q's A fragments from registers (HD 64) or the tile
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
#include <cstdint>

#include "kernels/cuda/attention_fa2.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace napkin::cuda::mma_detail {

namespace {

using fa2::kThreads;
using fa2::kWarps;
using fa2::Tile;

// Per head dimension: m-tiles per warp (kM: each B fragment read from shared memory feeds kM
// products), keys per tile, shared-memory stages of K and V, whether the warp's Q fragments stay
// in registers, and the blocks per SM the registers are bounded for (2: 255 registers a thread).
// Shared-memory reads per m16n8k16 product (an SM reads 128 bytes a clock; docs/CUDA.md, "Flash
// attention on mma.sync", has the arithmetic): 128 bytes at HD 64 (Q in registers, two
// m-tiles), 288 at HD 128 (one m-tile: O alone is 64 fp32 registers a lane there). ptxas (nvcc
// 13, sm_80 and sm_90) spills nothing, with or without dropout.
template <int kHD>
struct ForwardConfig {
    static_assert(kHD == 64 || kHD == 128);
    static constexpr int kM = kHD == 64 ? 2 : 1, kBlockN = kHD == 64 ? 32 : 64;
    static constexpr int kStages = kHD == 64 ? 3 : 2, kMinBlocks = 2;
    static constexpr bool kQInRegisters = kHD == 64;
};

template <int kHD>
constexpr int kBlockM = 16 * ForwardConfig<kHD>::kM* kWarps;

// Q (kBlockM, HD), then kStages K tiles and kStages V tiles (kBlockN, HD), 16-bit: 40 KiB at
// HD 64, 80 KiB at HD 128.
template <int kHD>
constexpr std::size_t forward_smem_bytes() {
    using Config = ForwardConfig<kHD>;
    return static_cast<std::size_t>(kBlockM<kHD> + 2 * Config::kStages * Config::kBlockN) * kHD * 2;
}

// One key tile of the online softmax for the warp's rows: s (16 kM x 64 scores of rows row0 ..,
// keys j0 ..) becomes P, zeroed where dropped; the running max mx (log2 units of the scaled
// score) and sum move, and o takes their correction. `masked`: the tile crosses the diagonal.
template <bool kDropout, int kM, int kN, int kD>
__device__ void online_softmax(float (&s)[kM][kN][4], float (&o)[kM][kD][4], float (&mx)[kM][2],
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
            tile_max = fa2::quad_max(tile_max);
            const float m_new = fmaxf(mx[m][hh], tile_max * l.scale_log2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet
            const float correction = exp2f(mx[m][hh] - m_use);
            mx[m][hh] = m_new;
            sum[m][hh] *= correction;
#pragma unroll
            for (int d = 0; d < kD; ++d) {
                o[m][d][2 * hh] *= correction;
                o[m][d][2 * hh + 1] *= correction;
            }
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

// Grid: (query tiles * B * NH) blocks, the last query tiles first. Shared:
// forward_smem_bytes<kHD>.
template <class D, int kHD, bool kDropout>
__global__ void __launch_bounds__(kThreads, ForwardConfig<kHD>::kMinBlocks)
    attention_fa2_forward_kernel(D* out, float* lse, const D* qkv, MmaLayout l, FlashDropout drop) {
    using Config = ForwardConfig<kHD>;
    constexpr int kM = Config::kM, kStages = Config::kStages, kRows = kBlockM<kHD>;
    constexpr int kBlockN = Config::kBlockN, kN = kBlockN / 8;  // keys per tile, S's n-tiles
    constexpr int kD = kHD / 8;                                 // O's n-tiles
    extern __shared__ __align__(128) unsigned char smem[];
    using Tile = Tile<D, kHD>;
    const std::uint32_t base = shared_address(smem);
    const Tile q{base};
    auto k_tile = [=](int s) { return Tile{base + (kRows + s * kBlockN) * Tile::kRowBytes}; };
    auto v_tile = [=](int s) {
        return Tile{base + (kRows + (kStages + s) * kBlockN) * Tile::kRowBytes};
    };
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize, g = lane >> 2, t = lane & 3;
    const fa2::QueryBlock block = fa2::query_block(l, kRows);
    const std::int64_t b = block.b, i0 = block.i0;  // (not structured bindings: lambdas take them)
    const int h = block.h, kvh = block.kvh;
    const int key_tiles = fa2::causal_key_tiles<kBlockN>(l, i0, kRows);

    const std::int64_t hd = l.HD;
    fa2::load_rows<kRows>(q, qkv + h * hd, l.qkv_row, b, l.T, i0);
    cp_async_commit();
    auto kv = fa2::kv_pipeline<kStages, kBlockN>(k_tile, v_tile, qkv, l, b, kvh, key_tiles);
    kv.prologue();
    cp_async_wait<kStages - 1>();  // Q: the oldest group
    __syncthreads();

    const int w_row0 = warp * 16 * kM;  // the warp's rows, from i0
    const std::int64_t w_first = i0 + w_row0, w_last = w_first + 16 * kM - 1;
    const auto qa = fa2::a_source<Config::kQInRegisters, kM>(q, w_row0);
    float o[kM][kD][4];
    fa2::zero(o);
    float mx[kM][2], sum[kM][2];  // per row: the running max (log2 units) and sum
    fa2::for_each_row<kM>([&](int m, int hh) {
        mx[m][hh] = -INFINITY;
        sum[m][hh] = 0.0f;
    });

    for (int it = 0; it < key_tiles; ++it) {
        const int stage = kv.next(it);
        const std::int64_t j0 = static_cast<std::int64_t>(it) * kBlockN;
        if (w_first >= l.T || j0 > w_last) continue;  // nothing the warp's rows see
        float s[kM][kN][4];
        fa2::zero(s);
        fa2::warp_abt<D>(s, qa, k_tile(stage), 0);
        online_softmax<kDropout>(s, o, mx, sum, w_first, j0, j0 + kBlockN - 1 > w_first,
                                 l.row(b, h, 0), l, drop);
        std::uint32_t p[kM][kN / 2][4];
        fa2::pack_a<D>(p, s);
        fa2::warp_ab<D>(o, p, v_tile(stage), 0);
    }

    fa2::for_each_row<kM>([&](int m, int hh) {
        const float total = fa2::quad_sum(sum[m][hh]);  // >= 1 for a row that saw a key
        const std::int64_t i = w_first + 16 * m + g + 8 * hh;
        if (i >= l.T) return;
        if (t == 0) lse[l.row(b, h, i)] = (mx[m][hh] + log2f(total)) * kLn2;
        fa2::store_row(out + l.o(b, i, h), o, m, hh, (kDropout ? drop.scale : 1.0f) / total, false);
    });
}

template <class D, int kHD>
void launch_forward(D* out, float* lse, const D* qkv, const MmaLayout& l, const FlashDropout& drop,
                    cudaStream_t stream) {
    const char* op = "attention_flash_mma_forward";
    const std::int64_t tiles = (l.T + kBlockM<kHD> - 1) / kBlockM<kHD>;
    const unsigned grid = mma_grid(op, tiles, l.B * l.NH);
    constexpr std::size_t smem = forward_smem_bytes<kHD>();
    auto kernel = drop.on ? attention_fa2_forward_kernel<D, kHD, true>
                          : attention_fa2_forward_kernel<D, kHD, false>;
    allow_smem(kernel, smem, op);
    kernel<<<grid, kThreads, smem, stream>>>(out, lse, qkv, l, drop);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fa2_supported(std::int64_t HD) {
    if (HD != 64 && HD != 128) return false;
    int device = 0, major = 0;
    NAPKIN_CUDA_CHECK(cudaGetDevice(&device));
    NAPKIN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 8;
}

template <class D>
void fa2_forward(D* out, float* lse, const D* qkv, const MmaLayout& l, const FlashDropout& drop,
                 cudaStream_t stream) {
    if (l.HD == 64) return launch_forward<D, 64>(out, lse, qkv, l, drop, stream);
    launch_forward<D, 128>(out, lse, qkv, l, drop, stream);
}

template void fa2_forward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                         const MmaLayout&, const FlashDropout&, cudaStream_t);
template void fa2_forward<__half>(__half*, float*, const __half*, const MmaLayout&,
                                  const FlashDropout&, cudaStream_t);

}  // namespace napkin::cuda::mma_detail
