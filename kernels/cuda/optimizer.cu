// Optimizer updates on the GPU (declared in kernels/optimizer.h; the CPU twin, the spec, is
// kernels/cpu/optimizer.cpp, the engine's arithmetic). Multi-tensor: up to kMaxTensors
// parameters per launch travel in the kernel's parameter space, blockIdx.y picks the tensor and
// blockIdx.x strides over its elements. The global norm's sum of squares is deterministic:
// fixed per-tensor blocks, fp64 partial sums, one final block that adds them in a fixed order.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/optimizer.h"
#include "kernels/optimizer_rule.h"

namespace napkin::cuda {

namespace {

constexpr int kMaxTensors = 32;  // 32 * 56 bytes of descriptors: well inside 4 KiB of parameters
constexpr int kBlock = 256;
constexpr unsigned kUpdateBlocksMax = 1024;  // per tensor; grid-stride beyond

struct TensorList {
    OptimizerTensor t[kMaxTensors];
    int count = 0;
};

__device__ __forceinline__ float load(const void* p, DType t, std::int64_t k) {
    switch (t) {
        case DType::bf16:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[k]);
        case DType::f16:
            return __half2float(static_cast<const __half*>(p)[k]);
        default:
            return static_cast<const float*>(p)[k];
    }
}

__device__ __forceinline__ void store(void* p, DType t, std::int64_t k, float v) {
    switch (t) {
        case DType::bf16:
            static_cast<__nv_bfloat16*>(p)[k] = __float2bfloat16_rn(v);
            break;
        case DType::f16:
            static_cast<__half*>(p)[k] = __float2half_rn(v);
            break;
        default:
            static_cast<float*>(p)[k] = v;
            break;
    }
}

__global__ void optimizer_update_kernel(OptimizerHyper h, TensorList list, DType s) {
    const OptimizerTensor& t = list.t[blockIdx.y];
    const float wd = t.weight_decay;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < t.n;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float g = load(t.grad, t.grad_dtype, k) * h.grad_scale;
        float m = t.m != nullptr ? load(t.m, s, k) : 0.0f;
        float v = t.v != nullptr ? load(t.v, s, k) : 0.0f;
        const float w = t.master != nullptr ? t.master[k] : load(t.weight, t.weight_dtype, k);
        const float wk = optimizer_rule(h, g, w, wd, m, v);
        if (t.m != nullptr) store(t.m, s, k, m);
        if (t.v != nullptr) store(t.v, s, k, v);
        if (t.master != nullptr) t.master[k] = wk;
        if (t.weight != nullptr) store(t.weight, t.weight_dtype, k, wk);
    }
}

// Tree sum of one value per thread (blockDim.x == kBlock) in a fixed order; thread 0 gets it.
__device__ double block_sum_fixed(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
        if (static_cast<int>(threadIdx.x) < stride)
            shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    return shared[0];
}

// partial[(first + y) * kGradNormBlocks + x] = sum of squares of block x's contiguous share of
// tensor y's gradient.
__global__ void grad_sum_squares_partial_kernel(double* partial, TensorList list, int first) {
    __shared__ double shared[kBlock];
    const OptimizerTensor& t = list.t[blockIdx.y];
    const std::int64_t per = (t.n + kGradNormBlocks - 1) / kGradNormBlocks;
    const std::int64_t begin = blockIdx.x * per;
    const std::int64_t end = min(t.n, begin + per);
    const std::int64_t slot = (first + static_cast<std::int64_t>(blockIdx.y)) * kGradNormBlocks + blockIdx.x;
    if (begin >= t.n) {  // past a small tensor's end: the whole block, so no barrier is skipped
        if (threadIdx.x == 0) partial[slot] = 0.0;
        return;
    }
    double acc = 0.0;
    for (std::int64_t k = begin + threadIdx.x; k < end; k += kBlock) {
        const double g = load(t.grad, t.grad_dtype, k);
        acc += g * g;
    }
    const double sum = block_sum_fixed(acc, shared);
    if (threadIdx.x == 0) partial[slot] = sum;
}

__global__ void grad_sum_squares_final_kernel(double* sumsq, const double* partial,
                                              std::int64_t n) {
    __shared__ double shared[kBlock];
    double acc = 0.0;
    for (std::int64_t i = threadIdx.x; i < n; i += kBlock)
        acc += partial[i];
    const double sum = block_sum_fixed(acc, shared);
    if (threadIdx.x == 0) *sumsq = sum;
}

__global__ void grad_unscale_check_kernel(int* found_nonfinite, TensorList list, float scale) {
    const OptimizerTensor& t = list.t[blockIdx.y];
    bool bad = false;
    for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < t.n;
         k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = load(t.grad, t.grad_dtype, k) * scale;
        bad = bad || !isfinite(v);
        store(t.grad, t.grad_dtype, k, v);
    }
    if (bad) *found_nonfinite = 1;  // every writer writes the same value
}

// Calls launch(list, first) for each group of up to kMaxTensors tensors.
template <class Launch>
void for_each_group(const OptimizerTensor* tensors, int count, Launch&& launch) {
    NAPKIN_CUDA_REQUIRE(count >= 0 && (count == 0 || tensors != nullptr),
                        "optimizer: " << count << " tensors");
    for (int first = 0; first < count; first += kMaxTensors) {
        TensorList list;
        list.count = std::min(kMaxTensors, count - first);
        std::int64_t max_n = 0;
        for (int i = 0; i < list.count; ++i) {
            list.t[i] = tensors[first + i];
            NAPKIN_CUDA_REQUIRE(list.t[i].n >= 0,
                                "optimizer: tensor " << first + i << " has n " << list.t[i].n);
            max_n = std::max(max_n, list.t[i].n);
        }
        launch(list, first, max_n);
    }
}

}  // namespace

void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                      DType state_dtype, CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(state_dtype == DType::f32 || state_dtype == DType::bf16,
                        "optimizer_update: state dtype " << static_cast<int>(state_dtype));
    for_each_group(tensors, count, [&](const TensorList& list, int first, std::int64_t max_n) {
        for (int i = 0; i < list.count; ++i) {
            NAPKIN_CUDA_REQUIRE(
                list.t[i].master != nullptr || list.t[i].weight != nullptr,
                "optimizer_update: tensor " << first + i << " has neither a master nor a weight");
        }
        if (max_n == 0) return;
        const dim3 grid(std::min(grid_for(max_n, kBlock), kUpdateBlocksMax),
                        static_cast<unsigned>(list.count));
        optimizer_update_kernel<<<grid, kBlock, 0, stream>>>(h, list, state_dtype);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
}

void grad_sum_squares(double* sumsq, const OptimizerTensor* tensors, int count, void* scratch,
                      CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(scratch != nullptr, "grad_sum_squares: scratch is required");
    auto* partial = static_cast<double*>(scratch);  // (count, kGradNormBlocks)
    for_each_group(tensors, count, [&](const TensorList& list, int first, std::int64_t) {
        const dim3 grid(kGradNormBlocks, static_cast<unsigned>(list.count));
        grad_sum_squares_partial_kernel<<<grid, kBlock, 0, stream>>>(partial, list, first);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
    grad_sum_squares_final_kernel<<<1, kBlock, 0, stream>>>(
        sumsq, partial, static_cast<std::int64_t>(count) * kGradNormBlocks);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void grad_unscale_check(int* found_nonfinite, const OptimizerTensor* tensors, int count,
                        float scale, CUstream_st* stream) {
    for_each_group(tensors, count, [&](const TensorList& list, int, std::int64_t max_n) {
        if (max_n == 0) return;
        const dim3 grid(std::min(grid_for(max_n, kBlock), kUpdateBlocksMax),
                        static_cast<unsigned>(list.count));
        grad_unscale_check_kernel<<<grid, kBlock, 0, stream>>>(found_nonfinite, list, scale);
        NAPKIN_CUDA_CHECK_LAUNCH();
    });
}

}  // namespace napkin::cuda
