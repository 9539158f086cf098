// TraceData: a Chrome Trace Event file as profiler/trace_reader.h reads it, in a form every
// consumer shares (the viewer draws it, trace_check checks it): the tracks in display order, the
// ranges of each track nested into depth levels, launch -> kernel flows bound to the ranges they
// join, counter series, interned strings. No JSON here and no GUI.
//
// Time is int64 nanoseconds (the trace's "ts" microseconds * 1000, read exactly from the decimal
// text). napkin's traces count from the run start and are kept as they are; a trace stamped in
// absolute time (Kineto's Unix-epoch microseconds, more than 100 days from 0) is rebased so that
// its first event is at 0, and time_origin_ns keeps where that was.
// Events are stored sorted by (lane, depth, start): each lane's depth level is one contiguous,
// start-sorted slice of `events`, which is what culling, merging and lookups by time need.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace napkin::profiler {

inline constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
inline constexpr int kMaxLaneDepth = 64;  // deeper ranges are put on the last level

// Interned strings: event names and categories repeat millions of times in a trace.
class StringTable {
public:
    std::uint32_t intern(std::string_view s);
    const std::string& operator[](std::uint32_t id) const { return strings_[id]; }
    std::size_t size() const { return strings_.size(); }
    const std::vector<std::string>& all() const { return strings_; }

private:
    std::vector<std::string> strings_;
    std::map<std::string, std::uint32_t, std::less<>> ids_;
};

// The numeric args napkin writes on ranges that do work (docs/FORMATS.md, "Range args"); NaN
// when absent. `other` is the rest of the args object as text ("tokens: 64, kernel: sm90_...",
// nested objects and arrays as {...} and [...]), cut at 512 bytes.
struct EventArgs {
    double flops = std::numeric_limits<double>::quiet_NaN();
    double bytes = std::numeric_limits<double>::quiet_NaN();
    double achieved_gflop_per_s = std::numeric_limits<double>::quiet_NaN();
    double achieved_gb_per_s = std::numeric_limits<double>::quiet_NaN();
    std::string other;
};

// A range (an "X", or a "B" and its "E") or an instant ("i", "I", "R").
struct TraceEvent {
    std::int64_t start_ns = 0;
    std::int64_t dur_ns = 0;  // 0 for instants
    std::uint32_t name = 0;   // TraceData::strings
    std::uint32_t cat = 0;    // TraceData::strings ("" when absent)
    std::uint32_t lane = 0;
    std::uint32_t args = kNone;       // TraceData::args
    std::uint32_t flow_peer = kNone;  // the other end of a flow (event index), once bound
    std::uint32_t index = 0;          // its position in traceEvents ("B": the B's), for messages
    std::uint16_t depth = 0;
    bool instant = false;
    std::int64_t end_ns() const { return start_ns + dur_ns; }
};

// Device work: what a GPU (or napkin's CPU device) executes, by its category: "kernel" (napkin's
// and Kineto's), Kineto's "gpu_memcpy" and "gpu_memset", any other "...memcpy"/"...memset".
// Not device work: Kineto's "gpu_user_annotation" (a user's range drawn on a stream), launches
// and runtime calls ("launch", "cuda_runtime", "cuda_driver").
bool is_device_work(std::string_view category);

// One track: a (pid, tid) pair. A device lane is one that holds device work (whatever its name:
// napkin's "cuda api" lane holds launches and is a host lane); a lane without ranges is a device
// lane when named "device ...", "GPU ..." or "... stream ...".
struct TraceLane {
    std::string pid, tid;  // as written (numbers as their JSON text)
    std::string process_name, name;
    std::int64_t process_sort = 0, sort = 0;
    bool device = false;
    // levels[d] = [first, last) slice of TraceData::events at depth d, sorted by start.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> levels;
    std::int64_t events = 0;
};

// One counter series: the samples of one key of one counter ("memory" / "activations").
struct CounterSeries {
    std::string pid, name, key;
    std::vector<std::int64_t> t_ns;
    std::vector<double> values;
    double min_value = 0, max_value = 0;  // over the samples (0 and 0 without samples)
};

struct TraceData {
    StringTable strings;
    std::vector<TraceEvent> events;  // sorted by (lane, depth, start)
    std::vector<EventArgs> args;
    std::vector<TraceLane> lanes;  // in display order
    std::vector<CounterSeries> counters;
    std::int64_t t_min_ns = 0, t_max_ns = 0;
    std::int64_t time_origin_ns = 0;    // the trace's own time of 0 (non-zero when rebased)
    std::int64_t event_count = 0;       // elements of traceEvents
    std::int64_t skipped_events = 0;    // invalid events left out (reasons in warnings)
    std::int64_t ignored_events = 0;    // phases that are neither drawn nor checked
    std::int64_t flows = 0;             // bound flow pairs (launch -> kernel, forward -> backward)
    std::string schema;                 // otherData.schema, "" for foreign traces
    std::vector<std::string> warnings;  // at most a few, then a count

    bool empty() const { return events.empty() && counters.empty(); }
    // The series `key` of counter `name` (any pid), or nullptr.
    const CounterSeries* counter(std::string_view name, std::string_view key) const;
    // Innermost event of `lane` containing t (start <= t < end), or kNone.
    std::uint32_t event_at(std::uint32_t lane, std::int64_t t_ns) const;
    // Innermost event with category `cat_name` on any non-device lane containing t, or kNone.
    std::uint32_t host_event_at(std::int64_t t_ns, std::string_view cat_name) const;
    const std::string& name_of(const TraceEvent& e) const { return strings[e.name]; }
    const std::string& cat_of(const TraceEvent& e) const { return strings[e.cat]; }
};

}  // namespace napkin::profiler
