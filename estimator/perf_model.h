// The performance model: a training step's time, op by op, from the op plan (core/op_plan.h)
// and a device profile (estimator/device_profile.h). One implementation, used by napkin
// estimate, napkin train's report.json ("predicted.time") and, through that report, napkin
// report and the viewer's compare view. docs/ESTIMATOR.md, "Time", derives it.
//
// Per call, from the op's FLOPs, bytes and shape:
//   GEMM (a linear layer)     FLOPs / GEMM rate (dtype, pass, M, N, K)
//   output layer and loss     FLOPs of the head's three GEMMs / the "head" rate (M, Vp, C)
//   attention                 FLOPs / attention rate (impl, dtype, direction; T, HD, B NH)
//   everything else           bytes / the op class's bandwidth at that many bytes
// A step (one rank): G micro-batches of forward, recomputation and backward, the data reads
// (every rank reads all W G micro-batches), the gradients' memset and the optimizer over the
// rank's shard, offload copies and the host's update, the collectives (latency + bytes /
// bandwidth per call, the ring's bytes: exposed, or overlapped with the backward and the
// forward where the engine overlaps them), and the profile's overheads per op call and per step.
// Under 3D parallelism one rank runs its stage's blocks of its tensor-parallel shard; its tensor-
// and pipeline-parallel traffic is exposed (Megatron-LM waits for both), and the pipeline bubble
// adds (P - 1) / (V M) of the stage's forward and backward (Narayanan et al. 2021, sec. 2.2).
// Names of the ops are the engine's op ranges as napkin report shows them ("attn.qkv backward",
// "attn.core (recompute)", "lm_head+loss (fused forward and backward)", "optimizer"), so
// predicted and measured meet by name.
// Tests: tests/estimator/perf_model_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/op_plan.h"
#include "core/recipe.h"
#include "estimator/communication.h"
#include "estimator/device_profile.h"
#include "estimator/parallel.h"

namespace napkin {

// Where the time goes (napkin estimate's breakdown).
enum class TimeBucket : std::uint8_t {
    gemm,
    attention,
    memory_bound,
    optimizer,
    communication,
    overhead,
    pipeline_bubble
};
inline constexpr std::array kTimeBucketNames = {
    EnumName<TimeBucket>{TimeBucket::gemm, "gemm"},
    EnumName<TimeBucket>{TimeBucket::attention, "attention"},
    EnumName<TimeBucket>{TimeBucket::memory_bound, "memory_bound"},
    EnumName<TimeBucket>{TimeBucket::optimizer, "optimizer"},
    EnumName<TimeBucket>{TimeBucket::communication, "communication"},
    EnumName<TimeBucket>{TimeBucket::overhead, "overhead"},
    EnumName<TimeBucket>{TimeBucket::pipeline_bubble, "pipeline_bubble"},
};
inline constexpr std::size_t kTimeBucketCount = kTimeBucketNames.size();

// Overlap of the data-parallel collectives with computation (napkin train's --overlap): off,
// every collective where its result is first needed; on, the gradients' collectives beside the
// backward of the units before them, ZeRO-3's gathers prefetched one region ahead.
enum class Overlap : std::uint8_t { off, on };
inline constexpr std::array kOverlapNames = {
    EnumName<Overlap>{Overlap::off, "off"},
    EnumName<Overlap>{Overlap::on, "on"},
};

// What a step does besides the plan's ops, per rank.
struct StepShape {
    std::int64_t grad_accum = 1;  // G micro-batches per rank
    int world = 1;                // W data-parallel ranks
    int zero = 0;
    Offload offload = Offload::none;
    OptimizerKind optimizer = OptimizerKind::adamw;
    bool grads_fp32 = false;
    // Elements the rank's optimizer steps (its shard: S at ZeRO 1-3, every trainable element at
    // 0) and gradient elements its memset clears (P, or S from ZeRO-2).
    double optimizer_elements = 0;
    double grad_elements = 0;
    int threads = 0;                              // the rank's threads (CPU); 0: a GPU
    const CommunicationEstimate* comm = nullptr;  // per step per rank; null: one process
    double link_bytes_per_s = 0;  // for collectives the profile has not measured (0: none)
    Overlap overlap = Overlap::off;
    // One pipeline stage of one tensor-parallel rank (Megatron-LM's layout, estimator/parallel.h;
    // the plan is then the rank's): the blocks it runs (0: all of the plan's), whether it runs
    // the embedding and the head, the bubble (P - 1) / (V M) over its compute, and its tensor-
    // and pipeline-parallel traffic (null: none), each line over its group's link.
    int layers = 0;
    bool first_stage = true, last_stage = true;
    double bubble_fraction = 0;
    const ModelParallelTraffic* model_parallel = nullptr;
};

struct OpTime {
    std::string name;  // "attn.qkv backward" (the engine's op range, summed over layers)
    TimeBucket bucket = TimeBucket::memory_bound;
    double calls_per_step = 0;
    double seconds_per_step = 0;
    double flops_per_step = 0;
    double bytes_per_step = 0;
};

struct StepTime {
    std::vector<OpTime> ops;  // in the order a step runs them, collectives last
    std::array<double, kTimeBucketCount> seconds{};  // by TimeBucket, per step
    double comm_seconds = 0;                         // the collectives' whole time
    double comm_exposed_seconds = 0;  // what the step waits for (in seconds[communication])
    double step_seconds = 0;
    std::vector<std::string> notes;  // tables missing from the profile and what stood in
};

// The step's time on `profile`. Throws UsageError when the profile has no compute section.
StepTime predict_step_time(const OpPlan& plan, const StepShape& shape,
                           const DeviceProfile& profile);

// The optimizer update's bytes for `elements` parameters under the recipe: read the gradient
// (twice: norm and update), the states and the fp32 values, write the states and the values (and
// the rounded working copy under mixed precision). Optimizer::step_cost's count.
double optimizer_update_bytes(double elements, OptimizerKind opt, Precision precision,
                              bool grads_fp32);

}  // namespace napkin
