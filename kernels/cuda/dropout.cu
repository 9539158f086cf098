// dropout on the GPU (declared in kernels/dropout.h; the CPU twin, the spec, is
// kernels/cpu/dropout.cpp): elementwise grid-stride loops, in 16-byte vectors of T where the
// pointers allow (cuda_common.cuh's elementwise_kernel; the mask's bytes as 4 or 8). The keep bit
// is dropout_keep(seed, i, threshold), the header's counter-based hash compiled for the device, so
// the mask is the CPU's bit for bit. The threshold and the scale 1 / (1 - p) are computed on the
// host, as the CPU computes them; on the device a kept element is one fp32 product rounded once
// into T (a lone multiply, nothing to contract into an FMA), the CPU's value bit for bit too (NaN
// payloads aside: the hardware's NaN is canonical). Each element is read before it is written by
// the same thread, so out may be inp and dinp may be dout. Cost (dropout_forward_cost): 1 FLOP per
// element and the hash's integer work (three 64-bit multiplies), against 2 sizeof(T) + 1 bytes
// moved per element.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/dropout.h"

namespace napkin::cuda {

namespace {

// out = inp * scale where kept, else 0; mask = keep (elementwise_kernel's op).
template <class D_>
struct DropoutForward {
    using D = D_;
    D* out;              // (n)
    std::uint8_t* mask;  // (n)
    const D* inp;        // (n)
    std::uint64_t seed;
    std::uint32_t threshold;
    float scale;
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> x = load_pack<W>(inp + i);
        Pack<D, W> y;
        Pack<std::uint8_t, W> keep;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const bool k = dropout_keep(seed, static_cast<std::uint64_t>(i + j), threshold);
            keep.v[j] = k ? 1 : 0;
            y.v[j] = k ? from_f32<D>(to_f32(x.v[j]) * scale) : from_f32<D>(0.0f);
        }
        store_pack<W>(mask + i, keep);
        store_pack<W>(out + i, y);
    }
};

// dinp = dout * scale where kept, else 0.
template <class D_>
struct DropoutBackward {
    using D = D_;
    D* dinp;                   // (n)
    const D* dout;             // (n)
    const std::uint8_t* mask;  // (n)
    float scale;
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> g = load_pack<W>(dout + i);
        const Pack<std::uint8_t, W> keep = load_pack<W>(mask + i);
        Pack<D, W> y;
#pragma unroll
        for (int j = 0; j < W; ++j)
            y.v[j] = keep.v[j] != 0 ? from_f32<D>(to_f32(g.v[j]) * scale) : from_f32<D>(0.0f);
        store_pack<W>(dinp + i, y);
    }
};

}  // namespace

template <class T>
void dropout_forward(const DropoutForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, mask, inp, n, p, seed] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "dropout_forward: n " << n);
    NAPKIN_CUDA_REQUIRE(p >= 0.0f && p < 1.0f, "dropout_forward: p " << p);
    if (n == 0) return;
    const std::uint32_t threshold = dropout_threshold(p);
    const float scale = 1.0f / (1.0f - p);
    const DropoutForward<device_t<T>> op{dev(out), mask, dev(inp), seed, threshold, scale};
    const bool vec = aligned16(out, mask, inp);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void dropout_backward(const DropoutBackwardArgs<T>& args, const Launch& launch) {
    const auto& [dinp, dout, mask, n, p] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "dropout_backward: n " << n);
    NAPKIN_CUDA_REQUIRE(p >= 0.0f && p < 1.0f, "dropout_backward: p " << p);
    if (n == 0) return;
    const float scale = 1.0f / (1.0f - p);
    const DropoutBackward<device_t<T>> op{dev(dinp), dev(dout), mask, scale};
    const bool vec = aligned16(dinp, dout, mask);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
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
