// The caching device allocator: the raw memory under the accounting allocator on the CUDA
// backend (AccountingAllocator(caching) -> CachingAllocator -> cudaMalloc), so that a training
// step reuses the blocks of the step before instead of calling cudaMalloc and cudaFree (which
// synchronizes the device) per tensor.
//
// Requests are rounded up to a size class (multiples of 512 bytes below 1 MiB; above it four
// classes per power of two, at most 25% rounding) and a freed block goes back to its class's
// pool, from which the next request of the same class is served. Steady-state training asks for
// the same shapes every step, so after the first step no backend call happens at all. When the
// backend is out of memory, the pools are released and the request retried once, then
// std::bad_alloc is thrown.
//
// Two numbers differ from what the accounting allocator above it counts: reserved_bytes (what
// the backend holds: blocks in use and blocks cached) and in_use_bytes (size-class rounded);
// the accounting allocator counts the bytes asked for, by category. cudaMemGetInfo's view
// (core/cuda/device_memory.h) adds the CUDA context, cuBLAS's and NCCL's own memory on top.
//
// The pool logic knows nothing of CUDA: the backend is an interface (CudaDeviceMemory in
// core/cuda/device_memory.h; a fake in tests/core/cuda/caching_allocator_test.cpp), so it is
// unit-tested on machines without a GPU. Thread-safe (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace napkin {

// Where the caching allocator gets its blocks.
class DeviceMemoryBackend {
public:
    virtual ~DeviceMemoryBackend() = default;
    // nullptr when out of memory; throws on any other failure.
    virtual void* raw_allocate(std::size_t bytes) = 0;
    virtual void raw_free(void* ptr) noexcept = 0;
    virtual DeviceKind device() const = 0;
};

struct CachingAllocatorStats {
    std::int64_t reserved_bytes = 0;   // held from the backend: in use + cached
    std::int64_t in_use_bytes = 0;     // handed out, rounded to size classes
    std::int64_t requested_bytes = 0;  // handed out, as asked
    std::int64_t peak_reserved_bytes = 0;
    std::int64_t peak_in_use_bytes = 0;
    std::int64_t backend_allocs = 0;  // cudaMalloc calls
    std::int64_t backend_frees = 0;   // cudaFree calls
    std::int64_t cache_hits = 0;      // requests served from a pool
    std::int64_t oom_retries = 0;     // pools released after an out-of-memory answer
};

class CachingAllocator final : public RawMemory {
public:
    explicit CachingAllocator(DeviceMemoryBackend& backend);
    ~CachingAllocator() override;  // returns every cached block; blocks still in use leak
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    // RawMemory: the accounting allocator sits on top of these.
    void* allocate(std::size_t bytes) override;  // throws std::bad_alloc when out of memory
    void deallocate(void* ptr, std::size_t bytes) noexcept override;
    DeviceKind device() const override { return backend_.device(); }

    // Returns every cached (free) block to the backend; blocks in use are untouched.
    void release_cached() noexcept;
    CachingAllocatorStats stats() const;
    // Starts a new peak window: peaks become the current values.
    void reset_peaks();

    // The size class a request of `bytes` is served from (>= bytes; 0 for 0).
    static std::size_t size_class(std::size_t bytes);

private:
    void release_cached_locked() noexcept;

    DeviceMemoryBackend& backend_;
    mutable std::mutex mutex_;
    std::unordered_map<std::size_t, std::vector<void*>> pools_;  // size class -> free blocks
    struct Live {
        std::size_t size_class = 0;
        std::size_t requested = 0;
    };
    std::unordered_map<void*, Live> live_;
    CachingAllocatorStats stats_;
};

}  // namespace napkin
