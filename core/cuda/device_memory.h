// Device memory on the CUDA backend: cudaMalloc/cudaFree behind the caching allocator's backend
// interface (core/cuda/caching_allocator.h), and cudaMemGetInfo sampling, the driver's view of
// the whole device (the CUDA context, cuBLAS's and NCCL's own buffers and every other process
// included), which the report puts beside the allocator's peaks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cuda/caching_allocator.h"

struct CUstream_st;

namespace napkin::cuda {

// cudaMalloc on the current device. Out of memory answers nullptr (the caching allocator then
// releases its pools and retries); any other error throws CudaError.
class CudaDeviceMemory final : public DeviceMemoryBackend {
public:
    void* raw_allocate(std::size_t bytes) override;
    void raw_free(void* ptr) noexcept override;  // a failing cudaFree is reported on stderr
    DeviceKind device() const override { return DeviceKind::cuda; }
};

// Paged memory (napkin train --paged-optimizer, QLoRA's paged optimizer): cudaMallocManaged,
// advised to live on the host (cudaMemAdviseSetPreferredLocation host), so the driver may evict
// it from the device under pressure and a kernel touching it faults its pages in. The engine
// does not rely on faults: it prefetches the whole range before the kernels that read it and
// back after them (prefetch below). Not cached: the optimizer allocates its states once.
// Out of memory throws std::bad_alloc, as RawMemory asks.
class ManagedMemory final : public RawMemory {
public:
    void* allocate(std::size_t bytes) override;
    void deallocate(void* ptr, std::size_t bytes) noexcept override;
    DeviceKind device() const override { return DeviceKind::cuda; }
};

// cudaMemPrefetchAsync of [ptr, ptr + bytes) (managed memory) to the current device, or to the
// host, queued on `stream`.
void prefetch(const void* ptr, std::size_t bytes, bool to_device, CUstream_st* stream);

// Pinned (page-locked) host memory, cudaHostAlloc: the trainer's batch staging, which the copy
// engine reads without the runtime's own staging copy, so a copy from it runs while the host goes
// on. Host memory: neither device memory nor in the accounting allocator. pinned_allocate throws
// CudaError (out of memory included); pinned_free reports a failure on stderr.
void* pinned_allocate(std::size_t bytes);
void pinned_free(void* ptr) noexcept;

struct DeviceMemoryInfo {
    std::uint64_t free_bytes = 0;
    std::uint64_t total_bytes = 0;
    std::uint64_t used_bytes() const { return total_bytes - free_bytes; }
};

// cudaMemGetInfo on the current device (checked).
DeviceMemoryInfo device_memory_info();

// Keeps the largest device usage seen by sample() (call it at the points of interest: after
// forward, after backward, after the optimizer step).
class DeviceMemoryPeak {
public:
    DeviceMemoryPeak();  // the first sample is the baseline (context and libraries)
    void sample();
    std::uint64_t baseline_used_bytes() const { return baseline_; }
    std::uint64_t peak_used_bytes() const { return peak_; }

private:
    std::uint64_t baseline_ = 0;
    std::uint64_t peak_ = 0;
};

}  // namespace napkin::cuda
