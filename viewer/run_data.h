// run_data: the viewer's data model, loaded from a run folder (trace.json, memory.json,
// report.json) or a lone Chrome trace file. It knows nothing of ImGui: the panels (view_*.cpp)
// only read it, and tests/viewer/run_data_test.cpp exercises it without a display.
//
// Loading never throws on bad content and never trusts it: a file that cannot be read or parsed
// becomes one line in RunData::errors ("trace.json: The JSON document has an improper
// structure ..."), the other files of the run still load. Traces are read with simdjson's
// On-Demand API from a memory-mapped file (nothing deeper than an event's args is descended into,
// so deep nesting costs no recursion); memory.json with its DOM API, bounded to kMaxJsonDepth;
// report.json through napkin's one reader of it (profiler/run_report.h). Timestamps outside +-100
// days, negative durations and non-numeric fields skip the event and are counted in warnings.
// Unknown phases, fields and metadata (a PyTorch profiler trace's) are ignored. docs/VIEWER.md
// lists what is accepted.
//
// Time is int64 nanoseconds since the run start (trace "ts" microseconds * 1000, rounded).
// Events are stored sorted by (lane, depth, start): each lane's depth level is one contiguous,
// start-sorted slice of `events`, which is what the timeline's culling and merging need.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/run_report.h"

namespace napkin::viewer {

inline constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
inline constexpr int kMaxLaneDepth = 64;          // deeper ranges are drawn on the last level
inline constexpr std::size_t kMaxJsonDepth = 64;  // nesting beyond this is a parse error

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
// when absent. `other` is the rest of the args object as compact JSON (cut at 512 bytes).
struct EventArgs {
    double flops = std::numeric_limits<double>::quiet_NaN();
    double bytes = std::numeric_limits<double>::quiet_NaN();
    double achieved_gflop_per_s = std::numeric_limits<double>::quiet_NaN();
    double achieved_gb_per_s = std::numeric_limits<double>::quiet_NaN();
    std::string other;
};

struct Event {
    std::int64_t start_ns = 0;
    std::int64_t dur_ns = 0;  // 0 for instants
    std::uint32_t name = 0;   // TraceData::strings
    std::uint32_t cat = 0;    // TraceData::strings ("" when absent)
    std::uint32_t lane = 0;
    std::uint32_t args = kNone;       // TraceData::args
    std::uint32_t flow_peer = kNone;  // the other end of a launch -> kernel flow (event index)
    std::uint16_t depth = 0;
    bool instant = false;
    std::int64_t end_ns() const { return start_ns + dur_ns; }
};

// One track: a (pid, tid) pair. Device lanes hold kernels and copies (named "device ..." or
// "stream ..." or "GPU ...", or holding only kernel/memcpy events).
struct Lane {
    std::string pid, tid;  // as written (numbers printed)
    std::string process_name, name;
    std::int64_t process_sort = 0, sort = 0;
    bool device = false;
    // levels[d] = [first, last) slice of TraceData::events at depth d, sorted by start.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> levels;
    std::int64_t events = 0;
};

// The device's own view of its memory on GPU runs (cudaMemGetInfo: total - free, sampled by the
// engine), written as the counter "device memory" with the series "used" (docs/FORMATS.md).
inline constexpr std::string_view kDeviceMemoryCounter = "device memory";
inline constexpr std::string_view kDeviceMemoryUsedKey = "used";

// One counter series: the samples of one key of one counter ("memory" / "activations").
struct CounterSeries {
    std::string pid, name, key;
    std::vector<std::int64_t> t_ns;
    std::vector<double> values;
    double min_value = 0, max_value = 0;  // over the samples (0 and 0 without samples)
};

struct TraceData {
    StringTable strings;
    std::vector<Event> events;  // sorted by (lane, depth, start)
    std::vector<EventArgs> args;
    std::vector<Lane> lanes;  // in display order
    std::vector<CounterSeries> counters;
    std::int64_t t_min_ns = 0, t_max_ns = 0;
    std::int64_t skipped_events = 0;    // invalid events left out (reasons in warnings)
    std::int64_t ignored_events = 0;    // phases the viewer does not draw
    std::int64_t flows = 0;             // bound launch -> kernel pairs
    std::string schema;                 // otherData.schema, "" for foreign traces
    std::vector<std::string> warnings;  // at most a few, then a count

    bool empty() const { return events.empty() && counters.empty(); }
    // The series `key` of counter `name` (any pid), or nullptr.
    const CounterSeries* counter(std::string_view name, std::string_view key) const;
    // Innermost event of `lane` containing t (start <= t < end), or kNone.
    std::uint32_t event_at(std::uint32_t lane, std::int64_t t_ns) const;
    // Innermost event with category `cat_name` on any non-device lane containing t, or kNone.
    std::uint32_t host_event_at(std::int64_t t_ns, std::string_view cat_name) const;
    const std::string& name_of(const Event& e) const { return strings[e.name]; }
    const std::string& cat_of(const Event& e) const { return strings[e.cat]; }
};

// memory.json (schema napkin-memory/1), or the trace's "memory" counters when there is none.
struct MemoryRow {
    std::int64_t t_ns = 0;
    std::int64_t bytes_delta = 0;
    std::uint32_t category = 0;
    std::uint32_t name = 0;
    std::uint64_t address = 0;
};

struct MemoryData {
    std::string device;
    std::vector<std::string> categories;  // category index -> name
    std::vector<std::string> names;       // name index -> tensor name
    std::vector<MemoryRow> rows;          // allocations and frees in order (memory.json only)
    // The running totals by category after each distinct time: t_ns[i] and
    // by_category[i * categories.size() + c]. Built from rows, or from counters.
    std::vector<std::int64_t> t_ns;
    std::vector<double> by_category;
    std::vector<double> total;
    double peak_bytes = 0;
    std::int64_t peak_t_ns = 0;
    std::int64_t skipped_rows = 0;  // malformed timeline rows left out
    bool from_counters = false;

    bool empty() const { return t_ns.empty(); }
    std::size_t category_count() const { return categories.size(); }
};

// A block held at a given time, with the op that was running when it was allocated.
struct LiveBlock {
    std::string category, name, op;
    std::int64_t bytes = 0;
    std::int64_t t_allocated_ns = 0;
};

// report.json: the prediction beside the measurement, as the one reader gives it.
using ReportData = profiler::RunReport;

// What the panels derive from a report: the sum of the predicted memory categories, and the
// median step's seconds (NaN without steps: no report loaded).
double predicted_total_bytes(const ReportData& r);
double median_step_seconds(const ReportData& r);

struct RunData {
    std::string label;  // the folder's or file's name
    std::filesystem::path source;
    std::vector<std::string> errors;    // one line per file (or path) that could not be used
    std::vector<std::string> warnings;  // usable files with parts left out (invalid events, rows)
    bool has_trace = false, has_memory = false, has_report = false;
    TraceData trace;
    MemoryData memory;
    ReportData report;

    // Blocks live at t (allocated at or before t, not freed by then), largest first.
    std::vector<LiveBlock> live_at(std::int64_t t_ns) const;
    // Peak FLOP/s to compare kernels against: the report's measured peak, or 0.
    double peak_flops_per_s() const;
};

// Loads a run folder (any of trace.json, memory.json, report.json) or one trace file. Never
// throws for bad content; a path that does not exist is an error in the result.
RunData load_run(const std::filesystem::path& path);

// The parsers, on a whole document in memory. Each returns "" on success or one line saying
// what was wrong; the output is usable (possibly partial) either way. Exposed for the tests,
// the fuzz target and the benchmark.
std::string parse_trace(std::string_view json, TraceData& out);
std::string parse_memory(std::string_view json, MemoryData& out);
std::string parse_report(std::string_view json, ReportData& out);
// The memory chart from the trace's "memory" counters (runs without memory.json).
bool memory_from_counters(const TraceData& trace, MemoryData& out);

// The compare view's table for runs with a report: settings (model, precision, checkpointing,
// attention, ZeRO stage, world size, ...), then results (bytes per category predicted / measured,
// bytes communicated per step, step time, tokens/s, MFU). A row none of the runs has is left
// out; `differs` marks the rows whose values are not all equal.
struct CompareRow {
    std::string key;
    std::vector<std::string> values;  // one per run, "-" when absent
    bool differs = false;
};
std::vector<CompareRow> compare_table(const std::vector<const RunData*>& runs);

// Aggregates for the kernel table.
enum class StatScope : std::uint8_t { kernels, ops, all };
struct KernelStat {
    std::string name;
    std::int64_t count = 0;
    std::int64_t total_ns = 0;
    double flops = 0;  // summed over calls that report FLOPs
    double bytes = 0;
    double mean_ns() const {
        return count > 0 ? static_cast<double>(total_ns) / static_cast<double>(count) : 0;
    }
    double achieved_flop_per_s() const {
        return total_ns > 0 ? flops / (static_cast<double>(total_ns) * 1e-9) : 0;
    }
};
struct KernelStats {
    std::vector<KernelStat> rows;    // by total time, largest first
    std::int64_t step_total_ns = 0;  // sum of "step" ranges, or the trace's span without steps
    int steps = 0;
};
// kernels: events of category "kernel" (or any event on a device lane); ops: category "op";
// all: every range.
KernelStats kernel_stats(const TraceData& trace, StatScope scope);

}  // namespace napkin::viewer
