// libFuzzer entry for the viewer's loader: any bytes, parsed as a trace, a memory snapshot and a
// report, then everything the panels compute from a loaded run. Must never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "viewer/run_data.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace napkin::viewer;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
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
    }
    return 0;
}
