// Residual add on the GPU (declared in kernels/residual.h; the CPU twin, the spec, is
// kernels/cpu/residual.cpp): elementwise grid-stride loops. Each element is read before it is
// written by the same thread, so the documented aliasing (out = a or b; dout = da or db) holds.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/residual.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

template <class D>
__global__ void residual_forward_kernel(D* out, const D* a, const D* b, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        out[i] = from_f32<D>(to_f32(a[i]) + to_f32(b[i]));
}

template <class D>
__global__ void residual_backward_kernel(D* da, D* db, const D* dout, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float g = to_f32(dout[i]);
        da[i] = from_f32<D>(to_f32(da[i]) + g);
        db[i] = from_f32<D>(to_f32(db[i]) + g);
    }
}

}  // namespace

template <class T>
void residual_forward(const ResidualForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, a, b, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "residual_forward: n " << n);
    if (n == 0) return;
    residual_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(out), dev(a), dev(b),
                                                                        n);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void residual_backward(const ResidualBackwardArgs<T>& args, const Launch& launch) {
    const auto& [da, db, dout, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "residual_backward: n " << n);
    if (n == 0) return;
    residual_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dev(da), dev(db),
                                                                         dev(dout), n);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_RESIDUAL_INSTANTIATE(T)                                          \
    template void residual_forward<T>(const ResidualForwardArgs<T>&, const Launch&); \
    template void residual_backward<T>(const ResidualBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(float)
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(bf16_t)
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_RESIDUAL_INSTANTIATE

}  // namespace napkin::cuda
