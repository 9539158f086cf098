// zero on the GPU (declared in kernels/zero.h; the CPU twin is kernels/cpu/zero.cpp): one launch
// per kZeroSpansPerLaunch buffers, the list passed by value as the kernel's argument. Block row
// blockIdx.y writes buffer y: 16-byte stores over its 16-byte aligned middle, single bytes over
// the head and tail around it, grid-stride along x.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/zero.h"

namespace napkin::cuda {

namespace {

struct ZeroBatch {
    ZeroSpan spans[kZeroSpansPerLaunch];
};

__global__ void zero_kernel(ZeroBatch batch) {
    const ZeroSpan s = batch.spans[blockIdx.y];
    auto* p = static_cast<unsigned char*>(s.data);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    std::size_t head = (16 - addr % 16) % 16;  // bytes before the first 16-byte boundary
    if (head > s.bytes) head = s.bytes;
    const std::size_t vectors = (s.bytes - head) / 16;
    const std::size_t tail_start = head + vectors * 16;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    auto* body = reinterpret_cast<uint4*>(p + head);
    for (std::size_t i = first; i < vectors; i += stride)
        body[i] = make_uint4(0, 0, 0, 0);
    for (std::size_t i = first; i < head; i += stride)
        p[i] = 0;
    for (std::size_t i = tail_start + first; i < s.bytes; i += stride)
        p[i] = 0;
}

}  // namespace

void zero(const ZeroSpan* spans, int count, CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(count >= 0, "zero: " << count << " spans");
    constexpr int kBlock = 256;
    int i = 0;
    while (i < count) {
        ZeroBatch batch{};
        int n = 0;
        std::size_t largest = 0;
        for (; i < count && n < kZeroSpansPerLaunch; ++i) {
            if (spans[i].bytes == 0) continue;
            NAPKIN_CUDA_REQUIRE(spans[i].data != nullptr, "zero: span " << i << " of "
                                                              << spans[i].bytes << " bytes at null");
            batch.spans[n++] = spans[i];
            if (spans[i].bytes > largest) largest = spans[i].bytes;
        }
        if (n == 0) break;
        // Enough blocks per buffer to cover the largest at one 16-byte store per thread, at most
        // 1024 (then grid-stride).
        const std::size_t per_block = static_cast<std::size_t>(kBlock) * 16;
        std::size_t blocks = (largest + per_block - 1) / per_block;
        if (blocks > 1024) blocks = 1024;
        zero_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)), kBlock, 0,
                      stream>>>(batch);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace napkin::cuda
