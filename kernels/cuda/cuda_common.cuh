// Shared by the CUDA kernels (kernels/cuda/<op>.cu): the mapping from napkin's storage types to
// CUDA's, conversions, warp and block reductions, launch sizes. Not a public header.
//
// Storage types: the op headers declare the CUDA kernels as templates on napkin's storage types
// (float, bf16_t, f16_t from core/half.h), exactly as the CPU kernels are declared, so a caller
// passes the same pointers to either backend. nvcc compiles in C++17 and core/half.h needs C++20,
// so this header only forward-declares bf16_t and f16_t; a kernel reinterprets the pointers as
// __nv_bfloat16 / __half, which have the same 2-byte layout (bf16: the high half of an fp32;
// f16: IEEE binary16). Explicit instantiations with the incomplete types are valid (only
// pointers to them are used) and mangle to the same names the tests call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/cuda/cuda_check.h"

namespace napkin {
struct bf16_t;
struct f16_t;
}  // namespace napkin

namespace napkin::cuda {

template <class T>
struct DeviceType {
    using type = float;
};
template <>
struct DeviceType<bf16_t> {
    using type = __nv_bfloat16;
};
template <>
struct DeviceType<f16_t> {
    using type = __half;
};
template <class T>
using device_t = typename DeviceType<T>::type;

template <class T>
device_t<T>* dev(T* p) {
    return reinterpret_cast<device_t<T>*>(p);
}
template <class T>
const device_t<T>* dev(const T* p) {
    return reinterpret_cast<const device_t<T>*>(p);
}

__device__ __forceinline__ float to_f32(float x) {
    return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
    return __half2float(x);
}

// Round to nearest even, as core/half.h does on the CPU.
template <class D>
__device__ __forceinline__ D from_f32(float f);
template <>
__device__ __forceinline__ float from_f32<float>(float f) {
    return f;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float f) {
    return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float f) {
    return __float2half_rn(f);
}

constexpr int kWarpSize = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats; the call synchronizes, so it may be reused right after.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int warps = blockDim.x / kWarpSize;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous reduction
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int warps = blockDim.x / kWarpSize;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

// The bits of a float: for a non-negative one they order as the value, so a maximum over
// non-negative floats is one atomicMax on unsigned (quantize's amax, the anomaly check's).
__device__ __forceinline__ unsigned float_bits(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// GPT-2's gelu (tanh approximation), as kernels/cpu/activation.cpp computes it: x sigmoid(2u),
// equal to 0.5 x (1 + tanh(u)) without its cancellation for negative x.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    return x / (1.0f + expf(-2.0f * u));  // expf overflow: -0, not NaN
}

// Its derivative, as kernels/cpu/gelu.h: s + 2 x s (1 - s) du/dx with s = sigmoid(2u) and
// 1 - s = e s (e = exp(-2u)), accurate in both tails.
__device__ __forceinline__ float gelu_tanh_grad(float x) {
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float e = expf(fminf(-2.0f * u, 88.0f));  // finite: e s s is never inf * 0
    const float s = 1.0f / (1.0f + e);
    const float one_minus_s = e * s;
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return s + 2.0f * x * s * one_minus_s * du_dx;
}

// Blocks for a grid-stride loop over n elements: enough to fill the device, never more than
// the elements need (gridDim.x may go to 2^31 - 1; 1 << 20 blocks of 256 is plenty).
inline unsigned grid_for(std::int64_t n, int block) {
    const std::int64_t blocks = (n + block - 1) / block;
    return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 1 << 20));
}

// Threads for a block that walks one row of C elements: a multiple of 32 in [32, 1024].
inline int block_for_row(std::int64_t C, int max_threads = 1024) {
    const std::int64_t want = (C + kWarpSize - 1) / kWarpSize * kWarpSize;
    return static_cast<int>(std::clamp<std::int64_t>(want, kWarpSize, max_threads));
}

// 16-byte vectors, the memory-bound kernels' loads and stores. A warp that moves one 2-byte
// element per thread moves 64 bytes per instruction and keeps too few loads in flight to reach
// HBM bandwidth; 16 bytes per thread (8 bf16/fp16, 4 fp32) move 512 in one 128-bit instruction.
// Pack<D, W> is W consecutive elements; at W = kVec<D> it is 16 bytes and must be loaded from a
// 16-byte aligned address (the host checks with aligned16 and otherwise takes the scalar path).
template <class D>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(D));

template <class D, int W>
struct alignas(sizeof(D) * W) Pack {
    D v[W];
};

template <int W, class D>
__device__ __forceinline__ Pack<D, W> load_pack(const D* p) {
    return *reinterpret_cast<const Pack<D, W>*>(p);
}

template <int W, class D>
__device__ __forceinline__ void store_pack(D* p, const Pack<D, W>& x) {
    *reinterpret_cast<Pack<D, W>*>(p) = x;
}

// True when every pointer (null included) is 16-byte aligned.
template <class... P>
bool aligned16(const P*... p) {
    return ((reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ...);
}

// An elementwise op over n elements: op.template apply<W>(i) does elements [i, i + W). With vec
// (every pointer the op touches 16-byte aligned and, for ops with rows, rows of whole vectors)
// the grid strides over the n / kVec whole vectors, then over the last n % kVec elements one by
// one; without, over every element one by one. Each element is read and written by one thread
// in one apply, so an op may write in place over what it reads. Launch: elementwise_grid.
template <class Op>
__global__ void elementwise_kernel(Op op, std::int64_t n, bool vec) {
    constexpr int V = kVec<typename Op::D>;
    const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    std::int64_t done = 0;
    if (vec) {
        const std::int64_t vectors = n / V;
        for (std::int64_t i = first; i < vectors; i += stride)
            op.template apply<V>(i * V);
        done = vectors * V;
    }
    for (std::int64_t i = done + first; i < n; i += stride)
        op.template apply<1>(i);
}

// elementwise_kernel's launch: kElementwiseBlock threads a block, one thread per vector (and
// tail element), or per element.
constexpr int kElementwiseBlock = 256;

template <class Op>
unsigned elementwise_grid(const Op&, std::int64_t n, bool vec) {
    constexpr int V = kVec<typename Op::D>;
    return grid_for(vec ? n / V + n % V : n, kElementwiseBlock);
}

// gridDim.y and gridDim.z are at most 65535; gridDim.x up to 2^31 - 1.
inline constexpr std::int64_t kMaxGridX = 2147483647;

// Dynamic shared memory above which a kernel opts in (48 KiB without, static included: a
// margin for the kernels' own static arrays).
inline constexpr std::size_t kOptInAbove = 40 * 1024;

// The most dynamic shared memory a block of the current device may opt in to (227 KiB on an
// H100, 163 KiB on an A100, 99 KiB on sm_86/89).
inline int max_smem_optin() {
    int device = 0, bytes = 0;
    NAPKIN_CUDA_CHECK(cudaGetDevice(&device));
    NAPKIN_CUDA_CHECK(
        cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return bytes;
}

// Lets `kernel` use `bytes` of dynamic shared memory (an opt-in past 48 KiB with static).
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* op) {
    if (bytes <= kOptInAbove) return;
    const int max_bytes = max_smem_optin();
    NAPKIN_CUDA_REQUIRE(
        bytes <= static_cast<std::size_t>(max_bytes),
        op << ": needs " << bytes << " bytes of shared memory, the device allows " << max_bytes);
    NAPKIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

}  // namespace napkin::cuda
