// dropout on the GPU (declared in kernels/dropout.h; the CPU twin, the spec, is
// kernels/cpu/dropout.cpp): elementwise grid-stride loops. The keep bit is dropout_keep(seed, i,
// threshold), the header's counter-based hash compiled for the device, so the mask is the CPU's
// bit for bit. The threshold and the scale 1 / (1 - p) are computed on the host, as the CPU
// computes them; on the device a kept element is one fp32 product rounded once into T (a lone
// multiply, nothing to contract into an FMA), the CPU's value bit for bit too (NaN payloads
// aside: the hardware's NaN is canonical). Each element is read before it is written by the same
// thread, so out may be inp and dinp may be dout.
// Cost (dropout_forward_cost): 1 FLOP per element and the hash's integer work (three 64-bit
// multiplies), against 2 sizeof(T) + 1 bytes moved per element.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dropout.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

// out (n), mask (n), inp (n)
template <class D>
__global__ void dropout_forward_kernel(D* out, std::uint8_t* mask, const D* inp, std::int64_t n,
                                       std::uint64_t seed, std::uint32_t threshold, float scale) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const bool keep = dropout_keep(seed, static_cast<std::uint64_t>(i), threshold);
        const float x = to_f32(inp[i]);
        mask[i] = keep ? 1 : 0;
        out[i] = keep ? from_f32<D>(x * scale) : from_f32<D>(0.0f);
    }
}

// dinp (n), dout (n), mask (n)
template <class D>
__global__ void dropout_backward_kernel(D* dinp, const D* dout, const std::uint8_t* mask,
                                        std::int64_t n, float scale) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float g = to_f32(dout[i]);
        dinp[i] = mask[i] != 0 ? from_f32<D>(g * scale) : from_f32<D>(0.0f);
    }
}

}  // namespace

template <class T>
void dropout_forward(const DropoutForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, mask, inp, n, p, seed] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "dropout_forward: n " << n);
    NAPKIN_CUDA_REQUIRE(p >= 0.0f && p < 1.0f, "dropout_forward: p " << p);
    if (n == 0) return;
    const std::uint32_t threshold = dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    dropout_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(out), mask, dev(inp), n,
                                                                       seed, threshold, scale);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void dropout_backward(const DropoutBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, dout, mask, n, p] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "dropout_backward: n " << n);
    NAPKIN_CUDA_REQUIRE(p >= 0.0f && p < 1.0f, "dropout_backward: p " << p);
    if (n == 0) return;
    const float scale = 1.0f / (1.0f - p);
    dropout_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(dinp), dev(dout), mask,
                                                                        n, scale);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_DROPOUT_INSTANTIATE(T)                                         \
    template void dropout_forward<T>(const DropoutForwardArgs<T>&, const Launch&); \
    template void dropout_backward<T>(const DropoutBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_DROPOUT_INSTANTIATE(float)
NAPKIN_CUDA_DROPOUT_INSTANTIATE(bf16_t)
NAPKIN_CUDA_DROPOUT_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_DROPOUT_INSTANTIATE

}  // namespace napkin::cuda
