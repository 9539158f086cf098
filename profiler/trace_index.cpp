// The structural pass of the trace reader, once for both modes: the lanes in display order, B/E
// pairs, ranges nested into depth levels, flows bound to the ranges they join, device lanes,
// counters; then the queries on the result (the event at a time, a counter by name).
#include <algorithm>
#include <cctype>
#include <string>

#include "profiler/trace_build.h"

namespace napkin::profiler {

namespace detail {

std::int64_t leading_integer(std::string_view s) {
    std::int64_t v = 0;
    std::size_t i = 0;
    const bool neg = !s.empty() && s[0] == '-';
    if (neg) i = 1;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0 &&
           v < 100000000000000LL;
         ++i) {
        v = v * 10 + (s[i] - '0');
    }
    return neg ? -v : v;
}

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string track_label(const TraceLane& l) {
    return "pid " + cut(l.pid) + " tid " + cut(l.tid);
}

// Display order: process sort index, then pid; within it, thread sort index, then tid. Every
// lane id in the build is renumbered.
void order_lanes(TraceBuild& b) {
    TraceData& out = b.out;
    std::vector<std::uint32_t> order(out.lanes.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        TraceLane& l = out.lanes[i];
        l.process_sort = leading_integer(l.pid);
        if (auto it = b.processes.find(l.pid); it != b.processes.end()) {
            l.process_name = it->second.name;
            if (it->second.has_sort) l.process_sort = it->second.sort;
        }
        if (l.process_name.empty()) l.process_name = "pid " + l.pid;
        order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t i, std::uint32_t j) {
        const TraceLane& x = out.lanes[i];
        const TraceLane& y = out.lanes[j];
        if (x.process_sort != y.process_sort) return x.process_sort < y.process_sort;
        if (x.pid != y.pid) return x.pid < y.pid;
        if (x.sort != y.sort) return x.sort < y.sort;
        return leading_integer(x.tid) < leading_integer(y.tid);
    });
    std::vector<std::uint32_t> remap(order.size());
    std::vector<TraceLane> lanes;
    lanes.reserve(order.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        remap[order[i]] = i;
        lanes.push_back(std::move(out.lanes[order[i]]));
    }
    out.lanes = std::move(lanes);
    for (TraceEvent& e : out.events)
        e.lane = remap[e.lane];
    for (BeginEndMark& m : b.marks)
        m.lane = remap[m.lane];
    for (FlowPoint& f : b.flows)
        f.lane = remap[f.lane];
}

// A trace stamped in absolute time starts at 0; time_origin_ns keeps where that was.
void rebase(TraceBuild& b) {
    TraceData& out = b.out;
    std::int64_t t0 = 0;
    bool any = false;
    const auto see = [&](std::int64_t t) {
        t0 = any ? std::min(t0, t) : t;
        any = true;
    };
    for (const TraceEvent& e : out.events)
        see(e.start_ns);
    for (const BeginEndMark& m : b.marks)
        see(m.t_ns);
    for (const CounterSeries& s : out.counters) {
        for (const std::int64_t t : s.t_ns)
            see(t);
    }
    for (TraceEvent& e : out.events)
        e.start_ns -= t0;
    for (BeginEndMark& m : b.marks)
        m.t_ns -= t0;
    for (FlowPoint& f : b.flows)
        f.t_ns -= t0;
    for (CounterSeries& s : out.counters) {
        for (std::int64_t& t : s.t_ns)
            t -= t0;
    }
    out.time_origin_ns = b.origin_ns + t0;
}

// "B" and "E" of each track, in time order (a stable sort keeps the file's order at equal
// times): an E closes the innermost open B. Unclosed B's end at the trace's last time (lenient).
void pair_begin_end(TraceBuild& b) {
    TraceData& out = b.out;
    std::stable_sort(b.marks.begin(), b.marks.end(),
                     [](const BeginEndMark& x, const BeginEndMark& y) {
                         return x.lane != y.lane ? x.lane < y.lane : x.t_ns < y.t_ns;
                     });
    const std::uint32_t no_name = out.strings.intern("");
    std::vector<const BeginEndMark*> open, unclosed;
    const auto mark_text = [&](const char* ph, const BeginEndMark& m) {
        return std::string(ph) + " event " + std::to_string(m.index) + " ('" +
               cut(out.strings[m.name]) + "' at " + micros_text(m.t_ns) + " us)";
    };
    const auto close_lane = [&] {
        for (const BeginEndMark* m : open) {
            b.log.problem(track_label(out.lanes[m->lane]) + ": " + mark_text("B", *m) +
                          " is never closed by an E");
            unclosed.push_back(m);
        }
        open.clear();
    };
    for (std::size_t i = 0; i < b.marks.size(); ++i) {
        const BeginEndMark& m = b.marks[i];
        if (i > 0 && m.lane != b.marks[i - 1].lane) close_lane();
        if (m.begin) {
            open.push_back(&m);
            continue;
        }
        const std::string track = track_label(out.lanes[m.lane]);
        if (open.empty()) {
            b.log.skip(track + ": " + mark_text("E", m) + " without a matching B");
            continue;
        }
        const BeginEndMark& begin = *open.back();
        open.pop_back();
        if (m.name != no_name && m.name != begin.name) {
            b.log.problem(track + ": E event " + std::to_string(m.index) + " ('" +
                          cut(out.strings[m.name]) + "') closes B event " +
                          std::to_string(begin.index) + " ('" + cut(out.strings[begin.name]) +
                          "')");
        }
        TraceEvent e;
        e.start_ns = begin.t_ns;
        e.dur_ns = m.t_ns - begin.t_ns;
        e.name = begin.name;
        e.cat = begin.cat;
        e.lane = begin.lane;
        e.args = begin.args != kNone ? begin.args : m.args;
        e.index = begin.index;
        out.events.push_back(e);
    }
    close_lane();
    if (b.log.strict() || unclosed.empty()) return;
    std::int64_t t_end = 0;
    for (const TraceEvent& e : out.events)
        t_end = std::max(t_end, e.end_ns());
    for (const BeginEndMark* m : unclosed) {
        TraceEvent e;
        e.start_ns = m->t_ns;
        e.dur_ns = std::max<std::int64_t>(0, t_end - m->t_ns);
        e.name = m->name;
        e.cat = m->cat;
        e.lane = m->lane;
        e.args = m->args;
        e.index = m->index;
        out.events.push_back(e);
    }
}

std::string range_text(const TraceData& out, const TraceEvent& e) {
    return "event " + std::to_string(e.index) + " ('" + cut(out.strings[e.name]) + "' " +
           micros_text(e.start_ns) + ".." + micros_text(e.end_ns()) + " us)";
}

// The ranges of a track nest like a call stack: each lies inside the one enclosing it or starts
// after it ends (kToleranceNs at shared boundaries). Depth = the number of enclosing ranges.
// A partial overlap is a problem; the lenient mode draws the range one level deeper.
void nest(TraceBuild& b) {
    TraceData& out = b.out;
    auto& ev = out.events;
    std::sort(ev.begin(), ev.end(), [](const TraceEvent& x, const TraceEvent& y) {
        if (x.lane != y.lane) return x.lane < y.lane;
        if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
        if (x.dur_ns != y.dur_ns) return x.dur_ns > y.dur_ns;  // the parent first
        return x.index < y.index;
    });
    std::vector<std::uint32_t> stack;  // the open ranges
    for (std::uint32_t i = 0; i < ev.size(); ++i) {
        TraceEvent& e = ev[i];
        if (i == 0 || e.lane != ev[i - 1].lane) stack.clear();
        while (!stack.empty() && ev[stack.back()].end_ns() <= e.start_ns + kToleranceNs)
            stack.pop_back();
        e.depth =
            static_cast<std::uint16_t>(std::min<std::size_t>(stack.size(), kMaxLaneDepth - 1));
        if (e.instant) continue;
        if (!stack.empty() && e.end_ns() > ev[stack.back()].end_ns() + kToleranceNs) {
            b.log.problem(track_label(out.lanes[e.lane]) + ": partial overlap of " +
                          range_text(out, ev[stack.back()]) + " and " + range_text(out, e));
            if (b.log.strict()) continue;
        }
        if (stack.size() < static_cast<std::size_t>(kMaxLaneDepth)) stack.push_back(i);
    }
    std::stable_sort(ev.begin(), ev.end(), [](const TraceEvent& x, const TraceEvent& y) {
        return x.lane != y.lane ? x.lane < y.lane : x.depth < y.depth;
    });
    for (std::uint32_t i = 0; i < ev.size(); ++i) {
        TraceLane& l = out.lanes[ev[i].lane];
        if (l.levels.size() <= ev[i].depth) l.levels.resize(ev[i].depth + 1u, {i, i});
        auto& level = l.levels[ev[i].depth];
        if (level.first == level.second) level.first = i;
        level.second = i + 1;
        ++l.events;
    }
}

// The range a flow point binds to: the one enclosing it, or (an "f" without "bp":"e") the next
// one starting on its lane.
std::uint32_t bound_range(const TraceData& out, const FlowPoint& f) {
    std::uint32_t e = out.event_at(f.lane, f.t_ns);
    if (e != kNone || f.enclosing) return e;
    const TraceLane& l = out.lanes[f.lane];
    if (l.levels.empty()) return kNone;
    const auto [first, last] = l.levels[0];
    const auto it =
        std::lower_bound(out.events.begin() + first, out.events.begin() + last, f.t_ns,
                         [](const TraceEvent& a, std::int64_t t) { return a.start_ns < t; });
    return it != out.events.begin() + last ? static_cast<std::uint32_t>(it - out.events.begin())
                                           : kNone;
}

// Each "f" binds to the latest "s" of its id (and category) at or before it in time, wherever
// the file put the two: Kineto writes some ends before their starts.
void bind_flows(TraceBuild& b) {
    TraceData& out = b.out;
    std::vector<std::uint32_t> starts;
    for (std::uint32_t i = 0; i < b.flows.size(); ++i) {
        if (b.flows[i].start) starts.push_back(i);
    }
    const auto by_key_time = [&](std::uint32_t x, std::uint32_t y) {
        const FlowPoint& p = b.flows[x];
        const FlowPoint& q = b.flows[y];
        return p.key != q.key ? p.key < q.key : p.t_ns < q.t_ns;
    };
    std::stable_sort(starts.begin(), starts.end(), by_key_time);
    for (const FlowPoint& f : b.flows) {
        if (f.start) continue;
        const auto first = std::lower_bound(
            starts.begin(), starts.end(), f.key,
            [&](std::uint32_t s, const FlowKey& key) { return b.flows[s].key < key; });
        const auto end = std::upper_bound(
            first, starts.end(), f.key,
            [&](const FlowKey& key, std::uint32_t s) { return key < b.flows[s].key; });
        const auto last =
            std::upper_bound(first, end, f.t_ns + kToleranceNs,
                             [&](std::int64_t t, std::uint32_t s) { return t < b.flows[s].t_ns; });
        const auto at = [&] { return event_label(f.index, out.strings[f.name], "f"); };
        if (first == end) {
            b.log.problem(at() + ": flow end without a flow start ('s') of the same id");
            continue;
        }
        if (last == first) {
            b.log.problem(at() + ": flow ends at " + micros_text(f.t_ns) +
                          " us, before it starts at " + micros_text(b.flows[*first].t_ns) + " us");
            continue;
        }
        const std::uint32_t from = bound_range(out, b.flows[*(last - 1)]);
        const std::uint32_t to = bound_range(out, f);
        if (from == kNone || to == kNone || from == to) continue;
        out.events[from].flow_peer = to;
        out.events[to].flow_peer = from;
        ++out.flows;
    }
}

// Device lanes: those holding device work (docs/FORMATS.md); empty ones by their name.
void find_device_lanes(TraceData& out) {
    std::vector<char> device_cat(out.strings.size(), 0);
    for (std::uint32_t i = 0; i < out.strings.size(); ++i)
        device_cat[i] = is_device_work(out.strings[i]) ? 1 : 0;
    for (TraceLane& l : out.lanes) {
        bool device = false;
        for (const auto& [first, last] : l.levels) {
            for (std::uint32_t e = first; e < last && !device; ++e) {
                const TraceEvent& ev = out.events[e];
                device = !ev.instant && device_cat[ev.cat] != 0;
            }
        }
        if (l.events == 0) {
            const std::string n = lower(l.name);
            device = n.rfind("device", 0) == 0 || n.rfind("gpu", 0) == 0 ||
                     n.find("stream") != std::string::npos;
        }
        l.device = device;
    }
}

// Counters in time order (napkin writes them so; other tools may not), their ranges, and the
// trace's time span.
void finish_counters_and_span(TraceData& out) {
    if (!out.events.empty()) {
        std::int64_t lo = out.events.front().start_ns, hi = lo;
        for (const TraceEvent& e : out.events) {
            lo = std::min(lo, e.start_ns);
            hi = std::max(hi, e.end_ns());
        }
        out.t_min_ns = lo;
        out.t_max_ns = hi;
    }
    for (CounterSeries& s : out.counters) {
        if (!std::is_sorted(s.t_ns.begin(), s.t_ns.end())) {
            std::vector<std::size_t> idx(s.t_ns.size());
            for (std::size_t i = 0; i < idx.size(); ++i)
                idx[i] = i;
            std::stable_sort(idx.begin(), idx.end(),
                             [&](std::size_t i, std::size_t j) { return s.t_ns[i] < s.t_ns[j]; });
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
        if (out.events.empty() && !s.t_ns.empty()) {
            out.t_min_ns = std::min(out.t_min_ns, s.t_ns.front());
            out.t_max_ns = std::max(out.t_max_ns, s.t_ns.back());
        }
    }
}

}  // namespace

void index_trace(TraceBuild& b) {
    TraceData& out = b.out;
    if (b.origin_ns != 0) rebase(b);
    order_lanes(b);
    pair_begin_end(b);
    nest(b);
    bind_flows(b);
    find_device_lanes(out);
    finish_counters_and_span(out);
    if (out.skipped_events > static_cast<std::int64_t>(out.warnings.size())) {
        out.warnings.push_back(std::to_string(out.skipped_events) +
                               " invalid events skipped in all");
    }
}

}  // namespace detail

bool is_device_work(std::string_view category) {
    const std::string c = detail::lower(category);
    return c == "kernel" || c.find("memcpy") != std::string::npos ||
           c.find("memset") != std::string::npos;
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
    const TraceLane& l = lanes[lane];
    for (std::size_t d = l.levels.size(); d-- > 0;) {
        auto [first, last] = l.levels[d];
        auto it =
            std::upper_bound(events.begin() + first, events.begin() + last, t_ns,
                             [](std::int64_t t, const TraceEvent& e) { return t < e.start_ns; });
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
        const TraceLane& l = lanes[i];
        for (std::size_t d = l.levels.size(); d-- > 0;) {
            auto [first, last] = l.levels[d];
            auto it = std::upper_bound(
                events.begin() + first, events.begin() + last, t_ns,
                [](std::int64_t t, const TraceEvent& e) { return t < e.start_ns; });
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

}  // namespace napkin::profiler
