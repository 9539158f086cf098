// The Recorder (cap, drops, tracks, threads) and ScopedRange (nesting, cost, args, off).
#include "profiler/event.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "profiler/host_range.h"

namespace napkin::profiler {
namespace {

TEST(Recorder, CapCountsDropsAndNeverThrows) {
    Recorder rec(3);
    for (int i = 0; i < 5; ++i)
        rec.counter("c", i, static_cast<double>(i));
    EXPECT_EQ(rec.size(), 3u);
    EXPECT_EQ(rec.dropped(), 2u);

    std::vector<Event> events = rec.take();
    ASSERT_EQ(events.size(), 3u);
    // The oldest are kept, the newest dropped.
    EXPECT_EQ(std::get<CounterEvent>(events[2]).t_ns, 2);
    EXPECT_EQ(rec.size(), 0u);

    // take() frees the buffer; the drop count is for the whole run.
    rec.instant("mark", Category::marker, kHostTrack, 7);
    EXPECT_EQ(rec.size(), 1u);
    EXPECT_EQ(rec.dropped(), 2u);
}

TEST(Recorder, ZeroCapacityDropsEverything) {
    Recorder rec(0);
    { ScopedRange r(&rec, "x", Category::op); }
    rec.flow("launch", FlowPhase::start, 1, kHostTrack, 0);
    EXPECT_EQ(rec.size(), 0u);
    EXPECT_EQ(rec.dropped(), 2u);
}

TEST(Recorder, ClockStartsAtZeroAndIsMonotonic) {
    Recorder rec;
    const std::int64_t a = rec.now_ns();
    const std::int64_t b = rec.now_ns();
    EXPECT_GE(a, 0);
    EXPECT_GE(b, a);
    EXPECT_EQ(rec.to_ns(rec.start()), 0);
}

TEST(Recorder, SharesAClockStartedEarlier) {
    // E.g. the AccountingAllocator's start: memory events then need no offset.
    const auto earlier = std::chrono::steady_clock::now() - std::chrono::milliseconds(5);
    Recorder rec(Recorder::kDefaultCapacity, earlier);
    EXPECT_GE(rec.now_ns(), 5'000'000);
    EXPECT_EQ(rec.start(), earlier);
}

TEST(Recorder, TracksHaveStableIdsFromOne) {
    Recorder rec;
    auto tracks = rec.tracks();
    ASSERT_EQ(tracks.size(), 2u);
    EXPECT_EQ(tracks[0].id, kHostTrack);
    EXPECT_EQ(tracks[0].name, "host");
    EXPECT_EQ(tracks[1].id, kDeviceTrack);
    EXPECT_EQ(tracks[1].name, "device (cpu kernels)");
    const TrackId stream = rec.add_track("stream 7", 5);
    EXPECT_EQ(stream, 3u);
    rec.rename_track(kDeviceTrack, "device (H100)");
    tracks = rec.tracks();
    EXPECT_EQ(tracks[1].name, "device (H100)");
    EXPECT_EQ(tracks[2].name, "stream 7");
    EXPECT_EQ(tracks[2].sort_index, 5);
}

TEST(Recorder, ManyThreadsCountEveryEvent) {
    constexpr int kThreads = 4;
    constexpr int kPerThread = 1000;
    Recorder rec(2500);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&rec, t] {
            for (int i = 0; i < kPerThread; ++i) {
                ScopedRange r(&rec, "op", Category::op, {}, static_cast<TrackId>(10 + t));
            }
        });
    }
    for (auto& th : threads)
        th.join();
    EXPECT_EQ(rec.size(), 2500u);
    EXPECT_EQ(rec.size() + rec.dropped(), static_cast<std::size_t>(kThreads * kPerThread));
}

TEST(ScopedRange, NestedRangesRecordChildFirstAndNest) {
    Recorder rec;
    KernelCost cost;
    cost.flops = 2000;
    cost.bytes_read = 300;
    cost.bytes_written = 100;
    {
        ScopedRange step(&rec, "step 0", Category::step);
        {
            // A temporary name: the range copies it.
            ScopedRange op(&rec, std::string("h.") + std::to_string(3) + ".attn.qkv", Category::op,
                           cost);
            op.add_arg("tokens", std::int64_t{8192});
            op.add_arg("note", std::string("fused"));
        }
    }
    std::vector<Event> events = rec.take();
    ASSERT_EQ(events.size(), 2u);
    const auto& op = std::get<RangeEvent>(events[0]);
    const auto& step = std::get<RangeEvent>(events[1]);
    EXPECT_EQ(op.name, "h.3.attn.qkv");
    EXPECT_EQ(op.category, Category::op);
    EXPECT_EQ(op.track, kHostTrack);
    EXPECT_EQ(op.flops, 2000u);
    EXPECT_EQ(op.bytes, 400u);
    ASSERT_EQ(op.args.size(), 2u);
    EXPECT_EQ(op.args[0].key, "tokens");
    EXPECT_EQ(std::get<std::int64_t>(op.args[0].value), 8192);
    EXPECT_EQ(std::get<std::string>(op.args[1].value), "fused");
    EXPECT_EQ(step.name, "step 0");
    EXPECT_EQ(step.flops, 0u);
    EXPECT_GE(op.dur_ns, 0);
    EXPECT_LE(step.start_ns, op.start_ns);
    EXPECT_GE(step.start_ns + step.dur_ns, op.start_ns + op.dur_ns);
}

TEST(ScopedRange, NullRecorderRecordsNothing) {
    ScopedRange r(nullptr, "h.0.mlp.fc", Category::op);
    EXPECT_FALSE(r.active());
    r.add_arg("ignored", 1.0);
    r.set_cost(KernelCost{});
}

TEST(ScopedRange, SetCostAfterOpening) {
    Recorder rec;
    {
        ScopedRange r(&rec, "fused", Category::kernel, {}, kDeviceTrack);
        EXPECT_TRUE(r.active());
        r.set_cost(KernelCost{10, 4, 4, 0});
    }
    auto events = rec.take();
    ASSERT_EQ(events.size(), 1u);
    const auto& e = std::get<RangeEvent>(events[0]);
    EXPECT_EQ(e.track, kDeviceTrack);
    EXPECT_EQ(e.flops, 10u);
    EXPECT_EQ(e.bytes, 8u);
}

TEST(Category, NamesCoverEveryValue) {
    EXPECT_EQ(enum_name(kCategoryNames, Category::op), "op");
    EXPECT_EQ(enum_name(kCategoryNames, Category::kernel), "kernel");
    EXPECT_EQ(find_enum(kCategoryNames, "optimizer"), Category::optimizer);
    for (const auto& entry : kCategoryNames) {
        EXPECT_EQ(enum_name(kCategoryNames, entry.value), entry.name);
    }
}

}  // namespace
}  // namespace napkin::profiler
