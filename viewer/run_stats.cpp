// Runs side by side (A vs B per op or kernel, predicted vs measured time per op) and a time
// range summed up: viewer/run_stats.h.
#include "viewer/run_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "viewer/format.h"

namespace napkin::viewer {

VersusTable versus_table(const KernelStats& a, const KernelStats& b) {
    VersusTable out;
    out.steps_a = a.steps;
    out.steps_b = b.steps;
    out.per_step = a.steps > 0 && b.steps > 0;
    std::map<std::string, std::size_t> row_of;
    auto add = [&](const KernelStat& k, bool is_a) {
        auto [it, fresh] = row_of.emplace(k.name, out.rows.size());
        if (fresh) out.rows.push_back(VersusRow{k.name, {}, {}});
        (is_a ? out.rows[it->second].a : out.rows[it->second].b) = k;
    };
    for (const KernelStat& k : a.rows)
        add(k, true);
    for (const KernelStat& k : b.rows)
        add(k, false);
    std::stable_sort(out.rows.begin(), out.rows.end(), [&](const VersusRow& x, const VersusRow& y) {
        return std::max(out.a_ns(x), out.b_ns(x)) > std::max(out.a_ns(y), out.b_ns(y));
    });
    return out;
}

double predicted_step_seconds(const ReportData& r) {
    return r.predicted.time ? r.predicted.time->step_seconds : NAN;
}

namespace {

// An op's measured seconds per step from the profile: on the device when it launched work there.
std::map<std::string, double> measured_op_seconds(const ReportData& r) {
    std::map<std::string, double> out;
    if (!r.profile) return out;
    for (const profiler::ProfileRow& row : r.profile->ops) {
        const double device = row.device_seconds_per_step.value_or(0);
        out[row.name] = device > 0 ? device : row.seconds_per_step;
    }
    return out;
}

std::string pred_meas_text(double pred, double meas) {
    const auto shown = [](double s) {
        return std::isfinite(s) ? fmt_duration_ns(s * 1e9) : std::string("-");
    };
    std::string out = shown(pred) + " / " + shown(meas);
    if (std::isfinite(pred) && std::isfinite(meas) && pred > 0) {
        char b[32];
        std::snprintf(b, sizeof b, " (%.2fx)", meas / pred);
        out += b;
    }
    return out;
}

}  // namespace

std::vector<CompareRow> op_time_table(const std::vector<const RunData*>& runs) {
    // Every op any run predicts, ordered by its largest predicted time.
    std::map<std::string, double> order;
    for (const RunData* r : runs) {
        if (!r->report.predicted.time) continue;
        for (const profiler::PredictedOpTime& op : r->report.predicted.time->ops)
            order[op.name] = std::max(order[op.name], op.seconds_per_step);
    }
    std::vector<std::pair<std::string, double>> names(order.begin(), order.end());
    std::stable_sort(names.begin(), names.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    std::vector<std::map<std::string, double>> measured;
    for (const RunData* r : runs)
        measured.push_back(measured_op_seconds(r->report));
    std::vector<CompareRow> rows;
    for (const auto& [name, unused] : names) {
        CompareRow row{name, {}, false};
        for (std::size_t i = 0; i < runs.size(); ++i) {
            double pred = NAN;
            if (runs[i]->report.predicted.time) {
                for (const profiler::PredictedOpTime& op : runs[i]->report.predicted.time->ops) {
                    if (op.name == name) pred = op.seconds_per_step;
                }
            }
            const auto m = measured[i].find(name);
            const double meas = m == measured[i].end() ? NAN : m->second;
            row.values.push_back(std::isfinite(pred) || std::isfinite(meas)
                                     ? pred_meas_text(pred, meas)
                                     : std::string("-"));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

namespace {

// The part of [start, end) inside [t0, t1), in ns.
std::int64_t overlap_ns(std::int64_t start, std::int64_t end, std::int64_t t0, std::int64_t t1) {
    return std::max<std::int64_t>(0, std::min(end, t1) - std::max(start, t0));
}

// Adds one range's part inside the window to the summary and to its name's time.
void add_range(const TraceData& t, const Event& e, bool device, RangeSummary& s,
               std::map<std::uint32_t, std::int64_t>& by_name) {
    const std::int64_t inside = overlap_ns(e.start_ns, e.end_ns(), s.t0_ns, s.t1_ns);
    // The share of the range's counts inside the window: a range's work spread over its time.
    const double share =
        e.dur_ns > 0 ? static_cast<double>(inside) / static_cast<double>(e.dur_ns) : 1.0;
    double flops = 0, bytes = 0;
    if (e.args != kNone) {
        const EventArgs& a = t.args[e.args];
        flops = std::isfinite(a.flops) && a.flops > 0 ? a.flops * share : 0;
        bytes = std::isfinite(a.bytes) && a.bytes > 0 ? a.bytes * share : 0;
    }
    if (device) {
        ++s.kernels;
        s.kernel_ns += inside;
        s.kernel_flops += flops;
        s.kernel_bytes += bytes;
    } else {
        ++s.ops;
        s.op_ns += inside;
        s.op_flops += flops;
        s.op_bytes += bytes;
    }
    by_name[e.name] += inside;
}

}  // namespace

RangeSummary summarize_range(const RunData& run, std::int64_t t0_ns, std::int64_t t1_ns) {
    RangeSummary s;
    s.t0_ns = std::min(t0_ns, t1_ns);
    s.t1_ns = std::max(t0_ns, t1_ns);
    const TraceData& t = run.trace;
    std::vector<char> device_work(t.strings.size(), 0), op(t.strings.size(), 0);
    for (std::uint32_t i = 0; i < t.strings.size(); ++i) {
        device_work[i] = profiler::is_device_work(t.strings[i]) ? 1 : 0;
        op[i] = t.strings[i] == "op" ? 1 : 0;
    }
    std::map<std::uint32_t, std::int64_t> kernel_time, op_time;  // by name id
    for (const Lane& lane : t.lanes) {
        for (const auto& [first, last] : lane.levels) {
            // A level's ranges are start-sorted and do not overlap: the one before the first
            // starting at t0 may still reach into the window.
            auto it =
                std::lower_bound(t.events.begin() + first, t.events.begin() + last, s.t0_ns,
                                 [](const Event& e, std::int64_t t0) { return e.start_ns < t0; });
            if (it != t.events.begin() + first) --it;
            for (; it != t.events.begin() + last && it->start_ns < s.t1_ns; ++it) {
                if (it->instant || overlap_ns(it->start_ns, it->end_ns(), s.t0_ns, s.t1_ns) == 0)
                    continue;
                if (lane.device && device_work[it->cat] != 0) {
                    add_range(t, *it, true, s, kernel_time);
                } else if (!lane.device && op[it->cat] != 0) {
                    add_range(t, *it, false, s, op_time);
                }
            }
        }
    }
    for (const MemoryRow& row : run.memory.rows) {
        if (row.t_ns < s.t0_ns || row.t_ns >= s.t1_ns) continue;
        (row.bytes_delta > 0 ? s.allocated_bytes : s.freed_bytes) +=
            static_cast<double>(std::llabs(row.bytes_delta));
    }
    const auto& by_name = kernel_time.empty() ? op_time : kernel_time;
    for (const auto& [name, ns] : by_name)
        s.top.emplace_back(t.strings[name], ns);
    std::stable_sort(s.top.begin(), s.top.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    if (s.top.size() > 5) s.top.resize(5);
    return s;
}

std::string range_summary_text(const RangeSummary& s) {
    std::string out = fmt_duration_ns(static_cast<double>(s.t1_ns - s.t0_ns)) + ": " +
                      std::to_string(s.ops) + " ops " +
                      fmt_duration_ns(static_cast<double>(s.op_ns));
    if (s.op_flops > 0) out += ", " + fmt_flops(s.op_flops);
    if (s.op_bytes > 0) out += ", " + fmt_bytes_short(s.op_bytes);
    out += "; " + std::to_string(s.kernels) + " kernels " +
           fmt_duration_ns(static_cast<double>(s.kernel_ns));
    if (s.kernel_flops > 0) out += ", " + fmt_flops(s.kernel_flops);
    if (s.kernel_bytes > 0) out += ", " + fmt_bytes_short(s.kernel_bytes);
    if (s.allocated_bytes > 0 || s.freed_bytes > 0) {
        out += "; allocated " + fmt_bytes_short(s.allocated_bytes) + ", freed " +
               fmt_bytes_short(s.freed_bytes);
    }
    if (!s.top.empty()) {
        out += "; most time:";
        for (const auto& [name, ns] : s.top)
            out += " " + name + " " + fmt_duration_ns(static_cast<double>(ns)) + ",";
        out.pop_back();
    }
    return out;
}

}  // namespace napkin::viewer
