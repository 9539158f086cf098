// GELU (tanh approximation) and SwiGLU on the GPU (declared in kernels/activation.h; the CPU
// twin, the spec, is kernels/cpu/activation.cpp): elementwise grid-stride loops, fp32 math;
// GELU in 16-byte vectors (cuda_common.cuh's elementwise_kernel) where the pointers allow.
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/cuda/cuda_common.cuh"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));  // expf overflow gives 0, not NaN
}

__device__ __forceinline__ std::int64_t first_index() {
    return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
    return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// out = gelu(inp), elementwise (elementwise_kernel's op).
template <class D_>
struct GeluForward {
    using D = D_;
    D* out;        // (n)
    const D* inp;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> x = load_pack<W>(inp + i);
        Pack<D, W> y;
#pragma unroll
        for (int j = 0; j < W; ++j)
            y.v[j] = from_f32<D>(gelu_tanh(to_f32(x.v[j])));
        store_pack<W>(out + i, y);
    }
};

__device__ __forceinline__ float gelu_backward_local(float x) {
    // As kernels/cpu/activation.cpp: s = sigmoid(2u), 1 - s = e s accurate in both tails.
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float e = expf(fminf(-2.0f * u, 88.0f));  // finite: e s s is never inf * 0
    const float s = 1.0f / (1.0f + e);
    const float one_minus_s = e * s;
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return s + 2.0f * x * s * one_minus_s * du_dx;
}

// dinp += gelu'(inp) dout, elementwise.
template <class D_>
struct GeluBackward {
    using D = D_;
    D* dinp;        // (n)
    const D* inp;   // (n)
    const D* dout;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> x = load_pack<W>(inp + i), g = load_pack<W>(dout + i);
        Pack<D, W> dx = load_pack<W>(dinp + i);
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float local = gelu_backward_local(to_f32(x.v[j]));
            dx.v[j] = from_f32<D>(to_f32(dx.v[j]) + local * to_f32(g.v[j]));
        }
        store_pack<W>(dinp + i, dx);
    }
};

// One thread per output element (n, f) of (N, F); inp rows are [gate (F) | up (F)].
template <class D>
__global__ void swiglu_forward_kernel(D* out, const D* inp, std::int64_t N, std::int64_t F) {
    for (std::int64_t i = first_index(); i < N * F; i += grid_stride()) {
        const std::int64_t n = i / F, f = i % F;
        const float g = to_f32(inp[n * 2 * F + f]);
        const float up = to_f32(inp[n * 2 * F + F + f]);
        out[i] = from_f32<D>(g * sigmoid(g) * up);
    }
}

template <class D>
__global__ void swiglu_backward_kernel(D* dinp, const D* inp, const D* dout, std::int64_t N,
                                       std::int64_t F) {
    for (std::int64_t i = first_index(); i < N * F; i += grid_stride()) {
        const std::int64_t n = i / F, f = i % F;
        const std::int64_t gi = n * 2 * F + f, ui = gi + F;
        const float g = to_f32(inp[gi]);
        const float sg = sigmoid(g);
        const float d = to_f32(dout[i]);
        const float dsilu = sg * (1.0f + g * (1.0f - sg));
        dinp[gi] = from_f32<D>(to_f32(dinp[gi]) + d * to_f32(inp[ui]) * dsilu);
        dinp[ui] = from_f32<D>(to_f32(dinp[ui]) + d * g * sg);
    }
}

template <class Op>
void launch_elementwise(const Op& op, std::int64_t n, bool vec, cudaStream_t stream) {
    elementwise_kernel<<<grid_for(elementwise_work<Op>(n, vec), kBlock), kBlock, 0, stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void gelu_forward(const GeluForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, inp, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "gelu_forward: n " << n);
    if (n == 0) return;
    launch_elementwise(GeluForward<device_t<T>>{dev(out), dev(inp)}, n, aligned16(out, inp),
                       stream);
}

template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, inp, dout, n] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(n >= 0, "gelu_backward: n " << n);
    if (n == 0) return;
    launch_elementwise(GeluBackward<device_t<T>>{dev(dinp), dev(inp), dev(dout)}, n,
                       aligned16(dinp, inp, dout), stream);
}

template <class T>
void swiglu_forward(const SwigluForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, inp, N, F] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_forward: N " << N << ", F " << F);
    if (N * F == 0) return;
    swiglu_forward_kernel<<<grid_for(N * F, kBlock), kBlock, 0, stream>>>(dev(out), dev(inp), N, F);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void swiglu_backward(const SwigluBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, inp, dout, N, F] = args;
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_backward: N " << N << ", F " << F);
    if (N * F == 0) return;
    swiglu_backward_kernel<<<grid_for(N * F, kBlock), kBlock, 0, stream>>>(dev(dinp), dev(inp),
                                                                           dev(dout), N, F);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_ACTIVATION_INSTANTIATE(T)                                    \
    template void gelu_forward<T>(const GeluForwardArgs<T>&, const Launch&);     \
    template void gelu_backward<T>(const GeluBackwardArgs<T>&, const Launch&);   \
    template void swiglu_forward<T>(const SwigluForwardArgs<T>&, const Launch&); \
    template void swiglu_backward<T>(const SwigluBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_ACTIVATION_INSTANTIATE(float)
NAPKIN_CUDA_ACTIVATION_INSTANTIATE(bf16_t)
NAPKIN_CUDA_ACTIVATION_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_ACTIVATION_INSTANTIATE

}  // namespace napkin::cuda
