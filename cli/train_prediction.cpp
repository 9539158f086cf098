#include "cli/train_prediction.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "cli/flag_names.h"
#include "core/check.h"
#include "estimator/napkin_formulas.h"
#include "kernels/stream.h"

namespace napkin::cli {

EstimateInputs prediction_inputs(const TrainOptions& o, int world, bool on_gpu,
                                 double peak_flops_per_s) {
    EstimateInputs ei;
    ei.model = o.model;
    ei.seq_len = o.plan.seq_len;
    ei.micro_batch = o.plan.micro_batch;
    ei.grad_accum = o.grad_accum;
    // D feeds only the run totals, which report.json leaves out: held inside the estimator's limit.
    ei.tokens = std::min(
        kMaxTokens, static_cast<double>(o.steps) * static_cast<double>(o.plan.micro_batch) *
                        static_cast<double>(o.plan.seq_len) * static_cast<double>(o.grad_accum));
    ei.precision = o.plan.precision;
    ei.optimizer = o.plan.optimizer;
    ei.checkpointing = o.plan.checkpointing;
    ei.attention = o.plan.attention;
    ei.loss_chunk_rows = o.plan.loss_chunk_rows;
    ei.detect_anomaly = o.plan.detect_anomaly;
    ei.gemm_epilogues = o.plan.gemm_epilogues;
    ei.fp8_amax_history = o.plan.fp8_amax_history;
    ei.finetune = o.plan.finetune;
    if (o.plan.finetune != Finetune::full) ei.lora_rank = o.plan.lora_rank;
    ei.gpus = world;
    ei.zero = o.zero;
    ei.offload = o.offload_optimizer ? Offload::optimizer : Offload::none;
    ei.paged_optimizer = o.paged_optimizer;
    ei.peak_flops_per_s = peak_flops_per_s;
    ei.gpu_memory_bytes = 1e15;
    ei.engine =
        on_gpu ? EstimateInputs::Engine::cuda : EstimateInputs::Engine::cpu;  // whose scratch
    return ei;
}

profiler::Prediction prediction_report(const TrainOptions& o, const EstimateInputs& inputs,
                                       const Estimate& pred) {
    profiler::Prediction p;
    const double by_category[] = {
        pred.gpu.weights, pred.gpu.master, pred.gpu.grads, pred.gpu.optimizer, pred.gpu.activations,
        // ZeRO-3's gathered units are the engine's `communication` category (measured only,
        // beside the buckets), not its temporaries: the estimator's two units leave this
        // prediction for it.
        pred.gpu.temporaries - pred.temporaries.param_gather};
    std::copy(std::begin(by_category), std::end(by_category), p.bytes.begin());
    p.data = pred.gpu.data;
    p.model_flops_per_step = pred.model_flops_per_step;
    p.hardware_flops_per_step = pred.hardware_flops_per_step;
    // The lectures' closed forms beside the detailed numbers above: 6N + attention FLOPs per
    // token, bytes per parameter times N, Korthikanti's activations. With adapters: 4N + 6m
    // FLOPs, and the frozen N at its weight bytes (NF4's 4.127 bits under QLoRA) plus bytes per
    // parameter times the m adapters.
    const bool adapters = o.plan.finetune != Finetune::full;
    const double frozen_bytes_per_param = o.plan.finetune == Finetune::qlora
                                              ? formulas::kNf4BitsPerParam / 8.0
                                              : pred.bytes_per_param.weights;
    p.closed_form = profiler::ClosedForm{
        .model_flops_per_step =
            (adapters ? pred.flops_adapters_per_token : pred.flops_6n_per_token) *
                pred.tokens_per_step +
            pred.flops_attention_per_token * pred.tokens_per_step,
        // ZeRO paper, figure 1: sharded over the ranks by stage.
        .model_state_bytes =
            (adapters ? pred.frozen_params * frozen_bytes_per_param : 0.0) +
            formulas::zero_model_state_bytes(pred.bytes_per_param, pred.trainable_params,
                                             inputs.zero, inputs.gpus),
        .bytes_per_param = pred.bytes_per_param.total(),
        .activations = pred.act_closed_form_bytes};
    if (o.offload_optimizer) p.host_memory = {pred.cpu.master, pred.cpu.grads, pred.cpu.optimizer};
    if (const auto& g = pred.paged) {
        p.paged_optimizer = profiler::PagedPrediction{g->state_bytes, g->device_peak_bytes,
                                                      g->traffic_bytes_per_step,
                                                      g->traffic_seconds_per_step, g->link_assumed};
    }
    return p;
}

std::optional<ChosenProfile> time_profile(const std::string& file, bool force, Trainer& trainer,
                                          const MachinePeak& peak) {
    if (trainer.device() == nullptr) {
        return choose_profile(file, this_cpu(), force, "--device-profile", [&] {
            const double stream =
                peak.bytes_per_s > 0 ? peak.bytes_per_s : cpu::stream_copy_bandwidth();
            return cpu_roofline_profile(this_cpu(), peak.flops_per_s, stream,
                                        omp_get_max_threads());
        });
    }
    if (peak.gpu == nullptr) return std::nullopt;
    DeviceIdentity gpu = gpu_identity(*peak.gpu);
    gpu.name = trainer.device()->name();
    return choose_profile(file, gpu, force, "--device-profile",
                          [&] { return datasheet_profile(*peak.gpu); });
}

namespace {

profiler::TimePrediction time_prediction_report(const Estimate& pred,
                                                const ChosenProfile& profile) {
    profiler::TimePrediction t;
    t.profile = profile.origin;
    t.step_seconds = pred.step_seconds;
    t.tokens_per_s = pred.tokens_per_s;
    t.mfu = pred.mfu;
    const StepTime& st = pred.step_time;
    for (std::size_t b = 0; b < kTimeBucketCount; ++b)
        t.seconds_by_bucket[std::string(kTimeBucketNames[b].name)] = st.seconds[b];
    t.communication_seconds = st.comm_seconds;
    t.communication_exposed_seconds = st.comm_exposed_seconds;
    for (const OpTime& op : st.ops) {
        t.ops.push_back({op.name, std::string(enum_name(kTimeBucketNames, op.bucket)),
                         op.calls_per_step, op.seconds_per_step});
    }
    for (const std::string& note : st.notes)
        t.notes.push_back(with_flags(note));
    return t;
}

// The memory a new process can take without swapping: /proc/meminfo's MemAvailable (free memory
// plus the page cache and reclaimable slabs the kernel would give back), or the physical memory
// where the kernel has no such line. NAPKIN_TEST_AVAILABLE_BYTES replaces it, and a GPU's free
// memory (tests: a figure that does not depend on the machine; -1 when not set). 0: unknown.
double injected_available_bytes() {
    const char* v = std::getenv("NAPKIN_TEST_AVAILABLE_BYTES");
    return v != nullptr ? std::strtod(v, nullptr) : -1;
}

double available_memory_bytes() {
    if (const double injected = injected_available_bytes(); injected >= 0) return injected;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    double kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
        if (key == "MemAvailable:") return kib * 1024;
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_bytes <= 0) return 0;
    return static_cast<double>(pages) * static_cast<double>(page_bytes);
}

// The estimator's predicted peak per process (per GPU when `on_gpu`) for this run; none for
// options it refuses, which the engine then names in its own words.
std::optional<double> predicted_peak_bytes(const TrainOptions& o, int world, bool on_gpu) {
    try {
        return Estimator{}.run(prediction_inputs(o, world, on_gpu, 0)).gpu.total();
    } catch (const UsageError&) {
        return std::nullopt;
    }
}

}  // namespace

std::optional<profiler::TimePrediction> predict_run_time(const TrainOptions& o, EstimateInputs ei,
                                                         const std::optional<ChosenProfile>& given,
                                                         Trainer& trainer,
                                                         const MachinePeak& peak) {
    const std::optional<ChosenProfile> profile =
        given ? given : time_profile("", false, trainer, peak);
    if (!profile) return std::nullopt;
    ei.mfu = 0;
    ei.profile = &profile->profile;
    ei.threads = profile->profile.device.kind == DeviceKind::cpu ? omp_get_max_threads() : 0;
    ei.overlap = o.overlap && ei.gpus > 1 ? Overlap::on : Overlap::off;
    return time_prediction_report(Estimator{}.run(ei), *profile);
}

void check_host_memory(const TrainOptions& o, int world, int node_ranks) {
    if (o.device != DeviceKind::cpu) return;
    const double available = available_memory_bytes();
    if (available <= 0) return;
    const std::optional<double> peak = predicted_peak_bytes(o, world, false);
    if (!peak) return;
    const double need = *peak * std::max(1, node_ranks);
    // What the prediction does not count: the process itself (libraries, the data's pages, the
    // allocator's slack) and the prediction's own error, a few percent.
    const double margin = 0.1 * need + kHostMemoryMarginBytes * std::max(1, node_ranks);
    if (need + margin <= available) return;
    const std::string ranks =
        node_ranks > 1 ? ", " + std::to_string(node_ranks) + " ranks on this node" : "";
    char line[480];
    std::snprintf(line, sizeof line,
                  "the run needs %.3g GB by napkin's prediction (B=%lld, T=%lld%s) plus a margin "
                  "of %.3g GB (10%% and 0.5 GB a process), more than the %.3g GB of memory "
                  "available: lower --micro-batch or --seq-len (napkin estimate shows the "
                  "breakdown), or --force to try anyway",
                  need / 1e9, static_cast<long long>(o.plan.micro_batch),
                  static_cast<long long>(o.plan.seq_len), ranks.c_str(), margin / 1e9,
                  available / 1e9);
    throw UsageError(line);
}

void check_device_memory(const TrainOptions& o, int world, Trainer& trainer) {
    EngineDevice* device = trainer.device();
    if (device == nullptr) return;
    const EngineDevice::MemoryUse m = device->memory_use();
    const double injected = injected_available_bytes();
    const double free_bytes =
        injected >= 0 ? injected : static_cast<double>(m.total_bytes - m.used_bytes);
    const std::optional<double> peak = predicted_peak_bytes(o, world, true);
    if (!peak) return;
    const double need = *peak;
    // The model states are on the device already (in `used`); the first step adds the rest.
    const double allocated = static_cast<double>(trainer.allocator().current_total_bytes());
    const double rest = std::max(0.0, need - allocated);
    const double margin = 0.1 * need + kHostMemoryMarginBytes;  // cuBLAS, NCCL: not predicted
    if (rest + margin <= free_bytes) return;
    char line[560];
    std::snprintf(line, sizeof line,
                  "the run needs %.3g GB on the GPU by napkin's prediction (B=%lld, T=%lld), %.3g "
                  "GB of it allocated, plus a margin of %.3g GB (10%% and 0.5 GB), more than the "
                  "%.3g GB free on %s: lower --micro-batch or --seq-len, add --checkpointing full "
                  "or shard over more GPUs (--zero), or --force to try anyway",
                  need / 1e9, static_cast<long long>(o.plan.micro_batch),
                  static_cast<long long>(o.plan.seq_len), allocated / 1e9, margin / 1e9,
                  free_bytes / 1e9, device->name().c_str());
    throw UsageError(line);
}

std::string out_of_memory_hint(const TrainOptions& o, int world) {
    const bool gpu = o.device == DeviceKind::cuda;
    const std::optional<double> peak = predicted_peak_bytes(o, world, gpu);
    if (!peak) return "";  // options the estimator refuses: the error stands alone
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; the estimator predicts a peak of %.2f GB per %s for this run (napkin estimate "
                  "breaks it down): lower --micro-batch, add --checkpointing full%s",
                  *peak / 1e9, gpu ? "GPU" : "process",
                  gpu ? ", or shard the model states over more GPUs (--zero)" : "");
    return buf;
}

}  // namespace napkin::cli
