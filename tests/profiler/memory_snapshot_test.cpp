// The memory snapshot from a real AccountingAllocator: the peak and its live set, a timeline
// that sums to the allocator's current bytes, the counters for the trace.
#include "profiler/memory_snapshot.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiler/chrome_trace_writer.h"
#include "profiler/trace_check.h"
#include "tests/profiler/temp_dir.h"

namespace napkin::profiler {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using test::TempDir;

// A step in miniature. Totals after each event:
//   wte 1000 | qkv.out 300 -> 1300 | fc.out 500 -> 1800 | free qkv.out -> 1500 |
//   scratch 200 -> 1700 | free scratch -> 1500 | grad 400 -> 1900 (peak) | free grad -> 1500 |
//   free fc.out -> 1000
struct StepRun {
    HostMemory host;
    AccountingAllocator alloc{host};
    MemBlock wte, qkv, fc, scratch, grad;

    StepRun() {
        wte = alloc.allocate("wte", MemCategory::parameters, 1000);
        qkv = alloc.allocate("h.0.attn.qkv.out", MemCategory::activations, 300);
        fc = alloc.allocate("h.0.mlp.fc.out", MemCategory::activations, 500);
        alloc.free(qkv);
        scratch = alloc.allocate("scratch", MemCategory::temporaries, 200);
        alloc.free(scratch);
        grad = alloc.allocate("h.0.mlp.fc.weight.grad", MemCategory::gradients, 400);
    }
    void finish() {
        alloc.free(grad);
        alloc.free(fc);
    }
    ~StepRun() {
        alloc.free(wte);
        alloc.free(fc);
        alloc.free(grad);
    }
};

TEST(MemorySnapshot, PeakLiveSetMatchesTheAllocator) {
    StepRun run;
    const std::uint64_t grad_address = reinterpret_cast<std::uint64_t>(run.grad.ptr);
    run.finish();
    const MemoryPeak peak = find_memory_peak(run.alloc.events());
    EXPECT_EQ(peak.total_bytes, 1900);
    EXPECT_EQ(peak.total_bytes, run.alloc.peak_total_bytes());
    EXPECT_EQ(peak.by_category[static_cast<std::size_t>(MemCategory::parameters)], 1000);
    EXPECT_EQ(peak.by_category[static_cast<std::size_t>(MemCategory::activations)], 500);
    EXPECT_EQ(peak.by_category[static_cast<std::size_t>(MemCategory::gradients)], 400);
    EXPECT_EQ(peak.by_category[static_cast<std::size_t>(MemCategory::temporaries)], 0);
    ASSERT_EQ(peak.live.size(), 3u);
    const auto& names = run.alloc.names();
    EXPECT_EQ(names[peak.live[0].name_id], "wte");
    EXPECT_EQ(names[peak.live[1].name_id], "h.0.mlp.fc.out");
    EXPECT_EQ(names[peak.live[2].name_id], "h.0.mlp.fc.weight.grad");
    EXPECT_EQ(peak.live[2].bytes, 400);
    EXPECT_EQ(peak.live[2].address, grad_address);
    EXPECT_EQ(peak.live[2].category, MemCategory::gradients);
    // The peak is reached by the gradient's allocation (event 6).
    EXPECT_EQ(peak.t_ns, run.alloc.events()[6].t_ns);
    EXPECT_EQ(peak.live[2].t_ns_allocated, run.alloc.events()[6].t_ns);
}

TEST(MemorySnapshot, WritesTheDocumentAndTheTimelineSumsToCurrentBytes) {
    TempDir dir;
    StepRun run;
    const fs::path path = dir.path() / "memory.json";
    const std::int64_t offset_ns = 5'000;  // the allocator started 5 us into the run
    const WriteResult w = write_memory_snapshot(run.alloc, path, offset_ns);
    ASSERT_TRUE(w.ok) << w.error;
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"memory.json"});

    std::ifstream in(path);
    const json doc = json::parse(in);
    EXPECT_EQ(doc["schema"], "napkin-memory/1");
    EXPECT_EQ(doc["device"], "cpu");
    ASSERT_EQ(doc["categories"].size(), kMemCategoryCount);
    EXPECT_EQ(doc["categories"][4], "activations");
    EXPECT_EQ(doc["names"], json(run.alloc.names()));

    // Every event, in order, and their sum is what the allocator holds now (1900: the gradient
    // and fc.out are still live), category by category.
    const json& timeline = doc["timeline"];
    ASSERT_EQ(timeline.size(), run.alloc.events().size());
    std::int64_t total = 0;
    std::vector<std::int64_t> by_category(kMemCategoryCount, 0);
    for (std::size_t i = 0; i < timeline.size(); ++i) {
        const json& row = timeline[i];
        const MemEvent& e = run.alloc.events()[i];
        ASSERT_EQ(row.size(), 5u);
        EXPECT_NEAR(row[0].get<double>(), static_cast<double>(e.t_ns + offset_ns) / 1000.0, 1e-3);
        EXPECT_EQ(row[1], e.bytes);
        EXPECT_EQ(row[2], static_cast<std::size_t>(e.category));
        EXPECT_EQ(row[3], e.name_id);
        EXPECT_EQ(row[4], e.address);
        total += row[1].get<std::int64_t>();
        by_category[row[2].get<std::size_t>()] += row[1].get<std::int64_t>();
    }
    EXPECT_EQ(total, run.alloc.current_total_bytes());
    EXPECT_EQ(doc["final"]["total_bytes"], run.alloc.current_total_bytes());
    for (const auto& entry : kMemCategoryNames) {
        const auto c = static_cast<std::size_t>(entry.value);
        EXPECT_EQ(by_category[c], run.alloc.current_bytes(entry.value)) << entry.name;
        EXPECT_EQ(doc["final"]["by_category"][std::string(entry.name)], by_category[c]);
    }

    const json& peak = doc["peak"];
    EXPECT_EQ(peak["total_bytes"], 1900);
    EXPECT_EQ(peak["by_category"]["gradients"], 400);
    ASSERT_EQ(peak["live"].size(), 3u);
    EXPECT_EQ(peak["live"][0]["name"], "wte");
    EXPECT_EQ(peak["live"][0]["category"], "parameters");
    EXPECT_EQ(peak["live"][0]["bytes"], 1000);
    EXPECT_EQ(peak["live"][2]["name"], "h.0.mlp.fc.weight.grad");
    EXPECT_EQ(peak["live"][2]["address"], reinterpret_cast<std::uint64_t>(run.grad.ptr));
    EXPECT_NEAR(peak["t_us"].get<double>(),
                static_cast<double>(run.alloc.events()[6].t_ns + offset_ns) / 1000.0, 1e-3);
    EXPECT_NEAR(peak["live"][2]["t_us_allocated"].get<double>(), peak["t_us"].get<double>(), 1e-3);

    // The in-memory document is the same as the streamed one.
    EXPECT_EQ(json::parse(memory_snapshot_json(run.alloc, offset_ns).dump()), doc);
}

TEST(MemorySnapshot, EmptyAllocatorWritesAnEmptySnapshot) {
    TempDir dir;
    HostMemory host;
    AccountingAllocator alloc(host);
    const fs::path path = dir.path() / "memory.json";
    ASSERT_TRUE(write_memory_snapshot(alloc, path).ok);
    std::ifstream in(path);
    const json doc = json::parse(in);
    EXPECT_TRUE(doc["timeline"].empty());
    EXPECT_EQ(doc["peak"]["total_bytes"], 0);
    EXPECT_TRUE(doc["peak"]["live"].empty());
    EXPECT_TRUE(memory_counter_events(alloc.events()).empty());
}

TEST(MemorySnapshot, UnwritablePathIsReported) {
    TempDir dir;
    HostMemory host;
    AccountingAllocator alloc(host);
    const fs::path path = dir.path() / "missing" / "memory.json";
    const WriteResult w = write_memory_snapshot(alloc, path);
    EXPECT_FALSE(w.ok);
    EXPECT_EQ(w.error.rfind(path.string() + ": cannot create a file in ", 0), 0u) << w.error;
}

TEST(MemorySnapshot, FreeOfAnUnrecordedBlockCountsButIsNotLive) {
    // Recording started late: the first event frees a block allocated before.
    const std::vector<MemEvent> events = {
        MemEvent{0, -64, 0x100, 1, MemCategory::temporaries},
        MemEvent{1, 128, 0x200, 2, MemCategory::activations},
    };
    const MemoryPeak peak = find_memory_peak(events);
    EXPECT_EQ(peak.total_bytes, 64);
    ASSERT_EQ(peak.live.size(), 1u);
    EXPECT_EQ(peak.live[0].address, 0x200u);
}

TEST(MemoryCounters, OneSamplePerDistinctTimeWithEveryCategory) {
    const std::vector<MemEvent> events = {
        MemEvent{10, 1000, 0x1000, 1, MemCategory::parameters},
        MemEvent{20, 300, 0x2000, 2, MemCategory::activations},
        MemEvent{20, 200, 0x3000, 3, MemCategory::temporaries},  // same ns: merged
        MemEvent{30, -200, 0x3000, 3, MemCategory::temporaries},
    };
    const auto counters = memory_counter_events(events, 1'000);
    ASSERT_EQ(counters.size(), 6u);  // 3 distinct times x (by category, total)
    EXPECT_EQ(counters[0].name, kMemoryCounter);
    EXPECT_EQ(counters[1].name, kMemoryTotalCounter);
    EXPECT_EQ(counters[2].t_ns, 1'020);
    ASSERT_EQ(counters[2].values.size(), kMemCategoryCount);
    for (const auto& v : counters[2].values) {
        double expected = 0.0;
        if (v.series == "parameters") expected = 1000.0;
        if (v.series == "activations") expected = 300.0;
        if (v.series == "temporaries") expected = 200.0;
        EXPECT_EQ(v.value, expected) << v.series;
    }
    EXPECT_EQ(counters[3].values[0].series, "bytes");
    EXPECT_EQ(counters[3].values[0].value, 1500.0);
    EXPECT_EQ(counters[5].values[0].value, 1300.0);
}

TEST(MemoryCounters, RealAllocatorCountersMakeAValidTrace) {
    TempDir dir;
    StepRun run;
    run.finish();
    const auto counters = memory_counter_events(run.alloc.events());
    ASSERT_FALSE(counters.empty());
    EXPECT_EQ(counters.back().name, kMemoryTotalCounter);
    EXPECT_EQ(counters.back().values[0].value,
              static_cast<double>(run.alloc.current_total_bytes()));

    const fs::path path = dir.path() / "trace.json";
    ChromeTraceWriter writer(path);
    for (const auto& c : counters)
        writer.write_counter(c);
    ASSERT_TRUE(writer.close().ok);
    const TraceCheckResult check = check_trace_file(path);
    EXPECT_TRUE(check.ok()) << check.summary();
    EXPECT_EQ(check.count("C"), counters.size());
}

}  // namespace
}  // namespace napkin::profiler
