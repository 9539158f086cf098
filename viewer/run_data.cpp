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

namespace {

// napkin's ops are category "op"; torch.profiler's are "cpu_op" (aten:: calls, nested: the
// innermost one enclosing a launch gets its kernels' time).
std::string_view op_category(const TraceData& t) {
    for (std::uint32_t i = 0; i < t.strings.size(); ++i) {
        if (t.strings[i] != "op") continue;
        for (const Event& e : t.events) {
            if (e.cat == i) return "op";
        }
    }
    return "cpu_op";
}

std::vector<char> device_work_by_string(const TraceData& t) {
    std::vector<char> out(t.strings.size(), 0);
    for (std::uint32_t i = 0; i < t.strings.size(); ++i)
        out[i] = profiler::is_device_work(t.strings[i]) ? 1 : 0;
    return out;
}

// Device time per host op (by event index; empty without device work that has a launch): each
// device record's duration goes to the op enclosing the launch its flow comes from, so a GPU
// run's op is timed by its kernels, not by the host's launch calls (which made "ops" divide
// FLOPs by launch time: 130-221% of peak on traces/h200-gpt2).
std::vector<std::int64_t> device_time_by_op(const TraceData& t,
                                            const std::vector<char>& device_work) {
    const std::string_view op_cat = op_category(t);
    std::vector<std::int64_t> out;
    for (const Event& e : t.events) {
        if (e.instant || device_work[e.cat] == 0 || !t.lanes[e.lane].device || e.flow_peer == kNone)
            continue;
        const std::uint32_t op = t.host_event_at(t.events[e.flow_peer].start_ns, op_cat);
        if (op == kNone) continue;
        if (out.empty()) out.assign(t.events.size(), 0);
        out[op] += e.dur_ns;
    }
    return out;
}

}  // namespace

std::vector<std::int64_t> device_time_by_op(const TraceData& trace) {
    return device_time_by_op(trace, device_work_by_string(trace));
}

KernelStats kernel_stats(const TraceData& trace, StatScope scope,
                         const profiler::Roofline& roofline) {
    KernelStats out;
    struct StepSum {
        std::int64_t ns = 0;
        int count = 0;
    } kineto_host, kineto_device;
    std::vector<KernelStat> by_name(trace.strings.size());
    const std::vector<char> device_work = device_work_by_string(trace);
    const std::string_view op_cat = op_category(trace);
    const std::vector<std::int64_t> device_ns = scope == StatScope::ops
                                                    ? device_time_by_op(trace, device_work)
                                                    : std::vector<std::int64_t>();
    for (std::uint32_t i = 0; i < trace.events.size(); ++i) {
        const Event& e = trace.events[i];
        if (e.instant) continue;
        const std::string& cat = trace.strings[e.cat];
        if (cat == "step") {
            out.step_total_ns += e.dur_ns;
            ++out.steps;
        } else if (trace.strings[e.name].rfind("ProfilerStep#", 0) == 0) {
            // torch.profiler's step: a user annotation on the host, mirrored on a GPU lane.
            StepSum& k = trace.lanes[e.lane].device ? kineto_device : kineto_host;
            k.ns += e.dur_ns;
            ++k.count;
        }
        bool take = false;
        switch (scope) {
            case StatScope::kernels:
                // Work on a device lane: not the annotations Kineto draws on streams.
                take = device_work[e.cat] != 0 && trace.lanes[e.lane].device;
                break;
            case StatScope::ops:
                take = cat == op_cat;
                break;
            case StatScope::all:
                take = true;
                break;
        }
        if (!take) continue;
        KernelStat& s = by_name[e.name];
        ++s.count;
        s.total_ns += e.dur_ns;
        if (!device_ns.empty()) s.device_ns += device_ns[i];
        if (e.args != kNone) {
            const EventArgs& a = trace.args[e.args];
            const double flops = std::isfinite(a.flops) && a.flops > 0 ? a.flops : 0;
            const double bytes = std::isfinite(a.bytes) && a.bytes > 0 ? a.bytes : 0;
            s.flops += flops;
            s.bytes += bytes;
            s.roofline_ns += 1e9 * roofline.seconds(flops, bytes);
        }
    }
    // napkin's steps, else torch.profiler's host steps, else their GPU copies (a trimmed trace
    // may keep only those), else the trace's whole span.
    for (const StepSum& k : {kineto_host, kineto_device}) {
        if (out.steps > 0) break;
        out.steps = k.count;
        out.step_total_ns = k.ns;
    }
    if (out.steps == 0) out.step_total_ns = trace.t_max_ns - trace.t_min_ns;
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
