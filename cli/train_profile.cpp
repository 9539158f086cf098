#include "cli/train_profile.h"

#include <cstdio>
#include <limits>
#include <stdexcept>

#include "core/check.h"

namespace napkin::cli {

ProfileSteps parse_profile(const std::string& profile) {
    ProfileSteps p;
    if (profile == "all") return {1, std::numeric_limits<int>::max()};
    if (profile == "off") return p;
    if (profile.rfind("steps:", 0) != 0) {
        throw UsageError("--profile: unknown value '" + profile + "' (expected off|all|steps:N-M)");
    }
    const std::string range = profile.substr(6);
    const auto dash = range.find('-');
    try {
        std::size_t used = 0;
        p.first = std::stoi(range.substr(0, dash), &used);
        if (used != (dash == std::string::npos ? range.size() : dash))
            throw std::invalid_argument("trailing");
        p.last = p.first;
        if (dash != std::string::npos) {
            const std::string hi = range.substr(dash + 1);
            p.last = std::stoi(hi, &used);
            if (used != hi.size()) throw std::invalid_argument("trailing");
        }
    } catch (const std::exception&) {
        throw UsageError("--profile: '" + profile + "' is not off, all or steps:N-M");
    }
    if (p.first < 1 || p.last < p.first) {
        throw UsageError("--profile: " + profile + " must name steps N <= M, counted from 1");
    }
    return p;
}

std::string large_trace_warning(std::uint64_t written, std::uint64_t step_bytes, int steps_left) {
    if (steps_left <= 0) return "";
    const double total = static_cast<double>(written) +
                         static_cast<double>(step_bytes) * static_cast<double>(steps_left);
    if (total <= static_cast<double>(kLargeTraceBytes)) return "";
    char line[256];
    std::snprintf(line, sizeof line,
                  "napkin: profiler: the trace will reach about %.1f GB (%.0f kB a step, %d steps "
                  "to go); --profile steps:N-M keeps a window of the run",
                  total / 1e9, static_cast<double>(step_bytes) / 1e3, steps_left);
    return line;
}

}  // namespace napkin::cli
