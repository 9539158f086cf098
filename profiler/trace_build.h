// Internal to the trace reader (profiler/trace_reader.h): what the per-event pass
// (trace_reader.cpp) hands to the structural pass (trace_index.cpp), and the one place problems
// go, whatever the mode.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profiler/trace_reader.h"

namespace napkin::profiler::detail {

inline constexpr std::int64_t kDayNs = 86'400'000'000'000;
inline constexpr std::int64_t kMaxSpanNs = 100 * kDayNs;  // how far any time may lie from the start
inline constexpr std::int64_t kToleranceNs = 1;           // shared boundaries, rounded to the ns

struct ProcessInfo {  // from process_name / process_sort_index metadata
    std::string name;
    std::int64_t sort = 0;
    bool has_sort = false;
};

struct BeginEndMark {  // a "B" or an "E", paired once the lanes are known
    std::int64_t t_ns = 0;
    std::uint32_t index = 0, name = 0, cat = 0, lane = 0, args = kNone;
    bool begin = true;
};

// A flow's identity: its category and its id, an unsigned integer as written or else the id's
// text (both interned in TraceData::strings). No hash table: 100k flows' keys would be cache
// misses each.
struct FlowKey {
    std::uint32_t cat = 0;
    bool text_id = false;
    std::uint64_t id = 0;
    auto operator<=>(const FlowKey&) const = default;
};

struct FlowPoint {  // an "s" or an "f", bound to a range once the ranges are nested
    std::int64_t t_ns = 0;
    FlowKey key;
    std::uint32_t lane = 0, index = 0, name = 0;
    bool start = false;
    bool enclosing = true;  // "bp":"e" (or a start): the enclosing range, else the next one
};

// Where every problem goes. Strict: kept (capped), nothing else. Lenient: an event left out is
// counted and its reason kept among the first few warnings; the strict-only rules say nothing.
class ProblemLog {
public:
    ProblemLog(TraceMode mode, TraceReadResult& result, TraceData& out)
        : mode_(mode), result_(result), out_(out) {}
    bool strict() const { return mode_ == TraceMode::strict; }
    // A rule the strict mode enforces; the lenient one draws the event as it is.
    void problem(std::string text);
    // An event that cannot be used: left out in both modes.
    void skip(std::string text);

private:
    TraceMode mode_;
    TraceReadResult& result_;
    TraceData& out_;
};

// 12 for "12", "12 (main)"; 0 when the text does not start with a number (tids, pids).
std::int64_t leading_integer(std::string_view s);
// A name or value for a message: at most 80 bytes.
std::string cut(std::string_view s);
// "event 12 ('h.0.attn.qkv', ph X)": names and phases cut to 80 bytes.
std::string event_label(std::size_t index, std::string_view name, std::string_view ph);
// "12.345": microseconds from int64 ns, for messages.
std::string micros_text(std::int64_t ns);

// Everything the per-event pass gathered.
struct TraceBuild {
    TraceBuild(TraceMode mode, TraceReadResult& result, TraceData& data)
        : log(mode, result, data), out(data) {}
    ProblemLog log;
    TraceData& out;
    std::unordered_map<std::string, ProcessInfo> processes;
    std::vector<BeginEndMark> marks;
    std::vector<FlowPoint> flows;
    // The first timestamp, when it lies more than 100 days from 0 (a trace stamped in absolute
    // time): every time is kept relative to it, then shifted so that the trace starts at 0.
    std::int64_t origin_ns = 0;
};

// Orders the lanes, pairs B/E, nests ranges into depth levels, binds flows, finds device lanes,
// sorts counters, and checks what only the whole trace shows (overlaps, unpaired B/E, flows).
void index_trace(TraceBuild& b);

}  // namespace napkin::profiler::detail
