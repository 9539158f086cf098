#include "profiler/trace_check.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "profiler/trace_reader.h"

namespace napkin::profiler {

namespace {

static_assert(TraceCheckResult::kMaxProblems == TraceReadResult::kMaxProblems);

// The strict read's verdict; `where` prefixes a document that cannot be read at all.
TraceCheckResult verdict(TraceReadResult&& read, const TraceData& data, const std::string& where) {
    TraceCheckResult r;
    if (!read.ok()) {
        r.problems.push_back(where + read.error);
        return r;
    }
    r.problems = std::move(read.problems);
    r.problems_omitted = read.problems_omitted;
    r.phase_counts = std::move(read.phase_counts);
    r.event_count = static_cast<std::size_t>(data.event_count);
    return r;
}

}  // namespace

std::string TraceCheckResult::summary() const {
    std::string out;
    for (const auto& p : problems)
        out += p + "\n";
    if (problems_omitted > 0) {
        out += "... and " + std::to_string(problems_omitted) + " more problems\n";
    }
    return out;
}

TraceCheckResult check_trace_file(const std::filesystem::path& path) {
    TraceData data;
    TraceReadResult read = read_trace_file(path, TraceMode::strict, data);
    return verdict(std::move(read), data, path.string() + ": ");
}

TraceCheckResult check_trace_text(std::string_view text) {
    TraceData data;
    TraceReadResult read = read_trace_text(text, TraceMode::strict, data);
    return verdict(std::move(read), data, "");
}

TraceCheckResult check_trace_json(const nlohmann::json& trace) {
    return check_trace_text(trace.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace napkin::profiler
