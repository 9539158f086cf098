// RunReport: report.json, what `napkin train` writes at the end of a run (the recipe, the
// estimator's prediction for it beside what was measured, every step, the profile and the
// data-parallel traffic) and what `napkin report`, `napkin export` and the viewer read. One
// struct, one writer (to_json) and one reader (from_json); docs/FORMATS.md lists the fields.
//
// Versions: the file names its schema, "napkin-train-report/N". The reader takes N from 1 to
// kReportSchemaVersion and refuses a newer one by name ("schema napkin-train-report/3 is newer
// than this napkin reads (1-2); update napkin"). A field added within a version is optional
// here: absent in the reports written before it (noted beside each). A changed field bumps the
// version. 2 added predicted.time (the performance model's step); a report read is written back
// under the schema it was read with, so a version 1 file round-trips to the same text.
//
// Errors are InputError, one line naming the field: "field 'measured.tokens_per_s' is not a
// number"; profiler/run_folder.h read_run_report puts the file in front.
// Tests: tests/profiler/run_report_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/allocator.h"
#include "core/model_config.h"

namespace napkin::profiler {

inline constexpr std::string_view kReportSchemaName = "napkin-train-report";
inline constexpr int kReportSchemaVersion = 2;  // the one written; read: 1..this
inline constexpr std::string_view kReportSchema = "napkin-train-report/2";

// The recipe and loop options ("run").
struct RunOptions {
    int steps = 0;
    std::int64_t micro_batch = 0, seq_len = 0;
    int grad_accum = 0;
    std::string precision, optimizer, checkpointing, attention;  // the flags' names
    std::string finetune = "full";          // absent in reports written before LoRA: full
    std::optional<std::int64_t> lora_rank;  // null under full fine-tuning
    std::optional<double> lora_alpha;
    double lr = 0;
    std::uint64_t seed = 0;
    int first_step = 0;                       // the step a resumed run started from (0: a new run)
    std::string checkpoint;                   // the last one written ("none": nothing yet)
    std::string data;                         // "synthetic Markov corpus (...)", or the file
    std::string device;                       // "cpu", or "cuda: <the device's name>"
    std::optional<double> data_entropy_nats;  // the synthetic corpus's, the loss it tends to
    std::optional<std::string> offload;       // "optimizer" under --offload optimizer
    // fp8-amp: the amax history length of delayed scaling (0: current scaling). Absent outside
    // fp8-amp and in reports written before it.
    std::optional<std::int64_t> fp8_amax_history;
    // Rows of fp32 logits the LM head and loss held at once (--loss-chunk; 0: all B x T). Absent
    // in reports written before it.
    std::optional<std::int64_t> loss_chunk;
    // CUDA runs: whether each micro-batch ran as a CUDA graph (--cuda-graph), and when not, why
    // ("--cuda-graph off", or what auto found the capture cannot hold). Absent on the CPU and in
    // reports written before them.
    std::optional<bool> cuda_graph;
    std::optional<std::string> cuda_graph_off;
    // CUDA runs with flash attention under NAPKIN_ATTENTION_CANDIDATES: the list of sweep
    // candidates that stood in for the engine's bf16 flash attention (docs/CUDA.md "The engine on
    // candidates"). Absent otherwise, and in reports written before it.
    std::optional<std::string> attention_candidates;
    bool operator==(const RunOptions&) const = default;
};

// --init-from: the weights the run started from, and what importing them cost ("init").
struct InitReport {
    std::string path, format, strategy;
    std::int64_t tensors = 0, bytes_read = 0;
    double seconds = 0;
    std::int64_t peak_rss_increase_bytes = -1;  // -1: /proc/self/status unreadable
    bool peak_rss_reset = false;                // false: an upper bound (lifetime VmHWM)
    bool operator==(const InitReport&) const = default;
};

// The model states in host memory under --offload optimizer: predicted (double) and measured
// (the host allocator's peaks, integers).
template <class Bytes>
struct HostStateBytes {
    Bytes master_weights{}, gradients{}, optimizer_state{};
    bool operator==(const HostStateBytes&) const = default;
};

// --paged-optimizer (docs/ESTIMATOR.md "Paged optimizer states"): the state in managed memory
// and its page traffic, predicted ("predicted.paged_optimizer") and measured (the paged
// allocator's peak, the prefetches' bytes and stream time per step averaged over the run's
// steps: "measured.paged_optimizer"). Absent otherwise, and in reports written before them.
struct PagedPrediction {
    double state_bytes = 0, device_peak_bytes = 0, traffic_bytes_per_step = 0,
           traffic_seconds_per_step = 0;
    bool link_assumed = false;  // no device profile's copy rates: PCIe 4.0 x16's assumed
    bool operator==(const PagedPrediction&) const = default;
};
struct PagedMeasurement {
    std::int64_t state_bytes = 0;
    double to_device_bytes_per_step = 0, to_host_bytes_per_step = 0, traffic_seconds_per_step = 0;
    bool operator==(const PagedMeasurement&) const = default;
};

// The estimator predicts the first six memory categories (MemCategory order) and `data`
// (Prediction::data); the engine's `communication` is measured only.
inline constexpr std::size_t kPredictedCategoryCount = 6;

// The lectures' closed forms beside the detailed prediction: (6N + attention) x tokens FLOPs
// (4N + 6m with adapters), bytes per parameter x N, Korthikanti's activations. Absent in reports
// written before them.
struct ClosedForm {
    double model_flops_per_step = 0, model_state_bytes = 0, bytes_per_param = 0, activations = 0;
    bool operator==(const ClosedForm&) const = default;
};

// One op's predicted time per step (the performance model, estimator/perf_model.h), named as
// the profile's op rows are ("attn.qkv backward").
struct PredictedOpTime {
    std::string name, bucket;  // bucket: "gemm", "attention", "memory_bound", ...
    double calls_per_step = 0, seconds_per_step = 0;
    bool operator==(const PredictedOpTime&) const = default;
};

// The performance model's step for this run ("predicted.time"): its device profile, the step's
// seconds, tokens/s and MFU (against the measurement's peak), where the time goes and each op.
// Added in schema version 2; absent from version 1, and from a GPU run on a device the hardware
// table lacks (no profile and no datasheet to predict from).
struct TimePrediction {
    std::string profile;
    double step_seconds = 0, tokens_per_s = 0, mfu = 0;
    std::map<std::string, double> seconds_by_bucket;
    double communication_seconds = 0, communication_exposed_seconds = 0;
    std::vector<PredictedOpTime> ops;
    std::vector<std::string> notes;
    bool operator==(const TimePrediction&) const = default;
};

// The estimator for exactly this run ("predicted").
struct Prediction {
    std::array<double, kPredictedCategoryCount> bytes{};  // by MemCategory
    double model_flops_per_step = 0;
    std::optional<double> hardware_flops_per_step;  // plus recomputation
    std::optional<ClosedForm> closed_form;
    std::optional<HostStateBytes<double>> host_memory;  // --offload optimizer
    std::optional<PagedPrediction> paged_optimizer;     // --paged-optimizer
    std::optional<TimePrediction> time;
    // The token batches (MemCategory::data); absent in reports written before it was predicted.
    std::optional<double> data;
    bool operator==(const Prediction&) const = default;
};

// cudaMemGetInfo on a GPU run: before the first step (context, libraries, model) and at peak.
struct DeviceMemory {
    std::uint64_t baseline_used_bytes = 0, peak_used_bytes = 0, total_bytes = 0;
    bool operator==(const DeviceMemory&) const = default;
};

// What the run measured ("measured").
struct Measurement {
    // The accounting allocator's peak by MemCategory; the six predicted ones always, the others
    // absent in reports written before them.
    std::array<std::optional<std::int64_t>, kMemCategoryCount> peak_bytes{};
    std::int64_t peak_total_bytes = 0;
    double peak_rss_bytes = 0;
    double seconds = 0, tokens_per_s = 0, model_flops_per_s = 0, mfu = 0;
    std::optional<double> hardware_flops_per_s, hfu;  // absent in the earliest reports
    // MFU's denominator and whence ("this CPU's sgemm, measured at start" or a GPU datasheet's
    // dense rate); absent in reports written before the CUDA engine, which have only
    // sgemm_peak_flops_per_s. CPU runs write both.
    std::optional<double> peak_flops_per_s;
    std::optional<std::string> peak_source;
    std::optional<double> sgemm_peak_flops_per_s;
    std::optional<HostStateBytes<std::int64_t>> host_peak_bytes;  // --offload optimizer
    std::optional<DeviceMemory> device_memory;                    // GPU runs
    std::optional<PagedMeasurement> paged_optimizer;              // --paged-optimizer
    bool operator==(const Measurement&) const = default;

    // peak_flops_per_s, or sgemm_peak_flops_per_s in reports that have only it; 0 with neither.
    double mfu_peak_flops_per_s() const;
};

// One rank's traffic in one step (data-parallel runs): the parameter and gradient
// collectives ("state", what the estimator predicts) and everything, the scalars included.
struct StepTraffic {
    std::uint64_t state_sent_bytes = 0, state_received_bytes = 0, sent_bytes = 0,
                  received_bytes = 0;
    std::optional<double> seconds;  // inside collectives; absent before napkin timed them
    bool operator==(const StepTraffic&) const = default;
};

// One entry of "steps".
struct StepReport {
    int step = 0;  // 0-based
    double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1;
    bool skipped = false;  // fp16 overflow: the update was dropped
    double seconds = 0;    // host wall time, the device's work waited for
    double tokens_per_s = 0, mfu = 0, hfu = 0;
    std::optional<double> device_seconds;  // GPU runs: the step on the engine's stream
    std::optional<StepTraffic> comm;       // data-parallel runs: comm_* in the file
    bool operator==(const StepReport&) const = default;
};

// --profile: the profiled steps' time ("profile"; profiler/step_profile.h folds it).
struct ProfileStepTime {
    std::string name;  // "step 3"
    double seconds = 0, op_seconds = 0, op_coverage = 0, kernel_seconds = 0, roofline_seconds = 0;
    bool operator==(const ProfileStepTime&) const = default;
};

// One op (summed over layers) or kernel, per profiled step.
struct ProfileRow {
    std::string name, category;
    double calls_per_step = 0, seconds_per_step = 0, roofline_seconds_per_step = 0,
           flops_per_step = 0, bytes_per_step = 0, achieved_flops_per_s = 0,
           achieved_bytes_per_s = 0, share_of_step = 0;
    // Ops only: the device records they launched (absent in reports written before them).
    std::optional<double> device_records_per_step, device_seconds_per_step, device_flops_per_s;
    bool operator==(const ProfileRow&) const = default;
};

// CUPTI's collection on a GPU run (profiler/cupti_collector.h summary()), or why it could not
// start.
struct GpuActivitySummary {
    std::optional<std::string> error;  // set: nothing else is
    std::uint64_t records = 0, kernels = 0, tagged = 0, dropped_records = 0, buffers_refused = 0,
                  cupti_failures = 0, unmatched_flows = 0;
    bool operator==(const GpuActivitySummary&) const = default;
};

struct ProfileReport {
    std::uint64_t steps_profiled = 0;
    struct Roofline {  // what the rows' predictions divide by
        double peak_flops_per_s = 0, peak_bytes_per_s = 0;
        bool operator==(const Roofline&) const = default;
    } roofline;
    std::vector<ProfileStepTime> steps;
    std::vector<ProfileRow> ops, kernels;  // by descending time
    std::optional<GpuActivitySummary> gpu_activity;
    bool operator==(const ProfileReport&) const = default;
};

// One collective's calls and bytes over the run ("measured_total.by_op.<collective>").
struct CollectiveTotals {
    std::uint64_t calls = 0, sent_bytes = 0, received_bytes = 0;
    std::uint64_t state_calls = 0, state_sent_bytes = 0, state_received_bytes = 0;
    bool operator==(const CollectiveTotals&) const = default;
};

// One line of the estimator's traffic per step ("predicted_per_step.collectives[]").
struct PredictedCollective {
    std::string what, op, dtype;  // "gradients", "reduce_scatter", "f32"
    double calls = 0, elements = 0, sent_bytes = 0, received_bytes = 0;
    bool operator==(const PredictedCollective&) const = default;
};

// Data parallelism ("communication"; absent for one process): this rank, and its traffic
// measured and predicted. docs/ZERO.md.
struct CommunicationReport {
    std::string backend;
    std::string host;  // absent in reports written before it: ""
    // The run clock's zero on the steady clock, which ranks on one host share (napkin export
    // lines their traces up by it); absent in reports written before it.
    std::optional<std::int64_t> clock_origin_ns;
    int rank = 0, local_rank = 0, world = 1, zero = 0;
    // The last step's ("state": the parameter and gradient collectives); every step moves the
    // same bytes, and the smallest and largest show that they agree.
    struct PerStep {
        std::uint64_t state_sent_bytes = 0, state_received_bytes = 0, state_sent_bytes_min = 0,
                      state_sent_bytes_max = 0, sent_bytes = 0, received_bytes = 0;
        bool operator==(const PerStep&) const = default;
    } measured_per_step;
    struct Total {
        std::map<std::string, CollectiveTotals> by_op;  // by collective name
        std::uint64_t sent_bytes = 0, received_bytes = 0;
        double seconds = 0;
        bool operator==(const Total&) const = default;
    } measured_total;
    struct Predicted {
        double sent_bytes = 0, received_bytes = 0, paper_volume_elements = 0, padding_elements = 0;
        std::vector<PredictedCollective> collectives;
        bool operator==(const Predicted&) const = default;
    } predicted_per_step;
    bool operator==(const CommunicationReport&) const = default;
};

// napkin train --detect-anomaly: the first non-finite value, where it appeared ("anomaly"; absent
// when none was found, and in reports written before the flag). core/engine/anomaly.h finds it;
// docs/ANOMALY.md. A run stopped by it keeps the steps done before (possibly none).
struct AnomalyReport {
    int step = 0;              // 0-based, as "steps"
    int micro_batch = 0;       // within the step
    std::string op;            // the op plan's name: "attn.proj", "embedding", "lm_head+loss"
    std::optional<int> layer;  // the block; absent outside the blocks
    std::string direction;     // "forward" or "backward"
    std::string tensor;        // "attn.qkv.out", "d attn.out", "d attn.proj.weight"
    std::vector<std::int64_t> shape;
    std::uint64_t nan = 0, inf = 0;  // its bad elements
    // The largest finite magnitude over the op's inputs (activations, weights, incoming
    // gradient); absent when it could not be measured.
    std::optional<double> input_max_finite;
    // The first of the op's inputs that was already non-finite (a NaN weight); absent when all
    // were finite.
    struct BadInput {
        std::string tensor;
        std::vector<std::int64_t> shape;
        std::uint64_t nan = 0, inf = 0;
        bool operator==(const BadInput&) const = default;
    };
    std::optional<BadInput> bad_input;
    bool operator==(const AnomalyReport&) const = default;
};
// napkin train stopped because a step's gradients were not finite, outside fp16-amp (whose loss
// scaler skips such steps): "diverged"; absent when no step's were. "steps" holds the steps
// before it (possibly none); the step itself made no update.
struct DivergedReport {
    int step = 0;  // 0-based, as "steps"
    bool operator==(const DivergedReport&) const = default;
};
struct RunReport {
    std::string schema = std::string(kReportSchema);  // as read, and written back so
    ModelConfig model;
    RunOptions run;
    std::optional<InitReport> init;  // null without --init-from
    Prediction predicted;
    Measurement measured;
    std::vector<StepReport> steps;                     // at least one, but after an anomaly
    std::optional<ProfileReport> profile;              // null unless profiled
    std::optional<CommunicationReport> communication;  // data-parallel runs
    std::optional<AnomalyReport> anomaly;              // --detect-anomaly found one
    std::optional<DivergedReport> diverged;            // gradients not finite: stopped
    bool operator==(const RunReport& o) const;  // the model by its JSON (ModelConfig has no ==)
};

void to_json(nlohmann::json& j, const RunReport& r);
void to_json(nlohmann::json& j, const ProfileReport& p);
void to_json(nlohmann::json& j, const GpuActivitySummary& g);
// InputError naming the field (and the schema when it is not one this napkin reads).
void from_json(const nlohmann::json& j, RunReport& r);
void from_json(const nlohmann::json& j, GpuActivitySummary& g);

// The file's text: to_json, two-space indented, keys sorted, a final newline.
std::string run_report_text(const RunReport& r);

// report.json is about eight levels deep; anything far deeper is not one, and is refused before
// it costs a deep recursion.
inline constexpr int kMaxReportDepth = 64;

// Parses JSON text. InputError "not valid JSON (line 3, column 5: ...)", or "JSON nested deeper
// than N levels" past max_depth.
nlohmann::json parse_json_text(std::string_view text);
nlohmann::json parse_json_text(std::string_view text, int max_depth);

// Parses and reads report.json's text: InputError on malformed JSON, a schema this napkin does
// not read, or a missing or mistyped field. The caller puts the file's name in front
// (profiler/run_folder.h read_run_report).
RunReport parse_run_report(std::string_view text);

}  // namespace napkin::profiler
