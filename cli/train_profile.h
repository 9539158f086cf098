// napkin train --profile: which steps get a trace. off | all | steps:N-M, 1-based and inclusive,
// the steps as the progress lines number them.
#pragma once

#include <cstdint>
#include <string>

namespace napkin::cli {

// off is none (first > last); all is every step (last = INT_MAX until the run's length is known).
struct ProfileSteps {
    int first = 0, last = -1;
    bool any() const { return last >= first; }
};

// UsageError naming --profile when the value is none of the three forms, or N > M, or N < 1.
ProfileSteps parse_profile(const std::string& profile);

// Traces above this size are warned about at the second profiled step: Perfetto UI loads a
// trace into the browser's memory, and chrome://tracing fails on files of a few hundred MB.
inline constexpr std::uint64_t kLargeTraceBytes = 1'000'000'000;

// A one-line warning when the trace, `written` bytes so far, one more step costing `step_bytes`
// for each of the `steps_left` profiled steps still to come, would pass kLargeTraceBytes;
// "" otherwise.
std::string large_trace_warning(std::uint64_t written, std::uint64_t step_bytes, int steps_left);

}  // namespace napkin::cli
