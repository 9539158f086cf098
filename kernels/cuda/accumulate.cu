// Accumulate on the GPU (declared in kernels/accumulate.h; the CPU twin, the spec, is
// kernels/cpu/accumulate.cpp): an elementwise grid-stride loop, the sum in fp32 rounded once.
#include <cstdint>

#include "kernels/accumulate.h"
#include "kernels/cuda/cuda_common.cuh"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

template <class D>
__global__ void accumulate_kernel(D* dst, const D* src, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        dst[i] = from_f32<D>(to_f32(dst[i]) + to_f32(src[i]));
}

}  // namespace

template <class T>
void accumulate(const AccumulateArgs<T>& args, const Launch& launch) {
    const auto& [dst, src, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "accumulate: n " << n);
    if (n == 0) return;
    accumulate_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(dst), dev(src), n);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template void accumulate<float>(const AccumulateArgs<float>&, const Launch&);
template void accumulate<bf16_t>(const AccumulateArgs<bf16_t>&, const Launch&);
template void accumulate<f16_t>(const AccumulateArgs<f16_t>&, const Launch&);

}  // namespace napkin::cuda
