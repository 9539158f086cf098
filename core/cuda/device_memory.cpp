// cudaMalloc backend and cudaMemGetInfo sampling (declared in core/cuda/device_memory.h).
#include "core/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>

#include "core/cuda/cuda_check.h"

namespace napkin::cuda {

void* CudaDeviceMemory::raw_allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it: out of memory is an answer, not a sticky failure
        return nullptr;
    }
    NAPKIN_CUDA_CHECK(err);
    return p;
}

void CudaDeviceMemory::raw_free(void* ptr) noexcept {
    const cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) {  // noexcept: a destructor path cannot throw
        std::fprintf(stderr, "napkin: cudaFree(%p) failed: %s\n", ptr, cudaGetErrorString(err));
    }
}

DeviceMemoryInfo device_memory_info() {
    std::size_t free_bytes = 0, total_bytes = 0;
    NAPKIN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
}

DeviceMemoryPeak::DeviceMemoryPeak() {
    baseline_ = device_memory_info().used_bytes();
    peak_ = baseline_;
}

void DeviceMemoryPeak::sample() {
    peak_ = std::max(peak_, device_memory_info().used_bytes());
}

}  // namespace napkin::cuda
