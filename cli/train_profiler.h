// napkin train --profile over a run: the recorder and RUN_DIR/trace.json (step, pass, layer and
// op ranges with each op's analytic cost, memory counters), the per-op table that becomes
// report.json's "profile", on a GPU the device's own records (CUPTI through the plugin,
// profiler/cupti_collector.h), and RUN_DIR/memory.json at the end. docs/FORMATS.md.
//
// CUPTI's records are collected over the profiled steps only and flushed after each of them,
// once the step has synchronized: never inside a timed step. The allocator's events feed
// memory.json and the trace's memory counters only: recorded from the start (so the snapshot's
// peak is the run's) to the end of the profiled window, and not at all without one (at some
// thousand events a step they would grow without end).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "cli/train_profile.h"
#include "core/engine/trainer.h"
#include "profiler/chrome_trace_writer.h"
#include "profiler/cupti_collector.h"
#include "profiler/run_report.h"
#include "profiler/step_profile.h"

namespace napkin::cli {

class TrainProfiler {
public:
    // `steps`: the window, clamped to the run's steps; none turns every call below into nothing
    // but the allocator's set-up. InputError when trace.json cannot be created.
    TrainProfiler(Trainer& trainer, ProfileSteps steps, const std::filesystem::path& out_dir);
    TrainProfiler(const TrainProfiler&) = delete;
    TrainProfiler& operator=(const TrainProfiler&) = delete;

    bool on() const { return recorder_ != nullptr; }
    // The ceilings the per-op predictions divide by, once the device is known.
    void set_roofline(const profiler::Roofline& roofline);

    // Around step s (0-based) of a run that ends after step `last_step` (1-based).
    void before_step(int s);
    void after_step(int s, int last_step);  // CUPTI: flushed, or finished at the window's end
    // The driver's view of the device after step s, as the trace's "device memory" counter.
    void record_device_memory(int s, const EngineDevice::MemoryUse& m);
    // Step s's events into the per-op table and trace.json.
    void write_step(int s);

    // After the last step: CUPTI's collection ends if a stop interrupted the window.
    void stop_collecting();
    // Then: the memory counters, tracks and otherData close trace.json, and memory.json is
    // written. InputError naming the file when either fails.
    void close();

    // report.json's "profile"; none when off.
    std::optional<profiler::ProfileReport> report() const;
    // The end-of-run lines: the trace and its op coverage, and CUPTI's counts.
    void print_summary() const;

private:
    bool profiled(int s) const { return on() && s + 1 >= steps_.first && s + 1 <= steps_.last; }
    void finish_gpu_activity();

    Trainer& trainer_;
    ProfileSteps steps_;
    std::filesystem::path out_dir_;
    std::unique_ptr<profiler::Recorder> recorder_;
    std::unique_ptr<profiler::ChromeTraceWriter> trace_;
    profiler::StepProfile profile_;
    std::unique_ptr<profiler::GpuActivitySource> gpu_source_;
    std::unique_ptr<profiler::CuptiCollector> gpu_activity_;
    std::optional<profiler::GpuActivitySummary> gpu_summary_;  // none on the CPU
};

}  // namespace napkin::cli
