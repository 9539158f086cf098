// Traces in the viewer: the one trace reader (profiler/trace_reader.h) in its lenient mode, and
// the kernel table's aggregates over what it read.
#include <algorithm>
#include <cmath>
#include <string>

#include "viewer/run_data.h"
#include "viewer/run_json.h"

namespace napkin::viewer {

std::string parse_trace(std::string_view text, TraceData& out) {
    return profiler::read_trace_text(text, profiler::TraceMode::lenient, out).error;
}

std::string parse_trace_padded(simdjson::padded_string_view text, TraceData& out,
                               std::string* top_schema) {
    profiler::TraceReadResult r =
        profiler::read_trace(text.data(), text.size(), profiler::TraceMode::lenient, out);
    if (top_schema != nullptr) *top_schema = std::move(r.top_schema);
    return r.error;
}

KernelStats kernel_stats(const TraceData& trace, StatScope scope,
                         const profiler::Roofline& roofline) {
    KernelStats out;
    std::vector<KernelStat> by_name(trace.strings.size());
    std::vector<char> device_work(trace.strings.size(), 0);
    for (std::uint32_t i = 0; i < trace.strings.size(); ++i)
        device_work[i] = profiler::is_device_work(trace.strings[i]) ? 1 : 0;
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
                // Work on a device lane: not the annotations Kineto draws on streams.
                take = device_work[e.cat] != 0 && trace.lanes[e.lane].device;
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
            const double flops = std::isfinite(a.flops) && a.flops > 0 ? a.flops : 0;
            const double bytes = std::isfinite(a.bytes) && a.bytes > 0 ? a.bytes : 0;
            s.flops += flops;
            s.bytes += bytes;
            s.roofline_ns += 1e9 * roofline.seconds(static_cast<std::uint64_t>(flops),
                                                    static_cast<std::uint64_t>(bytes));
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
