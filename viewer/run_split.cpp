// Many runs in one file: `napkin export` merges runs (and the ranks of a data-parallel run) into
// one trace, each process named "LABEL: NAME" ("fp32-run: napkin", "z3 rank 1/4: napkin",
// "torch-run: python3"). Opened as one run, their memory counters would stack into one chart,
// kernels of different runs would merge by name in the kernels table, and a kernel of one run
// could be charged to the op of another that happened to overlap it in time. So each LABEL
// becomes a run of its own (split_processes, declared in viewer/run_data.h).
#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "viewer/run_data.h"

namespace napkin::viewer {

namespace {

// The run a process belongs to in a merged trace: the text before the first ": " of its name;
// "" when the name has none.
std::string_view run_prefix(std::string_view process_name) {
    const std::size_t colon = process_name.find(": ");
    return colon == std::string_view::npos || colon == 0 ? std::string_view()
                                                         : process_name.substr(0, colon);
}

// The lanes and counters of one run of the merged trace, renumbered into a trace of its own.
// `group[lane]` is the lane's run; events are copied in their order, which keeps them sorted by
// (lane, depth, start) since the kept lanes keep their relative order.
TraceData part_of(const TraceData& t, const std::vector<int>& group, int g,
                  const std::map<std::string, int>& group_of_pid) {
    TraceData part;
    part.strings = t.strings;
    part.schema = t.schema;
    part.time_origin_ns = t.time_origin_ns;
    std::vector<std::uint32_t> lane_index(t.lanes.size(), kNone);
    for (std::size_t l = 0; l < t.lanes.size(); ++l) {
        if (group[l] != g) continue;
        lane_index[l] = static_cast<std::uint32_t>(part.lanes.size());
        part.lanes.push_back(t.lanes[l]);
        Lane& lane = part.lanes.back();
        const std::size_t prefix = run_prefix(lane.process_name).size();
        if (prefix > 0) lane.process_name.erase(0, prefix + 2);  // "fp32: napkin" -> "napkin
    }
    std::vector<std::uint32_t> event_index(t.events.size(), kNone);
    for (std::size_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (lane_index[e.lane] == kNone) continue;
        event_index[i] = static_cast<std::uint32_t>(part.events.size());
        part.events.push_back(e);
        Event& copy = part.events.back();
        copy.lane = lane_index[e.lane];
        if (e.args != kNone) {
            copy.args = static_cast<std::uint32_t>(part.args.size());
            part.args.push_back(t.args[e.args]);
        }
    }
    bool any = false;
    for (Event& e : part.events) {
        if (e.flow_peer != kNone) e.flow_peer = event_index[e.flow_peer];
        if (e.flow_peer != kNone && e.flow_peer > static_cast<std::uint32_t>(&e - &part.events[0]))
            ++part.flows;
        part.t_min_ns = any ? std::min(part.t_min_ns, e.start_ns) : e.start_ns;
        part.t_max_ns = any ? std::max(part.t_max_ns, e.end_ns()) : e.end_ns();
        any = true;
    }
    // Levels: each lane's events moved as one block, so every slice moves by the same offset.
    for (std::size_t l = 0; l < t.lanes.size(); ++l) {
        if (lane_index[l] == kNone) continue;
        for (auto& [first, last] : part.lanes[lane_index[l]].levels) {
            const std::uint32_t n = last - first;
            first = n > 0 ? event_index[first] : 0;
            last = first + n;
        }
    }
    for (const CounterSeries& c : t.counters) {
        const auto it = group_of_pid.find(c.pid);
        if ((it == group_of_pid.end() ? 0 : it->second) != g) continue;
        part.counters.push_back(c);
        // The span is the ranges' (the profiled window), the counters' only without ranges: as
        // the trace reader sets it.
        if (c.t_ns.empty() || !part.events.empty()) continue;
        part.t_min_ns = any ? std::min(part.t_min_ns, c.t_ns.front()) : c.t_ns.front();
        part.t_max_ns = any ? std::max(part.t_max_ns, c.t_ns.back()) : c.t_ns.back();
        any = true;
    }
    part.event_count = static_cast<std::int64_t>(part.events.size());
    return part;
}

// A pid as `napkin export` writes it: a number (1, 2, ...); nothing for another form.
std::optional<long long> pid_number(const std::string& pid) {
    long long n = 0;
    const auto [end, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), n);
    if (ec != std::errc() || end != pid.data() + pid.size()) return std::nullopt;
    return n;
}

}  // namespace

std::vector<RunData> split_processes(RunData run) {
    std::vector<RunData> out;
    const TraceData& t = run.trace;
    std::vector<std::string> labels;  // in the order their first lane is shown
    std::vector<int> group(t.lanes.size(), -1);
    std::map<std::string, int> group_of_pid;
    std::map<long long, int> group_of_number;  // named processes by pid number
    for (std::size_t l = 0; l < t.lanes.size() && !t.schema.empty(); ++l) {
        const std::string prefix(run_prefix(t.lanes[l].process_name));
        if (prefix.empty()) continue;
        const auto it = std::find(labels.begin(), labels.end(), prefix);
        group[l] = static_cast<int>(it - labels.begin());
        if (it == labels.end()) labels.push_back(prefix);
        group_of_pid.emplace(t.lanes[l].pid, group[l]);
        if (const auto n = pid_number(t.lanes[l].pid)) group_of_number.emplace(*n, group[l]);
    }
    // A process without a name of its own (Kineto's "Spans", "Traces" and "" pids) belongs to
    // the input whose named process precedes it: export numbers each input's processes in turn.
    bool placed = true;
    for (std::size_t l = 0; l < t.lanes.size() && placed; ++l) {
        if (group[l] >= 0) continue;
        const auto n = pid_number(t.lanes[l].pid);
        const auto it = n ? group_of_number.upper_bound(*n) : group_of_number.begin();
        placed = it != group_of_number.begin();
        if (!placed) break;
        group[l] = std::prev(it)->second;
        group_of_pid.emplace(t.lanes[l].pid, group[l]);
    }
    if (!run.has_trace || !placed || labels.size() < 2) {
        out.push_back(std::move(run));
        return out;
    }
    for (std::size_t g = 0; g < labels.size(); ++g) {
        RunData part;
        part.label = run.label + ": " + labels[g];
        part.source = run.source;
        part.has_trace = true;
        part.trace = part_of(t, group, static_cast<int>(g), group_of_pid);
        part.has_memory = memory_from_counters(part.trace, part.memory);
        if (g == 0) {  // what the file as a whole said stays with its first run
            part.errors = run.errors;
            part.warnings = run.warnings;
            part.trace.skipped_events = t.skipped_events;
            part.trace.ignored_events = t.ignored_events;
            part.trace.warnings = t.warnings;
        }
        out.push_back(std::move(part));
    }
    return out;
}

}  // namespace napkin::viewer
