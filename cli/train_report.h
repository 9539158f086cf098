// napkin train's report: what the steps measured, summed as they run, and the run's
// RUN_DIR/report.json (profiler/run_report.h) and closing lines built from it. docs/FORMATS.md.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/trainer.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "profiler/run_report.h"

namespace napkin::cli {

// MFU's denominator and the roofline of the per-op predictions: on the CPU this process's sgemm
// rate and stream bandwidth, on a GPU in the hardware table its datasheet peak and bandwidth.
struct MachinePeak {
    const GpuSpec* gpu = nullptr;  // null: this CPU's
    double flops_per_s = 0;
    double bytes_per_s = 0;  // 0: unknown (a CPU run without a profile does not measure it)
    std::string source;      // report.json's measured.peak_source
};

// Every step's report entry and the run's totals.
struct StepTotals {
    std::vector<profiler::StepReport> steps;
    std::array<std::int64_t, kMemCategoryCount> peaks{};  // by MemCategory
    std::int64_t peak_total = 0;
    double seconds = 0, tokens = 0, model_flops = 0, hardware_flops = 0;
    // On a GPU, the driver's view of the device beside the allocator's: before the first step
    // (context, libraries, model) and the largest after a step.
    std::optional<EngineDevice::MemoryUse> device_baseline, device_peak;
    // --paged-optimizer: the steps' page traffic summed (StepRecord's paged_*).
    double paged_to_device_bytes = 0, paged_to_host_bytes = 0, paged_seconds = 0;

    // The step's entry (MFU and HFU against `peak_flops_per_s`) and its share of the totals.
    const profiler::StepReport& add(const StepRecord& r, double peak_flops_per_s, bool on_gpu,
                                    bool parallel);
};

// The process's peak resident set (getrusage), in bytes.
double peak_rss_bytes();

// report.json's "run": the options, the steps this process trained from, its checkpoint, data
// and device.
profiler::RunOptions run_options_report(const TrainOptions& o, Trainer& trainer, int first_step,
                                        const std::string& checkpoint);

// report.json's "measured".
profiler::Measurement measurement_report(const TrainOptions& o, const StepTotals& totals,
                                         Trainer& trainer, const MachinePeak& peak);

// The closing lines: steps, throughput, MFU and loss, the memory peaks beside the prediction,
// the offloaded host memory, and where the report and checkpoint went.
void print_run_summary(const profiler::RunReport& report, const StepTotals& totals,
                       const Estimate& predicted, int last_step,
                       const std::filesystem::path& report_file);

// report.json's "steps" of a resumed run: the steps before this process's first that an earlier
// process of the same run folder reported in `report_file` (kept: the report is the whole run's
// history), then `steps`. Just `steps` when there is no earlier report; a warning on stderr and
// just `steps` when it cannot be read.
std::vector<profiler::StepReport> run_history(const std::filesystem::path& report_file,
                                              const std::vector<profiler::StepReport>& steps);

// The final report is written in two phases around the final checkpoint: to
// RUN_DIR/report.json.pending (durably) before it, renamed to report.json after it. A kill
// between the two leaves a finished checkpoint with its report beside it, which --resume of the
// finished run publishes (publish_pending_report) instead of refusing a run that can never get a
// report.
std::filesystem::path pending_report_path(const std::filesystem::path& report_file);

// Renames report.json.pending over `report_file`; false when there is none.
bool publish_pending_report(const std::filesystem::path& report_file);

}  // namespace napkin::cli
