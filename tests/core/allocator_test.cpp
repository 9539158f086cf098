#include "core/allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"

namespace napkin {
namespace {

TEST(AccountingAllocator, CurrentAndPeakPerCategory) {
    HostMemory host;
    AccountingAllocator a(host);
    MemBlock w = a.allocate("h.0.attn.qkv", MemCategory::parameters, 1000);
    MemBlock act = a.allocate("h.0.attn.qkv.out", MemCategory::activations, 300);
    EXPECT_EQ(a.current_bytes(MemCategory::parameters), 1000);
    EXPECT_EQ(a.current_bytes(MemCategory::activations), 300);
    EXPECT_EQ(a.current_total_bytes(), 1300);
    a.free(act);
    EXPECT_EQ(act.ptr, nullptr);
    MemBlock tmp = a.allocate("scratch", MemCategory::temporaries, 200);
    EXPECT_EQ(a.peak_bytes(MemCategory::activations), 300);
    EXPECT_EQ(a.current_bytes(MemCategory::activations), 0);
    EXPECT_EQ(a.peak_total_bytes(), 1300);  // 1000 + 300, not 1000 + 300 + 200
    EXPECT_EQ(a.live_blocks(), 2);
    a.free(tmp);
    a.free(w);
    a.free(w);  // a freed block is empty: no-op
    EXPECT_EQ(a.current_total_bytes(), 0);
    EXPECT_EQ(a.live_blocks(), 0);
    a.reset_peaks();
    EXPECT_EQ(a.peak_total_bytes(), 0);
}

// A freed host block serves the next request of its size: the same sizes every step reuse the
// same memory instead of fragmenting malloc's heap.
TEST(HostMemory, FreedBlocksServeTheNextRequestOfTheirSize) {
    HostMemory host;
    void* a = host.allocate(1000);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
    std::memset(a, 1, 1000);
    host.deallocate(a, 1000);
    EXPECT_EQ(host.cached_bytes(), 1024u);  // rounded to 64 bytes
    void* b = host.allocate(1010);          // the same rounded size
    EXPECT_EQ(b, a);
    EXPECT_EQ(host.cached_bytes(), 0u);
    void* c = host.allocate(2000);  // another size: fresh memory
    EXPECT_NE(c, a);
    host.deallocate(b, 1010);
    host.deallocate(c, 2000);
    EXPECT_EQ(host.cached_bytes(), 1024u + 2048u);
}  // the destructor frees the cache (ASan's leak check would say otherwise)

// Raw memory that refuses any request over a limit, as a full device does.
class SmallMemory final : public RawMemory {
public:
    void* allocate(std::size_t bytes) override {
        if (bytes > 4096) throw std::bad_alloc();
        return host_.allocate(bytes);
    }
    void deallocate(void* p, std::size_t bytes) noexcept override { host_.deallocate(p, bytes); }
    DeviceKind device() const override { return DeviceKind::cuda; }

private:
    HostMemory host_;
};

TEST(AccountingAllocator, ARefusedRequestIsOutOfMemoryNamingItAndWhatIsLive) {
    SmallMemory small;
    AccountingAllocator a(small);
    MemBlock w = a.allocate("wte", MemCategory::parameters, 4000);
    try {
        a.allocate("h.3.attn.qkv.out", MemCategory::activations, 2'500'000'000);
        FAIL() << "a request over the limit was granted";
    } catch (const OutOfMemory& e) {
        EXPECT_STREQ(
            e.what(),
            "out of device memory allocating h.3.attn.qkv.out (activations, 2.50 GB) with 0.00 GB "
            "live: parameters 0.00");
    }
    EXPECT_EQ(a.current_total_bytes(), 4000);  // nothing recorded for the refused request
    EXPECT_EQ(a.live_blocks(), 1);
    a.free(w);
}

TEST(AccountingAllocator, RecordingOffKeepsTheCountsAndClearDropsTheEvents) {
    HostMemory host;
    AccountingAllocator a(host);
    MemBlock w = a.allocate("wte", MemCategory::parameters, 100);
    a.set_record_events(false);
    MemBlock t = a.allocate("tmp", MemCategory::temporaries, 50);
    EXPECT_EQ(a.events().size(), 1u);  // wte only
    EXPECT_EQ(a.peak_total_bytes(), 150);
    a.clear_events();
    EXPECT_TRUE(a.events().empty());
    a.free(t);
    a.free(w);
    EXPECT_TRUE(a.events().empty());
    EXPECT_EQ(a.current_total_bytes(), 0);
}

// A micro-batch captured into a CUDA graph runs its host code once: the tape of its allocations
// and frees, replayed at each launch, gives the counts and peaks (and events) as if it ran again.
TEST(AccountingAllocator, ATapeReplaysTheCountsAndPeaksOfWhatItRecorded) {
    HostMemory host;
    AccountingAllocator a(host);
    MemBlock w = a.allocate("wte", MemCategory::parameters, 100);
    a.begin_tape();
    MemBlock act = a.allocate("h.0.ln_1.out", MemCategory::activations, 40);
    MemBlock tmp = a.allocate("grad.wide", MemCategory::temporaries, 30);
    a.free(act);
    a.free(tmp);
    const std::vector<MemEvent> tape = a.end_tape();
    ASSERT_EQ(tape.size(), 4u);
    MemBlock after = a.allocate("not on the tape", MemCategory::temporaries, 5);
    a.free(after);
    a.reset_peaks();
    const std::size_t events = a.events().size();
    a.replay(tape);
    EXPECT_EQ(a.peak_bytes(MemCategory::activations), 40);
    EXPECT_EQ(a.peak_bytes(MemCategory::temporaries), 30);
    EXPECT_EQ(a.peak_total_bytes(), 170);
    EXPECT_EQ(a.current_total_bytes(), 100);
    EXPECT_EQ(a.live_blocks(), 1);
    ASSERT_EQ(a.events().size(), events + 4);
    for (std::size_t i = 0; i < tape.size(); ++i) {
        EXPECT_EQ(a.events()[events + i].bytes, tape[i].bytes);
        EXPECT_EQ(a.events()[events + i].name_id, tape[i].name_id);
        // Apart in time: the trace's memory counters merge events at one instant into one
        // sample, which would hide the replayed peak.
        EXPECT_GT(a.events()[events + i].t_ns, a.events()[events + i - 1].t_ns);
    }
    a.free(w);
}

TEST(AccountingAllocator, EventsRecordEveryAllocAndFree) {
    HostMemory host;
    AccountingAllocator a(host);
    MemBlock x = a.allocate("x", MemCategory::gradients, 64);
    MemBlock y = a.allocate("y", MemCategory::gradients, 128);
    MemBlock z = a.allocate("x", MemCategory::gradients, 0);  // zero bytes: nothing recorded
    a.free(x);
    a.free(y);
    a.free(z);
    ASSERT_EQ(a.events().size(), 4u);
    EXPECT_EQ(a.events()[0].bytes, 64);
    EXPECT_EQ(a.events()[2].bytes, -64);
    EXPECT_EQ(a.names()[a.events()[0].name_id], "x");
    EXPECT_EQ(a.events()[0].name_id, a.events()[2].name_id);
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < a.events().size(); ++i) {
        sum += a.events()[i].bytes;
        if (i > 0) {
            EXPECT_GE(a.events()[i].t_ns, a.events()[i - 1].t_ns);
        }
    }
    EXPECT_EQ(sum, 0);
}

TEST(AccountingAllocator, RandomSequenceBalances) {
    HostMemory host;
    AccountingAllocator a(host);
    std::mt19937 rng(std::random_device{}());
    std::vector<MemBlock> live;
    std::int64_t expected = 0, expected_peak = 0;
    for (int i = 0; i < 2000; ++i) {
        if (live.empty() || rng() % 3 != 0) {
            const std::size_t n = 1 + rng() % 4096;
            live.push_back(a.allocate("b", static_cast<MemCategory>(rng() % kMemCategoryCount), n));
            std::memset(live.back().ptr, 0xab, n);  // the memory is real and writable
            expected += static_cast<std::int64_t>(n);
            expected_peak = std::max(expected_peak, expected);
        } else {
            const std::size_t k = rng() % live.size();
            expected -= static_cast<std::int64_t>(live[k].bytes);
            a.free(live[k]);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
        ASSERT_EQ(a.current_total_bytes(), expected);
    }
    EXPECT_EQ(a.peak_total_bytes(), expected_peak);
    for (auto& b : live)
        a.free(b);
    EXPECT_EQ(a.current_total_bytes(), 0);
}

TEST(Tensor, OwnsAccountedStorage) {
    HostMemory host;
    AccountingAllocator a(host);
    {
        Tensor t(a, "wte", MemCategory::parameters, DType::bf16, {256, 128});
        EXPECT_EQ(t.numel(), 256 * 128);
        EXPECT_EQ(t.bytes(), 256u * 128 * 2);
        EXPECT_EQ(a.current_bytes(MemCategory::parameters), 256 * 128 * 2);
        Tensor moved = std::move(t);
        EXPECT_TRUE(t.empty());
        EXPECT_EQ(a.live_blocks(), 1);
        Tensor nf4(a, "q", MemCategory::parameters, DType::nf4, {3});  // 1.5 bytes -> 2
        EXPECT_EQ(nf4.bytes(), 2u);
    }
    EXPECT_EQ(a.current_total_bytes(), 0);
    EXPECT_EQ(a.live_blocks(), 0);
}

}  // namespace
}  // namespace napkin
