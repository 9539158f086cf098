// StepProfile: folds a profiled run's events into what report.json says about time, per op
// (the plan's ops, summed over layers), per kernel, and per step (wall time, and how much of it
// the op ranges account for). Each op and kernel also gets a roofline lower bound on its time,
// max(FLOPs / peak FLOP/s, bytes / peak bandwidth), from the cost its event carries, which is
// the prediction the measured time is compared with.
//
// Pure: events in, numbers out (tests/profiler/step_profile_test.cpp feeds synthetic events).
// Feed it the recorder's events once a step (before they go to the trace writer); a batch may
// hold any number of whole steps.
//
// Names: an op range "h.3.attn.qkv backward" is counted as "attn.qkv backward" (the layer
// prefix "h.<n>." is stripped), so a row is one op of the block over all layers. Op ranges are
// the host track's ranges of category op and optimizer; they never nest, so their sum over a
// step is the step time they account for. Kernels are the device track's ranges.
//
// Device time per op: a device record that names its op (arg "op": on a GPU, the op range open
// when the engine made the call, profiler/cupti_records.h) counts toward that op, even where no
// range of it is in the batch (a CUDA graph launch runs a captured micro-batch's kernels with no
// op range on the host; its unmapped nodes count toward "cuda_graph"). Any other device record
// with a launch flow (its flow's end inside the record, its start at the launch) counts toward
// the op range that holds the launch (the CPU's host-timed kernels). On a GPU, where the host
// only queues work, that is the op's time on the device; the op range's own time is when the
// host launched it and whatever it waited for.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "profiler/event.h"
#include "profiler/run_report.h"

namespace napkin::profiler {

// The machine's ceilings, for the roofline. CPU runs measure both in the process (sgemm,
// stream copy); GPU runs take them from the hardware table or a measured GEMM peak.
struct Roofline {
    double flops_per_s = 0;  // 0: unknown
    double bytes_per_s = 0;  // 0: unknown
    // The lower bound on the time of work with `flops` and `bytes`; 0 when neither is known.
    // Doubles: a trace's counts are JSON numbers of any size (never cast to an integer type).
    double seconds(double flops, double bytes) const;
};

// One op or kernel name, over every profiled step.
struct WorkStats {
    std::string name;  // "attn.qkv backward", "matmul_forward"
    Category category = Category::op;
    std::uint64_t calls = 0;
    std::int64_t total_ns = 0;
    std::uint64_t flops = 0;  // sum over calls of the analytic cost
    std::uint64_t bytes = 0;
    double roofline_seconds = 0;  // sum over calls
    // Ops only: the device records launched inside the op's ranges, and their summed time.
    std::uint64_t device_records = 0;
    std::int64_t device_ns = 0;
};

struct StepTiming {
    std::string name;  // "step 12"
    std::int64_t start_ns = 0;
    std::int64_t dur_ns = 0;
    std::int64_t op_ns = 0;       // inside op and optimizer ranges
    std::int64_t kernel_ns = 0;   // inside device-track kernels
    double roofline_seconds = 0;  // sum of the ops' rooflines
    double coverage() const {
        return dur_ns > 0 ? static_cast<double>(op_ns) / static_cast<double>(dur_ns) : 0.0;
    }
};

class StepProfile {
public:
    explicit StepProfile(Roofline roofline = {}) : roofline_(roofline) {}

    // Adds a batch of events. Ranges outside every step range of the batch (a checkpoint save)
    // count toward their op and kernel rows but toward no step.
    void add(const std::vector<Event>& events);

    // Rows by descending total time.
    std::vector<WorkStats> ops() const { return sorted(ops_); }
    std::vector<WorkStats> kernels() const { return sorted(kernels_); }
    const std::vector<StepTiming>& steps() const { return steps_; }
    const Roofline& roofline() const { return roofline_; }

    // report.json's "profile" section (docs/FORMATS.md): the steps, and the ops and kernels
    // per step (averaged over the profiled steps) with their roofline and achieved rates.
    ProfileReport report() const;
    nlohmann::json to_json() const;  // report() as report.json writes it

    // "h.3.attn.qkv backward" -> "attn.qkv backward"; other names unchanged.
    static std::string op_key(const std::string& range_name);

private:
    static std::vector<WorkStats> sorted(const std::map<std::string, WorkStats>& rows);
    struct OpSpan {  // one op range of a batch, and its row
        std::int64_t start = 0, end = 0;
        WorkStats* row = nullptr;
    };
    // Adds each device record's time to the op it names, or else to the op whose range holds its
    // launch (flows).
    void attribute_to_ops(const std::vector<Event>& events, std::vector<OpSpan>& op_spans,
                          const std::vector<const RangeEvent*>& device_records);

    Roofline roofline_;
    std::map<std::string, WorkStats> ops_, kernels_;
    std::vector<StepTiming> steps_;
};

}  // namespace napkin::profiler
