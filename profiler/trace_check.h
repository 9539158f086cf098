// trace_check: validates a Chrome Trace Event file (ours, or any other) by reading it with the
// one trace reader in its strict mode (profiler/trace_reader.h), which reports what trace viewers
// silently get wrong: missing fields, overlapping complete events, unbalanced begin/end pairs,
// non-numeric counters, flows that end before they start. Used by the tests (every trace written
// is read back), by `napkin report`, and by anyone who edits a trace by hand.
//
// Rules (docs/FORMATS.md):
//  - the file is an object with a "traceEvents" array (or a bare array); "displayTimeUnit",
//    when present, is "ms" or "ns"; "otherData", when present, is an object;
//  - every event is an object with a string "name", a known string "ph" and a numeric or
//    string "pid"; every phase but "M" has a numeric "ts" within 100 days of the trace's first
//    timestamp; thread-scoped phases (X, B, E, i/I with "s":"t", s, t, f) have a "tid";
//  - X has a numeric "dur" in [0, 100 days]; the ranges of one (pid, tid), sorted by start, nest:
//    each one either lies inside the enclosing one or starts after it ends (1 ns tolerance);
//  - B/E are balanced per (pid, tid), an E naming a different event than its B is a problem;
//  - C has a non-empty "args" object of numbers;
//  - M is process_name/thread_name with a string args.name, or
//    process_sort_index/thread_sort_index with a numeric args.sort_index;
//  - s/t/f have an "id"; an f needs an s with the same id (and category) before it in time;
//    "bp", when present, is "e".
// A file that cannot be read or parsed is one problem, not an exception.
// Tests: tests/profiler/trace_check_test.cpp.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace napkin::profiler {

struct TraceCheckResult {
    // "event 12 ('h.0.attn.qkv', ph X): missing 'dur'". At most kMaxProblems are kept.
    std::vector<std::string> problems;
    std::size_t problems_omitted = 0;
    std::map<std::string, std::size_t> phase_counts;  // "X" -> number of complete events
    std::size_t event_count = 0;

    static constexpr std::size_t kMaxProblems = 100;
    bool ok() const { return problems.empty(); }
    std::size_t count(const std::string& phase) const {
        auto it = phase_counts.find(phase);
        return it == phase_counts.end() ? 0 : it->second;
    }
    // All problems, one per line, for messages and test failures.
    std::string summary() const;
};

TraceCheckResult check_trace_file(const std::filesystem::path& path);
TraceCheckResult check_trace_text(std::string_view text);
// The document as JSON text (tests build traces with nlohmann).
TraceCheckResult check_trace_json(const nlohmann::json& trace);

}  // namespace napkin::profiler
