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
