// quantize / dequantize on the GPU (declared in kernels/quantize.h; the CPU twin, the spec, is
// kernels/cpu/quantize.cpp): the amax by block maxima and one atomicMax per block, the scale
// pair by one thread, the cast and its inverse by grid-stride loops through cuda_fp8.h's
// conversions (round to nearest even, saturating: core/fp8.h's rule on both sides). Delayed
// scaling casts and takes the amax in one grid-stride pass; the history roll is a thread a slot.
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/quantize.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

// The format of a code type, with its largest finite value.
template <class Q>
struct Fp8Format;
template <>
struct Fp8Format<f8e4m3_t> {
    static constexpr __nv_fp8_interpretation_t kind = __NV_E4M3;
    static constexpr float kMax = 448.0f;
};
template <>
struct Fp8Format<f8e5m2_t> {
    static constexpr __nv_fp8_interpretation_t kind = __NV_E5M2;
    static constexpr float kMax = 57344.0f;
};

// amax_bits (the bits of a non-negative float, in scale[0]) = max(itself, max |inp|), NaN
// skipped (fmaxf ignores a NaN operand).
template <class D>
__global__ void quantize_amax_kernel(unsigned* amax_bits, const D* inp, std::int64_t n) {
    __shared__ float shared[kWarpSize];
    float m = 0.0f;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        m = fmaxf(m, fabsf(to_f32(inp[i])));
    m = block_max(m, shared);
    if (threadIdx.x == 0) atomicMax(amax_bits, float_bits(m));
}

// pair (kFp8ScaleFloats) = (max / amax, its inverse at kFp8ScaleInv, zeros): kernels/quantize.h's
// rule (fp8_scale) and layout.
__device__ void write_scale_pair(float* pair, float amax, float max_finite) {
    float s = 1.0f;
    if (amax != 0.0f && amax < INFINITY) {
        s = max_finite / amax;
        if (!(s < INFINITY)) s = FLT_MAX;
    }
    for (int i = 1; i < kFp8ScaleFloats; ++i)
        pair[i] = 0.0f;
    pair[0] = s;
    pair[kFp8ScaleInv] = 1.0f / s;
}

// The scale pair from the amax in scale[0]; record (may be null) = max(record, amax).
__global__ void quantize_scale_kernel(float* scale, float max_finite, float* record) {
    const float amax = scale[0];
    if (record != nullptr && amax > *record) *record = amax;
    write_scale_pair(scale, amax, max_finite);
}

// Delayed scaling: out = fp8(inp * delayed[0]), amax_bits (a history's entry 0, >= +0) =
// max(itself, max |inp|) by one atomicMax per block, scale = delayed (block 0).
template <class D>
__global__ void quantize_delayed_kernel(__nv_fp8_storage_t* out, float* scale, unsigned* amax_bits,
                                        const float* delayed, const D* inp, std::int64_t n,
                                        __nv_fp8_interpretation_t kind) {
    __shared__ float shared[kWarpSize];
    const float s = delayed[0];
    float m = 0.0f;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float x = to_f32(inp[i]);
        m = fmaxf(m, fabsf(x));
        out[i] = __nv_cvt_float_to_fp8(x * s, __NV_SATFINITE, kind);
    }
    m = block_max(m, shared);
    if (threadIdx.x == 0 && amax_bits != nullptr) atomicMax(amax_bits, float_bits(m));
    if (blockIdx.x == 0 && threadIdx.x < kFp8ScaleFloats) scale[threadIdx.x] = delayed[threadIdx.x];
}

// One thread per slot: the pair from the history's maximum, then the shift (kernels/quantize.h).
__global__ void amax_history_roll_kernel(float* history, float* scales, std::int64_t slots,
                                         std::int64_t e4m3_slots, std::int64_t H) {
    const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    if (r >= slots) return;
    float* h = history + r * H;
    float m = 0.0f;
    for (std::int64_t j = 0; j < H; ++j)
        if (h[j] > m) m = h[j];
    write_scale_pair(scales + r * kFp8ScaleFloats, m,
                     r < e4m3_slots ? Fp8Format<f8e4m3_t>::kMax : Fp8Format<f8e5m2_t>::kMax);
    for (std::int64_t j = H - 1; j > 0; --j)
        h[j] = h[j - 1];
    h[0] = 0.0f;
}

template <class D>
__global__ void quantize_cast_kernel(__nv_fp8_storage_t* out, const float* scale, const D* inp,
                                     std::int64_t n, __nv_fp8_interpretation_t kind) {
    const float s = scale[0];
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        out[i] = __nv_cvt_float_to_fp8(to_f32(inp[i]) * s, __NV_SATFINITE, kind);
}

template <class D>
__global__ void dequantize_kernel(D* out, const __nv_fp8_storage_t* inp, const float* scale,
                                  std::int64_t n, __nv_fp8_interpretation_t kind) {
    const float s = scale[kFp8ScaleInv];
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = __half2float(__half(__nv_cvt_fp8_to_halfraw(inp[i], kind)));  // exact
        out[i] = from_f32<D>(v * s);
    }
}

// ---- 64 x 64 tiles of codes (quantize_transpose, transpose_fp8; kernels/quantize.h): 256
// threads, thread t on row t / 4, 16-element chunk t % 4 of the tile when reading rows, and on
// column t / 4, 16-row chunk t % 4 when writing the transpose. The shared tile holds the codes
// row-major, 64 bytes a row, chunk k of row i at position k ^ (i / 16 % 4): a warp's 16-byte
// stores cover two whole rows, and a column read by a warp (8 columns x 4 row chunks) touches
// 8 banks, 4 threads to a word.
constexpr int kTile = 64;
constexpr int kTileThreads = 256;
constexpr int kChunk = 16;  // bytes: codes per thread and per 16-byte access

struct Bytes16 {
    std::uint8_t b[kChunk];
};

__device__ __forceinline__ int tile_slot(int row, int chunk) {
    return row * (kTile / kChunk) + (chunk ^ ((row / kChunk) % (kTile / kChunk)));
}

// The 16 codes of tile column `col`, rows 16 q .. 16 q + 15.
__device__ __forceinline__ Bytes16 tile_column(const uint4* tile, int col, int q) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(tile);
    Bytes16 v;
#pragma unroll
    for (int b = 0; b < kChunk; ++b) {
        const int row = q * kChunk + b;
        v.b[b] = bytes[tile_slot(row, col / kChunk) * kChunk + col % kChunk];
    }
    return v;
}

// dst[0 .. 16) = v, or its first `count` bytes one at a time (an edge, or unaligned).
__device__ __forceinline__ void store_chunk(std::uint8_t* dst, const Bytes16& v, int count,
                                            bool vector) {
    if (vector && count == kChunk) {
        uint4 w;
        memcpy(&w, v.b, sizeof(w));
        *reinterpret_cast<uint4*>(dst) = w;
        return;
    }
#pragma unroll  // constant indices keep v in registers
    for (int b = 0; b < kChunk; ++b)
        if (b < count) dst[b] = v.b[b];
}

// The tile's second half: each thread's 16 codes of a column of the shared tile to out_t (C, R).
__device__ __forceinline__ void write_transposed(std::uint8_t* out_t, const uint4* tile,
                                                 std::int64_t R, std::int64_t C, std::int64_t r0,
                                                 std::int64_t c0, bool vector) {
    const int col = threadIdx.x / 4, q = threadIdx.x % 4;
    const std::int64_t c = c0 + col, r = r0 + q * kChunk;
    if (c >= C || r >= R) return;
    const int count = static_cast<int>(R - r < kChunk ? R - r : kChunk);
    store_chunk(out_t + c * R + r, tile_column(tile, col, q), count, vector);
}

// out (R, C) and/or out_t (C, R) = fp8(inp * s[0]), one tile a block (grid x over rows, up to
// 2^31 - 1 tiles: the tokens; y over columns, up to 65535). amax_bits (or null) = max(itself, max
// |inp|) by one atomicMax per block; copy (or null) = s's pair, by block (0, 0). vector: every
// pointer and row start 16-byte aligned.
template <class D>
__global__ void quantize_transpose_kernel(__nv_fp8_storage_t* out, __nv_fp8_storage_t* out_t,
                                          float* copy, unsigned* amax_bits, const float* s_pair,
                                          const D* inp, std::int64_t R, std::int64_t C,
                                          __nv_fp8_interpretation_t kind, bool vector) {
    __shared__ uint4 tile[kTile * kTile / kChunk];
    __shared__ float shared[kWarpSize];
    constexpr int kPer = static_cast<int>(sizeof(uint4) / sizeof(D));  // elements per load
    const float s = s_pair[0];
    const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
    const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
    const int row = threadIdx.x / 4, chunk = threadIdx.x % 4;
    const std::int64_t r = r0 + row, c = c0 + chunk * kChunk;
    const int count = r < R && c < C ? static_cast<int>(C - c < kChunk ? C - c : kChunk) : 0;
    float m = 0.0f;
    Bytes16 v{};
    const D* src = inp + r * C + c;
#pragma unroll
    for (int j = 0; j < kChunk; j += kPer) {
        D x[kPer];
        if (vector && count == kChunk) {
            const uint4 w = *reinterpret_cast<const uint4*>(src + j);
            memcpy(static_cast<void*>(x), &w, sizeof(w));
        } else {
#pragma unroll
            for (int e = 0; e < kPer; ++e)
                x[e] = j + e < count ? src[j + e] : D(0.0f);
        }
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
            const float f = to_f32(x[e]);
            m = fmaxf(m, fabsf(f));
            v.b[j + e] = __nv_cvt_float_to_fp8(f * s, __NV_SATFINITE, kind);
        }
    }
    if (out != nullptr && count > 0) store_chunk(out + r * C + c, v, count, vector);
    if (out_t != nullptr) {
        memcpy(&tile[tile_slot(row, chunk)], v.b, sizeof(uint4));
        __syncthreads();
        write_transposed(out_t, tile, R, C, r0, c0, vector);
    }
    if (amax_bits != nullptr) {
        m = block_max(m, shared);
        if (threadIdx.x == 0) atomicMax(amax_bits, float_bits(m));
    }
    if (copy != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x < kFp8ScaleFloats)
        copy[threadIdx.x] = s_pair[threadIdx.x];
}

// out (C, R) = inp (R, C), bytes, through the same tiles.
__global__ void transpose_fp8_kernel(std::uint8_t* out, const std::uint8_t* inp, std::int64_t R,
                                     std::int64_t C, bool vector) {
    __shared__ uint4 tile[kTile * kTile / kChunk];
    const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
    const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
    const int row = threadIdx.x / 4, chunk = threadIdx.x % 4;
    const std::int64_t r = r0 + row, c = c0 + chunk * kChunk;
    const int count = r < R && c < C ? static_cast<int>(C - c < kChunk ? C - c : kChunk) : 0;
    Bytes16 v{};
    const std::uint8_t* src = inp + r * C + c;
    if (vector && count == kChunk) {
        const uint4 w = *reinterpret_cast<const uint4*>(src);
        memcpy(v.b, &w, sizeof(w));
    } else {
#pragma unroll
        for (int b = 0; b < kChunk; ++b)
            if (b < count) v.b[b] = src[b];
    }
    memcpy(&tile[tile_slot(row, chunk)], v.b, sizeof(uint4));
    __syncthreads();
    write_transposed(out, tile, R, C, r0, c0, vector);
}

bool aligned16(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

dim3 tile_grid(std::int64_t R, std::int64_t C, const char* op) {
    const std::int64_t x = (R + kTile - 1) / kTile, y = (C + kTile - 1) / kTile;
    NAPKIN_CUDA_REQUIRE(x <= 0x7fffffff && y <= 65535,
                        op << ": " << R << " x " << C << " is more tiles than a grid holds");
    return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <class Q>
__nv_fp8_storage_t* codes(Q* p) {
    return reinterpret_cast<__nv_fp8_storage_t*>(p);
}
template <class Q>
const __nv_fp8_storage_t* codes(const Q* p) {
    return reinterpret_cast<const __nv_fp8_storage_t*>(p);
}

// Current scaling's first two launches: the scale pair from inp's own amax (kept in *amax when
// given), scale[0] zeroed first as the amax kernels' +0.
template <class Q, class T>
void scale_from_own_amax(float* scale, float* amax, const T* inp, std::int64_t n,
                         cudaStream_t stream) {
    NAPKIN_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), stream));  // amax = +0
    if (n > 0) {
        const unsigned blocks = std::min(grid_for(n, kBlock), 1024u);  // each adds one atomic
        quantize_amax_kernel<<<blocks, kBlock, 0, stream>>>(reinterpret_cast<unsigned*>(scale),
                                                            dev(inp), n);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    quantize_scale_kernel<<<1, 1, 0, stream>>>(scale, Fp8Format<Q>::kMax, amax);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args, const Launch& launch) {
    const auto& [out, scale, inp, n, delayed, amax] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "quantize: n " << n);
    NAPKIN_CUDA_REQUIRE(delayed == nullptr || delayed != scale,
                        "quantize: the delayed scale pair aliases the output's");
    // Enough blocks to fill the device; each adds one atomic.
    const unsigned blocks = n > 0 ? std::min(grid_for(n, kBlock), 1024u) : 1u;
    if (delayed != nullptr) {
        quantize_delayed_kernel<<<blocks, kBlock, 0, stream>>>(
            codes(out), scale, reinterpret_cast<unsigned*>(amax), delayed, dev(inp), n,
            Fp8Format<Q>::kind);
        NAPKIN_CUDA_CHECK_LAUNCH();
        return;
    }
    scale_from_own_amax<Q>(scale, amax, inp, n, stream);
    if (n == 0) return;
    quantize_cast_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(codes(out), scale, dev(inp), n,
                                                                     Fp8Format<Q>::kind);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class Q, class T>
void quantize_transpose(const QuantizeTransposeArgs<Q, T>& args, const Launch& launch) {
    const auto& [out, out_t, scale, inp, R, C, delayed, amax] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(R >= 0 && C >= 0, "quantize_transpose: R " << R << ", C " << C);
    NAPKIN_CUDA_REQUIRE(out != nullptr || out_t != nullptr, "quantize_transpose: no output");
    NAPKIN_CUDA_REQUIRE(delayed == nullptr || delayed != scale,
                        "quantize_transpose: the delayed scale pair aliases the output's");
    const std::int64_t n = R * C;
    const dim3 grid = tile_grid(R, C, "quantize_transpose");
    // 16-byte accesses: rows of inp, out and out_t all start on 16 bytes.
    const bool vector = aligned16(inp) && (C * sizeof(device_t<T>)) % 16 == 0 &&
                        (out == nullptr || (aligned16(out) && C % 16 == 0)) &&
                        (out_t == nullptr || (aligned16(out_t) && R % 16 == 0));
    if (delayed != nullptr) {
        if (n == 0) {  // no tile: the pair alone, as quantize's one block would copy it
            NAPKIN_CUDA_CHECK(cudaMemcpyAsync(scale, delayed, kFp8ScaleFloats * sizeof(float),
                                              cudaMemcpyDeviceToDevice, stream));
            return;
        }
        quantize_transpose_kernel<<<grid, kTileThreads, 0, stream>>>(
            codes(out), codes(out_t), scale, reinterpret_cast<unsigned*>(amax), delayed, dev(inp),
            R, C, Fp8Format<Q>::kind, vector);
        NAPKIN_CUDA_CHECK_LAUNCH();
        return;
    }
    scale_from_own_amax<Q>(scale, amax, inp, n, stream);
    if (n == 0) return;
    quantize_transpose_kernel<<<grid, kTileThreads, 0, stream>>>(codes(out), codes(out_t), nullptr,
                                                                 nullptr, scale, dev(inp), R, C,
                                                                 Fp8Format<Q>::kind, vector);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void transpose_fp8(const TransposeFp8Args& args, const Launch& launch) {
    const auto& [out, inp, R, C] = args;
    NAPKIN_CUDA_REQUIRE(R >= 0 && C >= 0, "transpose_fp8: R " << R << ", C " << C);
    if (R == 0 || C == 0) return;
    const bool vector = aligned16(out) && aligned16(inp) && R % 16 == 0 && C % 16 == 0;
    transpose_fp8_kernel<<<tile_grid(R, C, "transpose_fp8"), kTileThreads, 0, launch.stream>>>(
        static_cast<std::uint8_t*>(out), static_cast<const std::uint8_t*>(inp), R, C, vector);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void amax_history_roll(const AmaxHistoryRollArgs& args, const Launch& launch) {
    const auto& [history, scales, slots, e4m3_slots, H] = args;
    NAPKIN_CUDA_REQUIRE(
        slots >= 0 && H > 0 && e4m3_slots >= 0 && e4m3_slots <= slots,
        "amax_history_roll: slots " << slots << ", e4m3 " << e4m3_slots << ", H " << H);
    if (slots == 0) return;
    constexpr int kRollBlock = 128;
    amax_history_roll_kernel<<<grid_for(slots, kRollBlock), kRollBlock, 0, launch.stream>>>(
        history, scales, slots, e4m3_slots, H);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args, const Launch& launch) {
    const auto& [out, inp, scale, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "dequantize: n " << n);
    if (n == 0) return;
    dequantize_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(out), codes(inp), scale, n,
                                                                  Fp8Format<Q>::kind);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_QUANTIZE_INSTANTIATE(Q, T)                                                 \
    template void quantize<Q, T>(const QuantizeArgs<Q, T>&, const Launch&);                    \
    template void quantize_transpose<Q, T>(const QuantizeTransposeArgs<Q, T>&, const Launch&); \
    template void dequantize<T, Q>(const DequantizeArgs<T, Q>&, const Launch&);
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, float)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, bf16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, f16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, float)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, bf16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, f16_t)
#undef NAPKIN_CUDA_QUANTIZE_INSTANTIATE

}  // namespace napkin::cuda
