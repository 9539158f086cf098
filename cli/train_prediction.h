// napkin train's prediction: the estimator's inputs for exactly this run (one "GPU": this
// process), whose estimate report.json puts beside the measurement, the check that a CPU run
// fits this machine's memory before it allocates anything, and what an out-of-memory error adds.
#pragma once

#include <optional>
#include <string>

#include "cli/train_report.h"
#include "core/engine/trainer.h"
#include "estimator/estimate.h"
#include "estimator/profile_catalog.h"
#include "profiler/run_report.h"

namespace napkin::cli {

// `world` ranks of data parallelism; the GPU engine's scratch when `on_gpu`, else the CPU
// engine's; `peak_flops_per_s` the MFU basis (0: none).
EstimateInputs prediction_inputs(const TrainOptions& o, int world, bool on_gpu,
                                 double peak_flops_per_s);

// report.json's "predicted": the estimate `pred` for `inputs` (this run) by memory category, its
// FLOPs per step and the lectures' closed forms beside them, and the host's share under
// --offload optimizer.
profiler::Prediction prediction_report(const TrainOptions& o, const EstimateInputs& inputs,
                                       const Estimate& pred);

// The performance model's profile for this run's device (estimator/perf_model.h): `file`
// (--device-profile; measured on another device: UsageError unless `force`), else the one
// napkin ships for it, else its ceilings at the default efficiencies (a CPU's sgemm rate and
// stream copy, a GPU's datasheet). None for a GPU missing from the hardware table.
std::optional<ChosenProfile> time_profile(const std::string& file, bool force, Trainer& trainer,
                                          const MachinePeak& peak);

// report.json's "predicted.time": the run's step over `given` (time_profile's, from
// --device-profile), else the device's own profile or ceilings; this process's threads, the
// collectives overlapped as the run overlaps them. None where time_profile has none.
std::optional<profiler::TimePrediction> predict_run_time(const TrainOptions& o, EstimateInputs ei,
                                                         const std::optional<ChosenProfile>& given,
                                                         Trainer& trainer, const MachinePeak& peak);

// A CPU run whose predicted memory, times the ranks on this node, plus a margin (10% and
// kHostMemoryMarginBytes a process) exceeds the memory available now (/proc/meminfo's
// MemAvailable) would end in std::bad_alloc or the OOM killer inside its first step: UsageError
// naming the three figures and --force instead. Not called under --force. A GPU run is checked
// against its device instead (check_device_memory).
constexpr double kHostMemoryMarginBytes = 0.5e9;
void check_host_memory(const TrainOptions& o, int world, int node_ranks);

// A GPU run, once the trainer has put the model on the device and before the first step: the
// rest of the predicted peak (what the first step adds) plus a margin (10% and 0.5 GB: cuBLAS
// and NCCL workspaces) against the device's free memory (cudaMemGetInfo). UsageError naming the
// figures, the device and --force. Not called under --force; nothing to check on the CPU.
void check_device_memory(const TrainOptions& o, int world, Trainer& trainer);

// What to add to an OutOfMemory error: the run's predicted peak per device and the ways to
// lower it ("; the estimator predicts a peak of 81.20 GB per GPU for this run ...").
std::string out_of_memory_hint(const TrainOptions& o, int world);

}  // namespace napkin::cli
