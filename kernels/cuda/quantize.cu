// quantize / dequantize on the GPU (declared in kernels/quantize.h; the CPU twin, the spec, is
// kernels/cpu/quantize.cpp): the amax by block maxima and one atomicMax per block, the scale
// pair by one thread, the cast and its inverse by grid-stride loops through cuda_fp8.h's
// conversions (round to nearest even, saturating: core/fp8.h's rule on both sides).
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

// scale (kFp8ScaleFloats) = (max / amax, its inverse at kFp8ScaleInv, zeros) from the amax in
// scale[0]: kernels/quantize.h's rule and layout.
__global__ void quantize_scale_kernel(float* scale, float max_finite) {
    const float amax = scale[0];
    float s = 1.0f;
    if (amax != 0.0f && amax < INFINITY) {
        s = max_finite / amax;
        if (!(s < INFINITY)) s = FLT_MAX;
    }
    for (int i = 1; i < kFp8ScaleFloats; ++i)
        scale[i] = 0.0f;
    scale[0] = s;
    scale[kFp8ScaleInv] = 1.0f / s;
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
    const auto& [out, scale, inp, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "quantize: n " << n);
    NAPKIN_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), stream));  // amax = +0
    if (n > 0) {
        // Enough blocks to fill the device; each adds one atomic.
        const unsigned blocks = std::min(grid_for(n, kBlock), 1024u);
        quantize_amax_kernel<<<blocks, kBlock, 0, stream>>>(reinterpret_cast<unsigned*>(scale),
                                                            dev(inp), n);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    quantize_scale_kernel<<<1, 1, 0, stream>>>(scale, Fp8Format<Q>::kMax);
    NAPKIN_CUDA_CHECK_LAUNCH();
    if (n == 0) return;
    quantize_cast_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(codes(out), scale, dev(inp), n,
                                                                     Fp8Format<Q>::kind);
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
