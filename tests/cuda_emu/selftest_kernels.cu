// The emulator's own test kernels (tests/cuda_emu/selftest_kernels.h says what each does).
// Compiled only for the emulator: rewrite_cu.cmake turns the launches into emulated ones.
#include "tests/cuda_emu/selftest_kernels.h"

namespace napkin::emu::selftest {

namespace {

constexpr int kMaxThreads = 1024;

__device__ int flat_thread() {
    return static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
}

__global__ void block_sum_kernel(const int* in, int* out, bool barriers) {
    __shared__ int shared[kMaxThreads];
    const int t = flat_thread();
    const int n = static_cast<int>(blockDim.x * blockDim.y);
    shared[t] = in[blockIdx.x * n + t];
    if (barriers) __syncthreads();
    for (int stride = n / 2; stride > 0; stride /= 2) {
        if (t < stride) shared[t] += shared[t + stride];
        if (barriers) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = shared[0];
}

__global__ void warp_ops_kernel(int* out) {
    const int lane = static_cast<int>(threadIdx.x);
    const int v = lane + 1;
    int sum = v;
    for (int m = 16; m > 0; m /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
    out[lane] = sum;
    out[32 + lane] = __shfl_down_sync(0xffffffffu, v, 1);
    out[64 + lane] = __shfl_up_sync(0xffffffffu, v, 2);
    out[96 + lane] = __shfl_sync(0xffffffffu, v, 3, 8);
    const unsigned odd = __ballot_sync(0xffffffffu, lane % 2 == 1);
    const int any = __any_sync(0xffffffffu, lane == 31);
    const int all = __all_sync(0xffffffffu, lane < 31);
    const int count = __syncthreads_count(lane % 2 == 0);
    if (lane == 0) {
        out[128] = static_cast<int>(odd);
        out[129] = any;
        out[130] = all;
        out[131] = count;
    }
}

__global__ void barrier_after_return_kernel() {
    if (threadIdx.x >= 16) return;
    __syncthreads();
}

__global__ void deadlock_kernel() {
    if (threadIdx.x == 31) {
        __syncthreads();
        return;
    }
    (void)__shfl_sync(0xffffffffu, 1, 31);
}

__global__ void shuffle_outside_mask_kernel(int* out) {
    if (threadIdx.x < 16)
        out[threadIdx.x] = __shfl_sync(0xffffu, static_cast<int>(threadIdx.x), 20);
}

__global__ void dynamic_shared_kernel(int* out, int smem) {
    extern __shared__ unsigned char bytes[];
    if (threadIdx.x == 0) {
        bytes[smem - 1] = 42;
        out[0] = bytes[smem - 1];
    }
}

__global__ void read_past_end_kernel(const int* in, int n, int* out) {
    out[0] = in[n];
}

}  // namespace

cudaError_t read_past_end(const int* in, int n, int* out) {
    read_past_end_kernel<<<1, 1>>>(in, n, out);
    return cudaGetLastError();
}

cudaError_t block_sum(const int* in, int* out, int blocks, int threads) {
    block_sum_kernel<<<blocks, dim3(threads / 4, 4)>>>(in, out, true);
    return cudaGetLastError();
}

cudaError_t block_sum_without_barriers(const int* in, int* out, int blocks, int threads) {
    block_sum_kernel<<<blocks, dim3(threads / 4, 4)>>>(in, out, false);
    return cudaGetLastError();
}

cudaError_t warp_ops(int* out) {
    warp_ops_kernel<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t barrier_after_return() {
    barrier_after_return_kernel<<<1, 32>>>();
    return cudaGetLastError();
}

cudaError_t deadlock() {
    deadlock_kernel<<<1, 32>>>();
    return cudaGetLastError();
}

cudaError_t shuffle_outside_mask(int* out) {
    shuffle_outside_mask_kernel<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t dynamic_shared(int* out, int threads, int smem, bool optin) {
    if (optin) {
        const cudaError_t e = cudaFuncSetAttribute(
            dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
    }
    dynamic_shared_kernel<<<1, threads, static_cast<std::size_t>(smem)>>>(out, smem);
    return cudaGetLastError();
}

}  // namespace napkin::emu::selftest
