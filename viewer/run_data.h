// run_data: the viewer's data model, loaded from a run folder (trace.json, memory.json,
// report.json) or a lone Chrome trace file. It knows nothing of ImGui: the panels (view_*.cpp)
// only read it, and tests/viewer/run_data_test.cpp exercises it without a display.
//
// Loading never throws on bad content and never trusts it: a file that cannot be read or parsed
// becomes one line in RunData::errors ("trace.json: not valid JSON (The JSON document has an
// improper structure ...)"), the other files of the run still load. Traces are read by napkin's
// one trace reader (profiler/trace_reader.h) in its lenient mode: invalid events are skipped and
// counted in warnings, a trace where most events are invalid is an error; unknown phases, fields
// and metadata of other tools are tolerated. memory.json is read with simdjson's DOM API, bounded
// to kMaxJsonDepth; report.json through napkin's one reader of it (profiler/run_report.h).
// docs/VIEWER.md lists what is accepted.
//
// The trace's model (profiler/trace_data.h) is the viewer's: time is int64 nanoseconds since
// the run start; events are stored sorted by (lane, depth, start), each lane's depth level one
// contiguous, start-sorted slice of `events`, which is what the timeline's culling and merging
// need.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/run_report.h"
#include "profiler/step_profile.h"
#include "profiler/trace_data.h"

namespace napkin::viewer {

using profiler::kMaxLaneDepth;
using profiler::kNone;
inline constexpr std::size_t kMaxJsonDepth = 64;  // nesting beyond this is a parse error

using StringTable = profiler::StringTable;
using EventArgs = profiler::EventArgs;
using Event = profiler::TraceEvent;
using Lane = profiler::TraceLane;
using CounterSeries = profiler::CounterSeries;
using TraceData = profiler::TraceData;

// The device's own view of its memory on GPU runs (cudaMemGetInfo: total - free, sampled by the
// engine), written as the counter "device memory" with the series "used" (docs/FORMATS.md).
inline constexpr std::string_view kDeviceMemoryCounter = "device memory";
inline constexpr std::string_view kDeviceMemoryUsedKey = "used";

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
    // The ceilings report.json's roofline divides by (profile.roofline), or zeros.
    profiler::Roofline roofline() const;
};

// Loads a run folder (any of trace.json, memory.json, report.json) or one trace file. Never
// throws for bad content; a path that does not exist is an error in the result.
RunData load_run(const std::filesystem::path& path);

// A merged trace (`napkin export`: each process named "LABEL: NAME") as one run per LABEL, each
// with its own lanes, counters and memory chart, labelled "FILE: LABEL"; any other run as it is.
std::vector<RunData> split_processes(RunData run);

// The parsers, on a whole document in memory. Each returns "" on success or one line saying
// what was wrong; the output is usable (possibly partial) either way. Exposed for the tests,
// the fuzz target and the benchmark. parse_trace is the trace reader's lenient mode.
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
    // napkin's roofline for these calls, summed: max(flops / peak FLOP/s, bytes / bandwidth)
    // per call (profiler::Roofline, as report.json's roofline_seconds_per_step); 0 unknown.
    double roofline_ns = 0;
    // Measured over predicted: 1 is the roofline, 3 three times slower; 0 without a prediction.
    double over_roofline() const { return roofline_ns > 0 ? work_ns() / roofline_ns : 0; }
    // Ops: the time of the device work their launches started (each kernel, copy and set to the
    // op enclosing its launch: a GPU's streams, napkin's CPU device lane); 0 without any.
    std::int64_t device_ns = 0;
    double mean_ns() const {
        return count > 0 ? static_cast<double>(total_ns) / static_cast<double>(count) : 0;
    }
    // The time the work took: on the device when it ran there, else the range's own.
    double work_ns() const { return static_cast<double>(device_ns > 0 ? device_ns : total_ns); }
    double achieved_flop_per_s() const { return work_ns() > 0 ? flops / (work_ns() * 1e-9) : 0; }
};
struct KernelStats {
    std::vector<KernelStat> rows;    // by total time, largest first
    // Sum of the steps' ranges (napkin's "step", else torch.profiler's "ProfilerStep#N"), or the
    // trace's span when it has none (steps 0).
    std::int64_t step_total_ns = 0;
    int steps = 0;
};
// kernels: device work on device lanes (profiler::is_device_work: kernels, copies and sets; not
// Kineto's gpu_user_annotation ranges nor API calls); ops: category "op" (a torch.profiler
// trace's "cpu_op" when it has none); all: every range.
// `roofline`: the run's ceilings (RunData::roofline), or none for no roofline_ns.
KernelStats kernel_stats(const TraceData& trace, StatScope scope,
                         const profiler::Roofline& roofline = {});
// Per event index, the device time of the work its launches started when the event is an op
// (each kernel, copy and set to the op enclosing its launch); empty when no device work has a
// launch flow.
std::vector<std::int64_t> device_time_by_op(const TraceData& trace);

}  // namespace napkin::viewer
