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

template <class Q>
__nv_fp8_storage_t* codes(Q* p) {
    return reinterpret_cast<__nv_fp8_storage_t*>(p);
}
template <class Q>
const __nv_fp8_storage_t* codes(const Q* p) {
    return reinterpret_cast<const __nv_fp8_storage_t*>(p);
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
    NAPKIN_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), stream));  // amax = +0
    if (n > 0) {
        quantize_amax_kernel<<<blocks, kBlock, 0, stream>>>(reinterpret_cast<unsigned*>(scale),
                                                            dev(inp), n);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    quantize_scale_kernel<<<1, 1, 0, stream>>>(scale, Fp8Format<Q>::kMax, amax);
    NAPKIN_CUDA_CHECK_LAUNCH();
    if (n == 0) return;
    quantize_cast_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(codes(out), scale, dev(inp), n,
                                                                     Fp8Format<Q>::kind);
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

#define NAPKIN_CUDA_QUANTIZE_INSTANTIATE(Q, T)                              \
    template void quantize<Q, T>(const QuantizeArgs<Q, T>&, const Launch&); \
    template void dequantize<T, Q>(const DequantizeArgs<T, Q>&, const Launch&);
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, float)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, bf16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e4m3_t, f16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, float)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, bf16_t)
NAPKIN_CUDA_QUANTIZE_INSTANTIATE(f8e5m2_t, f16_t)
#undef NAPKIN_CUDA_QUANTIZE_INSTANTIATE

}  // namespace napkin::cuda
