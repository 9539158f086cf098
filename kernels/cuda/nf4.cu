// nf4 dequantization on the GPU (declared in kernels/nf4.h; the CPU twin, the spec, is
// kernels/cpu/nf4.cpp): every element kNf4Levels[code] * (absmax_code * step), two fp32
// products in the CPU's order (no addition, so nothing for the compiler to fuse), rounded once
// into T: bit for bit the CPU's. Quantization stays on the host (cpu::nf4_quantize, once at
// load), so there is no CUDA quantize.
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/nf4.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

// The 16 levels, for the kernel to copy into shared memory: kNf4Levels is a host constexpr
// array, which device code may not index at run time.
struct Nf4Levels {
    float v[16];
};

// out (n) from codes (ceil(n/2)), the steps (nf4_step_count(n) fp32) and the absmax codes
// (nf4_blocks(n)), the two parts of the state buffer. One thread per
// code byte, i.e. the elements 2j and 2j + 1, which share their 64-block (64 is even). The
// step is read byte-wise: the state buffer promises no 4-byte alignment on the device.
template <class D>
__global__ void nf4_dequantize_kernel(D* out, const std::uint8_t* codes, const std::uint8_t* steps,
                                      const std::uint8_t* absmax_codes, std::int64_t n,
                                      Nf4Levels levels) {
    __shared__ float level[16];
    if (threadIdx.x < 16) level[threadIdx.x] = levels.v[threadIdx.x];
    __syncthreads();
    const std::int64_t bytes = (n + 1) / 2;
    for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         j < bytes; j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t i = 2 * j, b = i / kNf4Block;
        float step;
        memcpy(&step, steps + 4 * (b / kNf4ScaleBlock), sizeof step);
        const float scale = static_cast<float>(absmax_codes[b]) * step;
        const std::uint8_t byte = codes[j];
        out[i] = from_f32<D>(level[byte & 0xF] * scale);
        if (i + 1 < n) out[i + 1] = from_f32<D>(level[byte >> 4] * scale);
    }
}

}  // namespace

template <class T>
void nf4_dequantize(const Nf4DequantizeArgs<T>& args, const Launch& launch) {
    const auto& [out, codes, state, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "nf4_dequantize: n " << n);
    if (n == 0) return;
    Nf4Levels levels;
    for (int l = 0; l < 16; ++l)
        levels.v[l] = kNf4Levels[l];
    const std::int64_t bytes = (n + 1) / 2;
    nf4_dequantize_kernel<<<grid_for(bytes, kBlock), kBlock, 0, stream>>>(
        dev(out), codes, state, state + 4 * nf4_step_count(n), n, levels);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template void nf4_dequantize<float>(const Nf4DequantizeArgs<float>&, const Launch&);
template void nf4_dequantize<bf16_t>(const Nf4DequantizeArgs<bf16_t>&, const Launch&);
template void nf4_dequantize<f16_t>(const Nf4DequantizeArgs<f16_t>&, const Launch&);

}  // namespace napkin::cuda
