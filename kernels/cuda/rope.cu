// Rotary position embedding on the GPU (declared in kernels/rope.h, Hugging Face Llama's
// rotate_half convention; the CPU twin, the spec, is kernels/cpu/rope.cpp). One thread per
// (token, pair index i): the angle is computed once in double, as on the CPU (a float angle is
// off by pos * 2^-24 radians, 0.006 at position 100k), and applied to every q and k head of the
// token.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/rope.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

template <class D>
__global__ void rope_rotate_kernel(D* qkv, std::int64_t BT, std::int64_t T, int NH, int KVH,
                                   std::int64_t HD, double log_theta, std::int64_t pos_offset,
                                   double sign) {
    const std::int64_t half = HD / 2;
    const std::int64_t rotated = NH + KVH;  // q heads then k heads
    const std::int64_t row = (NH + 2 * static_cast<std::int64_t>(KVH)) * HD;
    for (std::int64_t w = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         w < BT * half; w += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t bt = w / half, i = w % half;
        const double pos = static_cast<double>(bt % T + pos_offset);
        const double inv_freq =
            exp(-log_theta * static_cast<double>(2 * i) / static_cast<double>(HD));
        double s_d = 0.0, c_d = 0.0;
        sincos(sign * pos * inv_freq, &s_d, &c_d);
        const float c = static_cast<float>(c_d);
        const float s = static_cast<float>(s_d);
        D* x = qkv + bt * row;  // (NH + 2*KVH, HD)
        for (std::int64_t h = 0; h < rotated; ++h) {
            D* head = x + h * HD;  // (HD)
            const float x1 = to_f32(head[i]);
            const float x2 = to_f32(head[i + half]);
            head[i] = from_f32<D>(x1 * c - x2 * s);
            head[i + half] = from_f32<D>(x2 * c + x1 * s);
        }
    }
}

template <class D>
void rope_rotate(D* qkv, std::int64_t B, std::int64_t T, int NH, int KVH, std::int64_t HD,
                 float theta, std::int64_t pos_offset, double sign, const char* name,
                 cudaStream_t stream) {
    NAPKIN_CUDA_REQUIRE(HD > 0 && HD % 2 == 0,
                        name << ": head dim " << HD << " must be even and positive");
    NAPKIN_CUDA_REQUIRE(B >= 0 && T >= 0 && NH >= 0 && KVH >= 0,
                        name << ": B " << B << ", T " << T << ", NH " << NH << ", KVH " << KVH);
    NAPKIN_CUDA_REQUIRE(theta > 0.0f, name << ": theta " << theta);
    const std::int64_t work = B * T * (HD / 2);
    if (work == 0) return;
    rope_rotate_kernel<<<grid_for(work, kBlock), kBlock, 0, stream>>>(
        qkv, B * T, T, NH, KVH, HD, log(static_cast<double>(theta)), pos_offset, sign);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class Elem>
void rope_forward(const RopeArgs<Elem>& args, const Launch& launch) {
    const auto& [qkv, B, T, NH, KVH, HD, theta, pos_offset] = args;
    cudaStream_t stream = launch.stream;
    rope_rotate(dev(qkv), B, T, NH, KVH, HD, theta, pos_offset, 1.0, "rope_forward", stream);
}

template <class Elem>
void rope_backward(const RopeArgs<Elem>& args, const Launch& launch) {
    const auto& [dqkv, B, T, NH, KVH, HD, theta, pos_offset] = args;  // qkv: the gradient
    cudaStream_t stream = launch.stream;
    rope_rotate(dev(dqkv), B, T, NH, KVH, HD, theta, pos_offset, -1.0, "rope_backward", stream);
}

#define NAPKIN_CUDA_ROPE_INSTANTIATE(E)                               \
    template void rope_forward<E>(const RopeArgs<E>&, const Launch&); \
    template void rope_backward<E>(const RopeArgs<E>&, const Launch&);
NAPKIN_CUDA_ROPE_INSTANTIATE(float)
NAPKIN_CUDA_ROPE_INSTANTIATE(bf16_t)
NAPKIN_CUDA_ROPE_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_ROPE_INSTANTIATE

}  // namespace napkin::cuda
