// cudaMalloc backend and cudaMemGetInfo sampling (declared in core/cuda/device_memory.h).
#include "core/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <new>

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

namespace {

cudaMemLocation host_location() {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeHost;
    l.id = 0;  // ignored for the host
    return l;
}

}  // namespace

void* ManagedMemory::allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw std::bad_alloc();
    }
    NAPKIN_CUDA_CHECK(err);
    try {
        NAPKIN_CUDA_CHECK(
            cudaMemAdvise(p, bytes, cudaMemAdviseSetPreferredLocation, host_location()));
    } catch (...) {
        cudaFree(p);
        throw;
    }
    return p;
}

void ManagedMemory::deallocate(void* ptr, std::size_t /*bytes*/) noexcept {
    const cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) {
        std::fprintf(stderr, "napkin: cudaFree(%p) of managed memory failed: %s\n", ptr,
                     cudaGetErrorString(err));
    }
}

void* pinned_allocate(std::size_t bytes) {
    void* p = nullptr;
    NAPKIN_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return p;
}

void pinned_free(void* ptr) noexcept {
    const cudaError_t err = cudaFreeHost(ptr);
    if (err != cudaSuccess) {
        std::fprintf(stderr, "napkin: cudaFreeHost(%p) failed: %s\n", ptr, cudaGetErrorString(err));
    }
}

void prefetch(const void* ptr, std::size_t bytes, bool to_device, CUstream_st* stream) {
    if (bytes == 0) return;
    cudaMemLocation where = host_location();
    if (to_device) {
        int device = 0;
        NAPKIN_CUDA_CHECK(cudaGetDevice(&device));
        where.type = cudaMemLocationTypeDevice;
        where.id = device;
    }
    NAPKIN_CUDA_CHECK(cudaMemPrefetchAsync(ptr, bytes, where, 0, stream));
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
