// GELU (tanh approximation) and SwiGLU on the GPU (declared in kernels/activation.h; the CPU
// twin, the spec, is kernels/cpu/activation.cpp): elementwise grid-stride loops, fp32 math;
// in 16-byte vectors (cuda_common.cuh's elementwise_kernel) where the pointers (and, for
// SwiGLU, rows of whole vectors) allow.
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/cuda/cuda_common.cuh"

namespace napkin::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));  // expf overflow gives 0, not NaN
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
            const float local = gelu_tanh_grad(to_f32(x.v[j]));
            dx.v[j] = from_f32<D>(to_f32(dx.v[j]) + local * to_f32(g.v[j]));
        }
        store_pack<W>(dinp + i, dx);
    }
};

// Output elements [i, i + W) of (N, F), one row's (W divides F on the vector path); inp rows
// are [gate (F) | up (F)], so the row's gate elements start at n 2F + f and its up ones F later.
template <class D_>
struct SwigluForward {
    using D = D_;
    D* out;        // (N, F)
    const D* inp;  // (N, 2F)
    std::int64_t F;
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const std::int64_t gi = i / F * 2 * F + i % F;
        const Pack<D, W> g = load_pack<W>(inp + gi), up = load_pack<W>(inp + gi + F);
        Pack<D, W> y;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float x = to_f32(g.v[j]);
            y.v[j] = from_f32<D>(x * sigmoid(x) * to_f32(up.v[j]));
        }
        store_pack<W>(out + i, y);
    }
};

template <class D_>
struct SwigluBackward {
    using D = D_;
    D* dinp;        // (N, 2F)
    const D* inp;   // (N, 2F)
    const D* dout;  // (N, F)
    std::int64_t F;
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const std::int64_t gi = i / F * 2 * F + i % F, ui = gi + F;
        const Pack<D, W> g = load_pack<W>(inp + gi), up = load_pack<W>(inp + ui);
        const Pack<D, W> d = load_pack<W>(dout + i);
        Pack<D, W> dg = load_pack<W>(dinp + gi), du = load_pack<W>(dinp + ui);
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float x = to_f32(g.v[j]);
            const float sg = sigmoid(x);
            const float dj = to_f32(d.v[j]);
            const float dsilu = sg * (1.0f + x * (1.0f - sg));
            dg.v[j] = from_f32<D>(to_f32(dg.v[j]) + dj * to_f32(up.v[j]) * dsilu);
            du.v[j] = from_f32<D>(to_f32(du.v[j]) + dj * x * sg);
        }
        store_pack<W>(dinp + gi, dg);
        store_pack<W>(dinp + ui, du);
    }
};

}  // namespace

template <class T>
void gelu_forward(const GeluForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, inp, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "gelu_forward: n " << n);
    if (n == 0) return;
    const GeluForward<device_t<T>> op{dev(out), dev(inp)};
    const bool vec = aligned16(out, inp);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, inp, dout, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "gelu_backward: n " << n);
    if (n == 0) return;
    const GeluBackward<device_t<T>> op{dev(dinp), dev(inp), dev(dout)};
    const bool vec = aligned16(dinp, inp, dout);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void swiglu_forward(const SwigluForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, inp, N, F] = args;
    NAPKIN_CUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_forward: N " << N << ", F " << F);
    if (N * F == 0) return;
    const SwigluForward<device_t<T>> op{dev(out), dev(inp), F};
    const bool vec = aligned16(out, inp) && F % kVec<device_t<T>> == 0;
    const std::int64_t n = N * F;
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void swiglu_backward(const SwigluBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, inp, dout, N, F] = args;
    NAPKIN_CUDA_REQUIRE(N >= 0 && F >= 0, "swiglu_backward: N " << N << ", F " << F);
    if (N * F == 0) return;
    const SwigluBackward<device_t<T>> op{dev(dinp), dev(inp), dev(dout), F};
    const bool vec = aligned16(dinp, inp, dout) && F % kVec<device_t<T>> == 0;
    const std::int64_t n = N * F;
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
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
