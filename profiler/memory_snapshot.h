// Memory snapshot: the AccountingAllocator's allocation events written as `memory.json`, and the
// same events as trace counters (memory by category and total over time).
//
// memory.json (schema "napkin-memory/1", docs/FORMATS.md):
//   {"schema": "napkin-memory/1", "device": "cpu",
//    "categories": ["parameters", ...],           // category_index -> name (kMemCategoryNames)
//    "names": ["", "wte", "h.0.ln_1.out", ...],    // name_index -> tensor name (allocator ids)
//    "final": {"total_bytes", "by_category": {...}},
//    "peak": {"t_us", "total_bytes", "by_category": {...},
//             "live": [{"name", "category", "bytes", "address", "t_us_allocated"}, ...]},
//    "timeline": [[t_us, bytes_delta, category_index, name_index, address], ...]}
// "live" is the set of blocks held at the first moment the total reached its peak, largest
// first. Times are microseconds since the run start: the allocator's clock plus
// `run_offset_ns`, the allocator's creation time on the Recorder's clock. 0 when the Recorder
// was given the allocator's start time point; recorder.now_ns() taken just before creating the
// allocator is right to within the allocator's construction (microseconds).
//
// The peak is computed from the recorded events, so it is the run's peak only if events were
// recorded from the start (AccountingAllocator::set_record_events). A free of an address with
// no recorded allocation counts in the totals but in no live set.
//
// Read the allocator's events when no other thread allocates. Writing never throws: failures
// come back in the WriteResult. Tests: tests/profiler/memory_snapshot_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/allocator.h"
#include "profiler/event.h"

namespace napkin::profiler {

struct LiveBlock {
    std::uint32_t name_id = 0;
    MemCategory category = MemCategory::temporaries;
    std::int64_t bytes = 0;
    std::uint64_t address = 0;
    std::int64_t t_ns_allocated = 0;  // on the allocator's clock
};

struct MemoryPeak {
    std::int64_t t_ns = 0;  // on the allocator's clock; 0 with no allocation
    std::int64_t total_bytes = 0;
    std::array<std::int64_t, kMemCategoryCount> by_category{};  // at the peak of the total
    std::vector<LiveBlock> live;  // held at the peak, by bytes descending (then oldest first)
};

// The first moment the running total of `events` reaches its maximum, and what was live then.
MemoryPeak find_memory_peak(const std::vector<MemEvent>& events);

// The whole document, in memory (for small runs and tests; the writer streams the timeline).
nlohmann::ordered_json memory_snapshot_json(const AccountingAllocator& allocator,
                                            std::int64_t run_offset_ns = 0);

// Writes memory.json to `path` durably (core/durable_file.h: a temporary, fsync, rename).
WriteResult write_memory_snapshot(const AccountingAllocator& allocator,
                                  const std::filesystem::path& path,
                                  std::int64_t run_offset_ns = 0);

// Counter names in the trace: "memory" has one series per category (bytes, every category in
// every sample, so viewers can stack them), "memory_total" one series "bytes".
inline constexpr const char* kMemoryCounter = "memory";
inline constexpr const char* kMemoryTotalCounter = "memory_total";

// Two counter events per distinct allocation time (events at the same nanosecond are merged
// into the state after the last of them), on the run clock.
std::vector<CounterEvent> memory_counter_events(const std::vector<MemEvent>& events,
                                                std::int64_t run_offset_ns = 0);

}  // namespace napkin::profiler
