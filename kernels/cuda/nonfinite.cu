// The anomaly check's reduction on the GPU (declared in kernels/nonfinite.h; the CPU twin, the
// spec, is kernels/cpu/nonfinite.cpp): a grid-stride loop over 16-byte vectors, each thread's
// counts added to the slot by an atomic only when nonzero (a healthy tensor adds none), the
// block's largest finite magnitude by a block maximum and one atomicMax on its bits (a
// non-negative float orders as its bits). Nothing is read back: the engine copies the step's slots to the host once.
#include <cstdint>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/nonfinite.h"

namespace napkin::cuda {

namespace {

constexpr int kBlock = 256;

// One element into a thread's counts.
__device__ __forceinline__ void tally(float v, unsigned long long& nan, unsigned long long& inf,
                                      float& m) {
    const float a = fabsf(v);
    if (v != v)
        ++nan;
    else if (a == INFINITY)
        ++inf;
    else
        m = fmaxf(m, a);
}

// Elements [0, n) of x, read 16 bytes at a time (8 bf16/fp16 or 4 fp32 per load: a scalar 2-byte
// load per thread reaches well under the HBM's bandwidth) when x is 16-byte aligned, as every
// allocator block is; the tail of fewer than one vector, and an unaligned x, element by element.
// The block's share of one check: its counts into the slot, its maximum by one atomicMax.
template <class D>
__device__ void check_range(NonfiniteSlot* slot, const D* x, std::int64_t n, float* shared) {
    constexpr int kPerVec = 16 / sizeof(D);
    unsigned long long nan = 0, inf = 0;
    float m = 0.0f;
    const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    const bool aligned = (reinterpret_cast<std::uintptr_t>(x) % 16) == 0;
    const std::int64_t vectors = aligned ? n / kPerVec : 0;
    for (std::int64_t v = first; v < vectors; v += stride) {
        const uint4 bits = reinterpret_cast<const uint4*>(x)[v];
        const D* e = reinterpret_cast<const D*>(&bits);  // kPerVec elements in registers
#pragma unroll
        for (int j = 0; j < kPerVec; ++j)
            tally(to_f32(e[j]), nan, inf, m);
    }
    for (std::int64_t i = vectors * kPerVec + first; i < n; i += stride)
        tally(to_f32(x[i]), nan, inf, m);
    if (nan != 0) atomicAdd(&slot->nan, nan);
    if (inf != 0) atomicAdd(&slot->inf, inf);
    m = block_max(m, shared);
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(&slot->max_finite), float_bits(m));
}

template <class D>
__global__ void nonfinite_check_kernel(NonfiniteSlot* slot, const D* x, std::int64_t n) {
    __shared__ float shared[kWarpSize];
    check_range(slot, x, n, shared);
}

// The batch: blockIdx.y picks the check; each check gets the grid's x blocks (sized for the
// largest), a smaller one's spare blocks read nothing and add a zero maximum.
template <class T>
__global__ void nonfinite_check_many_kernel(NonfiniteCheckManyArgs<T> args) {
    __shared__ float shared[kWarpSize];
    const NonfiniteCheckArgs<T>& c = args.checks[blockIdx.y];
    check_range(c.slot, reinterpret_cast<const device_t<T>*>(c.x), c.n, shared);
}

unsigned blocks_for(std::int64_t n) {
    // Enough blocks to fill the device, one vector per thread at first; each adds at most three
    // atomics.
    return std::min(grid_for((n + 7) / 8, kBlock), 1024u);
}

}  // namespace

template <class T>
void nonfinite_check(const NonfiniteCheckArgs<T>& args, const Launch& launch) {
    const auto& [slot, x, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "nonfinite_check: n " << n);
    if (n == 0) return;
    nonfinite_check_kernel<<<blocks_for(n), kBlock, 0, launch.stream>>>(slot, dev(x), n);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void nonfinite_check_many(const NonfiniteCheckManyArgs<T>& args, const Launch& launch) {
    NAPKIN_CUDA_REQUIRE(args.count >= 0 && args.count <= kNonfiniteBatch,
                        "nonfinite_check_many: count " << args.count);
    std::int64_t largest = 0;
    for (int i = 0; i < args.count; ++i) {
        NAPKIN_CUDA_REQUIRE(args.checks[i].n >= 0, "nonfinite_check_many: n " << args.checks[i].n);
        largest = std::max(largest, args.checks[i].n);
    }
    if (largest == 0) return;
    const dim3 grid(blocks_for(largest), static_cast<unsigned>(args.count));
    nonfinite_check_many_kernel<<<grid, kBlock, 0, launch.stream>>>(args);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template void nonfinite_check_many<float>(const NonfiniteCheckManyArgs<float>&, const Launch&);
template void nonfinite_check_many<bf16_t>(const NonfiniteCheckManyArgs<bf16_t>&, const Launch&);
template void nonfinite_check_many<f16_t>(const NonfiniteCheckManyArgs<f16_t>&, const Launch&);

template void nonfinite_check<float>(const NonfiniteCheckArgs<float>&, const Launch&);
template void nonfinite_check<bf16_t>(const NonfiniteCheckArgs<bf16_t>&, const Launch&);
template void nonfinite_check<f16_t>(const NonfiniteCheckArgs<f16_t>&, const Launch&);

}  // namespace napkin::cuda
