// The nesting a reader that adds doubles sees (Perfetto, chrome://tracing, a script summing
// ts + dur): per (pid, tid), ranges sorted by start (longest first) must each end at or before
// the end of the innermost range still open when they start, ends computed as ts + dur in double.
// A kernel whose end passes its successor's start by one ulp is seen as that successor's parent,
// and the successor as ending outside it. Used by the writer and export tests.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace napkin::test {

// One line per range that ends past its enclosing range in double ("'b' ends at 5.000000001 past
// 'a' at 5"), at most `max_lines`; empty when the trace nests exactly.
inline std::vector<std::string> double_nesting_faults(const nlohmann::json& trace,
                                                      std::size_t max_lines = 20) {
    struct Range {
        double ts, end;
        std::string name;
    };
    std::vector<std::pair<std::string, Range>> ranges;  // (pid/tid key, range)
    const nlohmann::json& events = trace.is_array() ? trace : trace.at("traceEvents");
    for (const auto& e : events) {
        if (e.value("ph", "") != "X" || !e.contains("ts") || !e.contains("dur")) continue;
        const double ts = e["ts"].get<double>();
        ranges.push_back({e.value("pid", nlohmann::json()).dump() + "/" +
                              e.value("tid", nlohmann::json()).dump(),
                          {ts, ts + e["dur"].get<double>(), e.value("name", "")}});
    }
    std::stable_sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) {
        if (a.first != b.first) return a.first < b.first;
        if (a.second.ts != b.second.ts) return a.second.ts < b.second.ts;
        return a.second.end > b.second.end;
    });
    std::vector<std::string> out;
    std::vector<const std::pair<std::string, Range>*> open;
    for (const auto& r : ranges) {
        while (!open.empty() &&
               (open.back()->first != r.first || open.back()->second.end <= r.second.ts))
            open.pop_back();
        if (!open.empty() && r.second.end > open.back()->second.end && out.size() < max_lines) {
            out.push_back("'" + r.second.name + "' ends at " + nlohmann::json(r.second.end).dump() +
                          " past '" + open.back()->second.name + "' at " +
                          nlohmann::json(open.back()->second.end).dump());
        }
        open.push_back(&r);
    }
    return out;
}

}  // namespace napkin::test
