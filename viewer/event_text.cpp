// A range described for the timeline's tooltip and status line: viewer/run_stats.h.
#include <cmath>
#include <cstdio>
#include <string>

#include "viewer/format.h"
#include "viewer/run_stats.h"
#include "viewer/ticks.h"

namespace napkin::viewer {

namespace {

// The achieved rate line of a range's args: "achieved 1.2 TFLOP/s (34.5% of peak)".
// An op that launched device work is timed by it (`device_ns`), not by its host launch calls.
std::string achieved_text(const RunData& run, const Event& e, const EventArgs& a,
                          std::int64_t device_ns) {
    double flop_per_s = std::isfinite(a.achieved_gflop_per_s) ? a.achieved_gflop_per_s * 1e9 : NAN;
    if (std::isfinite(a.flops) && device_ns > 0)
        flop_per_s = a.flops / (static_cast<double>(device_ns) * 1e-9);
    if (!std::isfinite(flop_per_s) && std::isfinite(a.flops) && e.dur_ns > 0)
        flop_per_s = a.flops / (static_cast<double>(e.dur_ns) * 1e-9);
    std::string s;
    char buf[96];
    if (std::isfinite(flop_per_s)) {
        std::snprintf(buf, sizeof buf, "achieved %.4g TFLOP/s", flop_per_s / 1e12);
        s += buf;
        if (run.peak_flops_per_s() > 0) {
            std::snprintf(buf, sizeof buf, " (%.1f%% of peak)",
                          100.0 * flop_per_s / run.peak_flops_per_s());
            s += buf;
        }
        s += "\n";
    }
    if (std::isfinite(a.achieved_gb_per_s)) {
        std::snprintf(buf, sizeof buf, "achieved %.4g GB/s\n", a.achieved_gb_per_s);
        s += buf;
    }
    return s;
}

// A range's time on the device and napkin's roofline for its FLOPs and bytes beside the time it
// took: "device time 1.2 ms (the kernels it launched)", "roofline 0.4 ms: measured 3.0x it".
// `device_ns`: the device time of the work an op launched (device_time_by_op), 0 without any.
std::string work_text(const RunData& run, const Event& e, const EventArgs& a,
                      std::int64_t device_ns) {
    std::string s;
    if (device_ns > 0) {
        s += "device time " + fmt_duration_ns(static_cast<double>(device_ns)) +
             " (the kernels, copies and sets it launched)\n";
    }
    const double flops = std::isfinite(a.flops) && a.flops > 0 ? a.flops : 0;
    const double bytes = std::isfinite(a.bytes) && a.bytes > 0 ? a.bytes : 0;
    const double roofline_ns = 1e9 * run.roofline().seconds(flops, bytes);
    if (roofline_ns > 0) {
        const double measured_ns = static_cast<double>(device_ns > 0 ? device_ns : e.dur_ns);
        char buf[64];
        std::snprintf(buf, sizeof buf, ": measured %.2fx it", measured_ns / roofline_ns);
        s += "roofline " + fmt_duration_ns(roofline_ns) + buf + "\n";
    }
    return s;
}

}  // namespace

std::string event_details(const RunData& run, const Event& e, double origin_ns,
                          double resolution_ns, std::int64_t device_ns) {
    const TraceData& t = run.trace;
    const Lane& lane = t.lanes[e.lane];
    std::string s = t.name_of(e) + "\ncategory " + (t.cat_of(e).empty() ? "-" : t.cat_of(e)) +
                    ", lane " + lane.process_name + " / " + lane.name + "\nstart " +
                    fmt_time_at(static_cast<double>(e.start_ns) - origin_ns, resolution_ns) +
                    ", duration " + fmt_duration_ns(static_cast<double>(e.dur_ns)) + "\n";
    if (e.args != kNone) {
        const EventArgs& a = t.args[e.args];
        if (std::isfinite(a.flops)) s += "FLOPs " + fmt_flops(a.flops) + "\n";
        if (std::isfinite(a.bytes)) s += "bytes " + fmt_bytes_short(a.bytes) + "\n";
        s += achieved_text(run, e, a, device_ns);
        s += work_text(run, e, a, device_ns);
        if (!a.other.empty()) s += a.other + "\n";
    } else if (device_ns > 0) {
        s += work_text(run, e, EventArgs{}, device_ns);
    }
    if (e.flow_peer != kNone) {
        const Event& p = t.events[e.flow_peer];
        s += std::string(t.lanes[e.lane].device ? "launched by " : "flow to ") + t.name_of(p) +
             " on " + t.lanes[p.lane].name + "\n";
    }
    return s;
}

}  // namespace napkin::viewer
