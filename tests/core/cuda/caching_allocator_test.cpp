// The caching allocator's pool logic on a fake device backend (no GPU needed): size classes,
// reuse without backend calls in a steady state, out-of-memory recovery, stats, and the
// accounting allocator sitting on top.
#include "core/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <set>
#include <vector>

namespace napkin {
namespace {

// Host memory with a capacity, counting calls, standing in for cudaMalloc.
class FakeDevice final : public DeviceMemoryBackend {
public:
    explicit FakeDevice(std::size_t capacity) : capacity_(capacity) {}
    void* raw_allocate(std::size_t bytes) override {
        ++allocs;
        if (used + bytes > capacity_) return nullptr;
        used += bytes;
        void* p = std::malloc(bytes);
        sizes_[p] = bytes;
        return p;
    }
    void raw_free(void* p) noexcept override {
        ++frees;
        used -= sizes_.at(p);
        sizes_.erase(p);
        std::free(p);
    }
    DeviceKind device() const override { return DeviceKind::cuda; }

    std::size_t used = 0;
    int allocs = 0, frees = 0;

private:
    std::size_t capacity_;
    std::unordered_map<void*, std::size_t> sizes_;
};

TEST(CachingAllocator, SizeClassesRoundUpByAtMostAQuarter) {
    EXPECT_EQ(CachingAllocator::size_class(0), 0u);
    EXPECT_EQ(CachingAllocator::size_class(1), 512u);
    EXPECT_EQ(CachingAllocator::size_class(512), 512u);
    EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
    EXPECT_EQ(CachingAllocator::size_class(1u << 20), 1u << 20);
    EXPECT_EQ(CachingAllocator::size_class((1u << 20) + 1), (1u << 20) + (1u << 18));
    std::size_t prev = 0;
    for (std::size_t bytes = 1; bytes < (64u << 20); bytes = bytes * 3 / 2 + 7) {
        const std::size_t cls = CachingAllocator::size_class(bytes);
        EXPECT_GE(cls, bytes);
        EXPECT_GE(cls, prev);  // monotonic
        if (bytes >= (1u << 20))
            EXPECT_LE(cls, bytes + bytes / 4);
        else
            EXPECT_EQ(cls % 512, 0u);
        prev = cls;
    }
}

TEST(CachingAllocator, SteadyStateStepsCallTheBackendOnlyOnTheFirstStep) {
    FakeDevice dev(1ull << 30);
    CachingAllocator cache(dev);
    const std::vector<std::size_t> step_sizes = {4096, 3u << 20, 100, 7u << 20, 4096, 123457};
    for (int step = 0; step < 5; ++step) {
        std::vector<void*> live;
        for (std::size_t s : step_sizes)
            live.push_back(cache.allocate(s));
        EXPECT_EQ(std::set<void*>(live.begin(), live.end()).size(), live.size());  // distinct
        for (void* p : live)
            cache.deallocate(p, 0);
        EXPECT_EQ(dev.allocs, static_cast<int>(step_sizes.size())) << "step " << step;
    }
    const CachingAllocatorStats st = cache.stats();
    EXPECT_EQ(st.backend_allocs, static_cast<std::int64_t>(step_sizes.size()));
    EXPECT_EQ(st.cache_hits, 4 * static_cast<std::int64_t>(step_sizes.size()));
    EXPECT_EQ(st.in_use_bytes, 0);
    EXPECT_EQ(st.requested_bytes, 0);
    EXPECT_EQ(st.reserved_bytes, static_cast<std::int64_t>(dev.used));
    EXPECT_GE(st.peak_in_use_bytes, 4096 + (3 << 20) + 100 + (7 << 20) + 4096 + 123457);
    cache.release_cached();
    EXPECT_EQ(dev.used, 0u);
    EXPECT_EQ(cache.stats().reserved_bytes, 0);
}

TEST(CachingAllocator, OutOfMemoryReleasesThePoolsAndRetriesThenThrows) {
    FakeDevice dev(4u << 20);
    CachingAllocator cache(dev);
    void* a = cache.allocate(3u << 20);
    cache.deallocate(a, 3u << 20);       // cached: 3 MiB held, 1 MiB free on the "device"
    void* b = cache.allocate(2u << 20);  // does not fit beside the cached block: pools released
    EXPECT_NE(b, nullptr);
    EXPECT_EQ(cache.stats().oom_retries, 1);
    EXPECT_EQ(cache.stats().backend_frees, 1);
    EXPECT_THROW(cache.allocate(3u << 20), std::bad_alloc);
    cache.deallocate(b, 2u << 20);
}

TEST(CachingAllocator, AccountingAllocatorSitsOnTop) {
    FakeDevice dev(1ull << 30);
    CachingAllocator cache(dev);
    AccountingAllocator acc(cache);
    EXPECT_EQ(acc.device(), DeviceKind::cuda);
    MemBlock w = acc.allocate("w", MemCategory::parameters, 1000);
    MemBlock ws = acc.allocate("cublaslt.workspace", MemCategory::temporaries, 32u << 20);
    EXPECT_EQ(acc.current_bytes(MemCategory::parameters), 1000);
    EXPECT_EQ(acc.current_bytes(MemCategory::temporaries), 32 << 20);
    EXPECT_EQ(cache.stats().requested_bytes, 1000 + (32 << 20));
    EXPECT_EQ(cache.stats().in_use_bytes, 1024 + (32 << 20));  // size classes
    acc.free(ws);
    MemBlock ws2 = acc.allocate("cublaslt.workspace", MemCategory::temporaries, 32u << 20);
    EXPECT_EQ(dev.allocs, 2);  // served from the pool
    acc.free(ws2);
    acc.free(w);
    EXPECT_EQ(acc.peak_total_bytes(), 1000 + (32 << 20));
}

}  // namespace
}  // namespace napkin
