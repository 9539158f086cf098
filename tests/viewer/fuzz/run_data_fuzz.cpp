// libFuzzer entry for napkin's trace reader and the viewer's loader: any bytes, read as a trace in
// both modes and as an event stream, parsed as a memory snapshot and a report, then everything
// the panels compute from a loaded run (a range summed up, a merged file split into its runs, the
// A-vs-B table, predicted vs measured per op). Must never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "profiler/trace_reader.h"
#include "viewer/run_data.h"
#include "viewer/run_stats.h"

std::size_t fuzz_sink = 0;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace napkin::viewer;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    {
        napkin::profiler::TraceData strict;
        const auto r =
            napkin::profiler::read_trace_text(text, napkin::profiler::TraceMode::strict, strict);
        std::size_t bytes = r.problems.size();
        for (const auto& e : strict.events)
            bytes += strict.name_of(e).size() + (e.flow_peer != kNone ? 1 : 0);
        napkin::profiler::JsonText padded;  // gzip inflated here too
        padded.assign(text);
        napkin::profiler::ScannedDocument doc;
        napkin::profiler::scan_trace(
            padded.data(), padded.size(),
            [&](const napkin::profiler::ScannedEvent& e) {
                bytes += e.json.size() + e.args.size();
            },
            doc);
        fuzz_sink += bytes;  // keeps the reads from being optimized away
    }
    RunData run;
    run.has_trace = parse_trace(text, run.trace).empty();
    run.has_memory = parse_memory(text, run.memory).empty();
    run.has_report = parse_report(text, run.report).empty();
    if (!run.has_memory && run.has_trace)
        run.has_memory = memory_from_counters(run.trace, run.memory);
    if (run.has_trace) {
        for (int scope = 0; scope < 3; ++scope)
            kernel_stats(run.trace, static_cast<StatScope>(scope));
        const std::int64_t mid = run.trace.t_min_ns / 2 + run.trace.t_max_ns / 2;
        for (std::uint32_t lane = 0; lane < run.trace.lanes.size() && lane < 8; ++lane)
            run.trace.event_at(lane, mid);
        run.trace.host_event_at(mid, "op");
        run.trace.counter(kDeviceMemoryCounter, kDeviceMemoryUsedKey);
        fuzz_sink += summarize_range(run, run.trace.t_min_ns, mid).top.size();
        RunData copy;
        copy.label = "fuzz";
        copy.has_trace = true;
        copy.trace = run.trace;
        const std::vector<RunData> parts = split_processes(std::move(copy));
        for (const RunData& part : parts) {
            fuzz_sink += versus_table(kernel_stats(part.trace, StatScope::ops),
                                      kernel_stats(parts.front().trace, StatScope::ops))
                             .rows.size();
        }
    }
    if (run.has_memory) {
        run.live_at(run.memory.peak_t_ns);
        run.live_at(INT64_MAX);
    }
    if (run.has_report) {
        predicted_total_bytes(run.report);
        median_step_seconds(run.report);
        run.peak_flops_per_s();
        const RunData single;
        compare_table({&run, &single});
        op_time_table({&run, &single});
    }
    return 0;
}
