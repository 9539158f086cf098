// What the two tensor-core flash attentions behind cuda::attention_flash_mma_forward/backward
// share (not a public header): the packed buffers' layout, the grid, and the launchers of the
// mma.sync kernels (attention_fa2_forward.cu, attention_fa2_backward.cu), which
// attention_mma.cu's entry points call for HD 64 and 128 on sm_80 and later, its WMMA kernels
// taking the other head dimensions (and older GPUs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_dropout.cuh"

namespace napkin::cuda::mma_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Offsets into qkv (B, T, (NH + 2*KVH) * HD), out (B, T, NH*HD) and lse (B, NH, T).
struct MmaLayout {
    std::int64_t B = 0, T = 0;
    int HD = 0, NH = 0, KVH = 0, group = 0;
    std::int64_t qkv_row = 0;  // (NH + 2*KVH) * HD
    std::int64_t out_row = 0;  // NH * HD
    float scale = 0.0f;        // 1 / sqrt(HD)
    float scale_log2 = 0.0f;   // log2(e) / sqrt(HD)

    __device__ std::int64_t q(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * qkv_row + static_cast<std::int64_t>(h) * HD;
    }
    __device__ std::int64_t k(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + static_cast<std::int64_t>(NH + g) * HD;
    }
    __device__ std::int64_t v(std::int64_t b, std::int64_t t, int g) const {
        return (b * T + t) * qkv_row + static_cast<std::int64_t>(NH + KVH + g) * HD;
    }
    __device__ std::int64_t o(std::int64_t b, std::int64_t t, int h) const {
        return (b * T + t) * out_row + static_cast<std::int64_t>(h) * HD;
    }
    __device__ std::int64_t row(std::int64_t b, int h, std::int64_t t) const {
        return (b * NH + h) * T + t;
    }
};

// The layout of one call, its shapes checked (op names the caller in the error).
MmaLayout make_mma_layout(const char* op, std::int64_t B, std::int64_t T, int NH, int KVH,
                          std::int64_t HD);

// Blocks for `tiles` tiles of each of `heads` heads, one dimension (no 65535 limit on heads).
unsigned mma_grid(const char* op, std::int64_t tiles, std::int64_t heads);

// Whether the mma.sync kernels take HD on the current device: HD 64 or 128, sm_80 or later.
bool fa2_supported(std::int64_t HD);

// The mma.sync flash attention (D = __nv_bfloat16 or __half; pointers as
// attention_flash_mma_forward/backward take them, checked by the caller; B T > 0).
template <class D>
void fa2_forward(D* out, float* lse, const D* qkv, const MmaLayout& l, const FlashDropout& drop,
                 cudaStream_t stream);
template <class D>
void fa2_backward(D* dqkv, const D* dout, const D* out, const D* qkv, const float* lse,
                  const MmaLayout& l, const FlashDropout& drop, cudaStream_t stream);

}  // namespace napkin::cuda::mma_detail
