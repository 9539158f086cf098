// Size-class pools over a DeviceMemoryBackend (declared in core/cuda/caching_allocator.h).
#include "core/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <new>

namespace napkin {

namespace {

constexpr std::size_t kSmallAlign = 512;     // below kLargeMin: multiples of 512 bytes
constexpr std::size_t kLargeMin = 1u << 20;  // from 1 MiB: 4 classes per power of two
constexpr std::size_t kStepsPerPowerOfTwo = 4;

}  // namespace

std::size_t CachingAllocator::size_class(std::size_t bytes) {
    if (bytes == 0) return 0;
    if (bytes < kLargeMin) return (bytes + kSmallAlign - 1) / kSmallAlign * kSmallAlign;
    // bytes in [2^p, 2^(p+1)): classes 2^p * (1 + i/4), i = 1..4.
    const std::size_t p = std::bit_floor(bytes);
    const std::size_t step = p / kStepsPerPowerOfTwo;
    return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(DeviceMemoryBackend& backend) : backend_(backend) {}

CachingAllocator::~CachingAllocator() {
    release_cached();
}

void* CachingAllocator::allocate(std::size_t bytes) {
    const std::size_t cls = size_class(std::max<std::size_t>(bytes, 1));
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = nullptr;
    auto pool = pools_.find(cls);
    if (pool != pools_.end() && !pool->second.empty()) {
        p = pool->second.back();
        pool->second.pop_back();
        ++stats_.cache_hits;
    } else {
        p = backend_.raw_allocate(cls);
        if (p == nullptr) {
            ++stats_.oom_retries;
            release_cached_locked();
            p = backend_.raw_allocate(cls);
        }
        if (p == nullptr) throw std::bad_alloc();
        ++stats_.backend_allocs;
        stats_.reserved_bytes += static_cast<std::int64_t>(cls);
        stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    }
    live_[p] = Live{cls, bytes};
    stats_.in_use_bytes += static_cast<std::int64_t>(cls);
    stats_.requested_bytes += static_cast<std::int64_t>(bytes);
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    return p;
}

void CachingAllocator::deallocate(void* ptr, std::size_t) noexcept {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: ignore rather than corrupt the pools
    const Live l = it->second;
    live_.erase(it);
    stats_.in_use_bytes -= static_cast<std::int64_t>(l.size_class);
    stats_.requested_bytes -= static_cast<std::int64_t>(l.requested);
    try {
        pools_[l.size_class].push_back(ptr);
    } catch (...) {  // no memory for the pool's bookkeeping: give the block back instead
        backend_.raw_free(ptr);
        ++stats_.backend_frees;
        stats_.reserved_bytes -= static_cast<std::int64_t>(l.size_class);
    }
}

void CachingAllocator::release_cached() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
}

void CachingAllocator::release_cached_locked() noexcept {
    for (auto& [cls, blocks] : pools_) {
        for (void* p : blocks) {
            backend_.raw_free(p);
            ++stats_.backend_frees;
            stats_.reserved_bytes -= static_cast<std::int64_t>(cls);
        }
        blocks.clear();
    }
}

CachingAllocatorStats CachingAllocator::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void CachingAllocator::reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

}  // namespace napkin
