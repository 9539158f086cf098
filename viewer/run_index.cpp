// After a trace is read: the lanes in display order, ranges nested into depth levels, flows
// bound to their slices, device lanes found; then the queries on the result (the event at a time,
// the kernel table's aggregates).
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include "viewer/run_json.h"

namespace napkin::viewer {

namespace {

void assign_depths_and_sort(TraceData& out_, std::vector<std::vector<Event>>& open_) {
    auto& ev = out_.events;
    // Unclosed "B" ranges end at the last timestamp seen.
    std::int64_t t_end = 0;
    for (const Event& e : ev)
        t_end = std::max(t_end, e.end_ns());
    for (auto& open : open_) {
        for (Event& r : open) {
            r.dur_ns = std::max<std::int64_t>(0, t_end - r.start_ns);
            ev.push_back(r);
        }
        open.clear();
    }
    // Parents before children: by start, then longest first.
    std::sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
        if (a.lane != b.lane) return a.lane < b.lane;
        if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
        return a.dur_ns > b.dur_ns;
    });
    std::vector<std::int64_t> stack;  // ends of the open ranges
    std::uint32_t lane = kNone;
    for (Event& e : ev) {
        if (e.lane != lane) {
            stack.clear();
            lane = e.lane;
        }
        while (!stack.empty() && stack.back() <= e.start_ns)
            stack.pop_back();
        e.depth =
            static_cast<std::uint16_t>(std::min<std::size_t>(stack.size(), kMaxLaneDepth - 1));
        if (!e.instant && stack.size() < static_cast<std::size_t>(kMaxLaneDepth))
            stack.push_back(e.end_ns());
    }
    std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
        if (a.lane != b.lane) return a.lane < b.lane;
        return a.depth < b.depth;
    });
    for (std::uint32_t i = 0; i < ev.size(); ++i) {
        Lane& l = out_.lanes[ev[i].lane];
        if (l.levels.size() <= ev[i].depth) l.levels.resize(ev[i].depth + 1u, {i, i});
        auto& level = l.levels[ev[i].depth];
        if (level.first == level.second) level.first = i;
        level.second = i + 1;
        ++l.events;
    }
}

void bind_flows(TraceData& out_, const std::vector<RawFlow>& flows_) {
    std::unordered_map<std::string, std::uint32_t> starts;
    for (const RawFlow& f : flows_) {
        std::uint32_t e = out_.event_at(f.lane, f.t_ns);
        if (e == kNone && !f.enclosing) {
            // The next slice on the lane starting at or after the point.
            const Lane& l = out_.lanes[f.lane];
            if (!l.levels.empty()) {
                auto [first, last] = l.levels[0];
                auto it = std::lower_bound(
                    out_.events.begin() + first, out_.events.begin() + last, f.t_ns,
                    [](const Event& a, std::int64_t t) { return a.start_ns < t; });
                if (it != out_.events.begin() + last)
                    e = static_cast<std::uint32_t>(it - out_.events.begin());
            }
        }
        if (e == kNone) continue;
        if (f.start) {
            starts[f.key] = e;
        } else if (auto it = starts.find(f.key); it != starts.end() && it->second != e) {
            out_.events[it->second].flow_peer = e;
            out_.events[e].flow_peer = it->second;
            ++out_.flows;
        }
    }
}

}  // namespace

void index_trace(TraceData& out_, const std::unordered_map<std::string, ProcessInfo>& processes_,
                 std::vector<std::vector<Event>>& open_, std::vector<RawFlow>& flows_) {
    // Display order: process sort index, then pid; within it, thread sort index, then tid.
    std::vector<std::uint32_t> order(out_.lanes.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        Lane& l = out_.lanes[i];
        if (auto it = processes_.find(l.pid); it != processes_.end()) {
            l.process_name = it->second.name;
            l.process_sort = it->second.has_sort ? it->second.sort : json::leading_integer(l.pid);
        } else {
            l.process_sort = json::leading_integer(l.pid);
        }
        if (l.process_name.empty()) l.process_name = "pid " + l.pid;
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
        const Lane& x = out_.lanes[a];
        const Lane& y = out_.lanes[b];
        if (x.process_sort != y.process_sort) return x.process_sort < y.process_sort;
        if (x.pid != y.pid) return x.pid < y.pid;
        if (x.sort != y.sort) return x.sort < y.sort;
        return json::leading_integer(x.tid) < json::leading_integer(y.tid);
    });
    std::vector<std::uint32_t> remap(order.size());
    std::vector<Lane> lanes;
    std::vector<std::vector<Event>> open;
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        remap[order[i]] = i;
        lanes.push_back(std::move(out_.lanes[order[i]]));
        open.push_back(std::move(open_[order[i]]));
    }
    out_.lanes = std::move(lanes);
    open_ = std::move(open);
    for (Event& e : out_.events)
        e.lane = remap[e.lane];
    for (auto& lane : open_) {
        for (Event& r : lane)
            r.lane = remap[r.lane];
    }
    for (RawFlow& f : flows_)
        f.lane = remap[f.lane];

    assign_depths_and_sort(out_, open_);
    bind_flows(out_, flows_);

    // Device lanes: named so, or holding only kernels and copies.
    for (std::uint32_t i = 0; i < out_.lanes.size(); ++i) {
        Lane& l = out_.lanes[i];
        const std::string n = json::lower(l.name);
        bool device = n.rfind("device", 0) == 0 || n.find("stream") != std::string::npos ||
                      n.rfind("gpu", 0) == 0 || n.find("cuda") != std::string::npos;
        if (!device && l.events > 0) {
            device = true;
            for (const auto& [first, last] : l.levels) {
                for (std::uint32_t e = first; e < last && device; ++e) {
                    const std::string c = json::lower(out_.strings[out_.events[e].cat]);
                    device = c == "kernel" || c.find("memcpy") != std::string::npos ||
                             c.find("memset") != std::string::npos;
                }
            }
        }
        l.device = device;
    }
    // Lanes that only carried metadata are dropped from the display.
    if (!out_.events.empty()) {
        std::int64_t lo = out_.events.front().start_ns, hi = lo;
        for (const Event& e : out_.events) {
            lo = std::min(lo, e.start_ns);
            hi = std::max(hi, e.end_ns());
        }
        out_.t_min_ns = lo;
        out_.t_max_ns = hi;
    }
    for (CounterSeries& s : out_.counters) {
        // Counters are written in time order by napkin; sort any other tool's.
        if (!std::is_sorted(s.t_ns.begin(), s.t_ns.end())) {
            std::vector<std::size_t> idx(s.t_ns.size());
            for (std::size_t i = 0; i < idx.size(); ++i)
                idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(),
                             [&](std::size_t a, std::size_t b) { return s.t_ns[a] < s.t_ns[b]; });
            std::vector<std::int64_t> t(idx.size());
            std::vector<double> v(idx.size());
            for (std::size_t i = 0; i < idx.size(); ++i) {
                t[i] = s.t_ns[idx[i]];
                v[i] = s.values[idx[i]];
            }
            s.t_ns = std::move(t);
            s.values = std::move(v);
        }
        if (!s.values.empty()) {
            const auto [lo, hi] = std::minmax_element(s.values.begin(), s.values.end());
            s.min_value = *lo;
            s.max_value = *hi;
        }
        if (out_.events.empty() && !s.t_ns.empty()) {
            out_.t_min_ns = std::min(out_.t_min_ns, s.t_ns.front());
            out_.t_max_ns = std::max(out_.t_max_ns, s.t_ns.back());
        }
    }
    if (out_.skipped_events > static_cast<std::int64_t>(out_.warnings.size())) {
        out_.warnings.push_back(std::to_string(out_.skipped_events) +
                                " invalid events skipped in all");
    }
}

std::uint32_t StringTable::intern(std::string_view s) {
    if (auto it = ids_.find(s); it != ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(strings_.size());
    strings_.emplace_back(s);
    ids_.emplace(strings_.back(), id);
    return id;
}

const CounterSeries* TraceData::counter(std::string_view name, std::string_view key) const {
    for (const CounterSeries& s : counters) {
        if (s.name == name && s.key == key && !s.t_ns.empty()) return &s;
    }
    return nullptr;
}

std::uint32_t TraceData::event_at(std::uint32_t lane, std::int64_t t_ns) const {
    if (lane >= lanes.size()) return kNone;
    const Lane& l = lanes[lane];
    for (std::size_t d = l.levels.size(); d-- > 0;) {
        auto [first, last] = l.levels[d];
        auto it = std::upper_bound(events.begin() + first, events.begin() + last, t_ns,
                                   [](std::int64_t t, const Event& e) { return t < e.start_ns; });
        if (it == events.begin() + first) continue;
        --it;
        if (!it->instant && (t_ns < it->end_ns() || (it->dur_ns == 0 && t_ns == it->start_ns))) {
            return static_cast<std::uint32_t>(it - events.begin());
        }
    }
    return kNone;
}

std::uint32_t TraceData::host_event_at(std::int64_t t_ns, std::string_view cat_name) const {
    for (std::uint32_t i = 0; i < lanes.size(); ++i) {
        if (lanes[i].device) continue;
        const Lane& l = lanes[i];
        for (std::size_t d = l.levels.size(); d-- > 0;) {
            auto [first, last] = l.levels[d];
            auto it =
                std::upper_bound(events.begin() + first, events.begin() + last, t_ns,
                                 [](std::int64_t t, const Event& e) { return t < e.start_ns; });
            if (it == events.begin() + first) continue;
            --it;
            if (!it->instant && t_ns <= it->end_ns() &&
                (cat_name.empty() || strings[it->cat] == cat_name)) {
                return static_cast<std::uint32_t>(it - events.begin());
            }
        }
    }
    return kNone;
}

KernelStats kernel_stats(const TraceData& trace, StatScope scope) {
    KernelStats out;
    std::vector<KernelStat> by_name(trace.strings.size());
    const std::uint32_t kernel_cat = [&] {
        for (std::uint32_t i = 0; i < trace.strings.size(); ++i) {
            if (trace.strings[i] == "kernel") return i;
        }
        return kNone;
    }();
    for (const Event& e : trace.events) {
        if (e.instant) continue;
        const std::string& cat = trace.strings[e.cat];
        if (cat == "step") {
            out.step_total_ns += e.dur_ns;
            ++out.steps;
        }
        bool take = false;
        switch (scope) {
            case StatScope::kernels:
                take = e.cat == kernel_cat || trace.lanes[e.lane].device;
                break;
            case StatScope::ops:
                take = cat == "op";
                break;
            case StatScope::all:
                take = true;
                break;
        }
        if (!take) continue;
        KernelStat& s = by_name[e.name];
        ++s.count;
        s.total_ns += e.dur_ns;
        if (e.args != kNone) {
            const EventArgs& a = trace.args[e.args];
            if (std::isfinite(a.flops)) s.flops += a.flops;
            if (std::isfinite(a.bytes)) s.bytes += a.bytes;
        }
    }
    if (out.step_total_ns == 0) out.step_total_ns = trace.t_max_ns - trace.t_min_ns;
    for (std::uint32_t i = 0; i < by_name.size(); ++i) {
        if (by_name[i].count == 0) continue;
        by_name[i].name = trace.strings[i];
        out.rows.push_back(std::move(by_name[i]));
    }
    std::sort(out.rows.begin(), out.rows.end(),
              [](const KernelStat& a, const KernelStat& b) { return a.total_ns > b.total_ns; });
    return out;
}

}  // namespace napkin::viewer
