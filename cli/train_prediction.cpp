#include "cli/train_prediction.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>

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
    ei.finetune = o.plan.finetune;
    if (o.plan.finetune != Finetune::full) ei.lora_rank = o.plan.lora_rank;
    ei.gpus = world;
    ei.zero = o.zero;
    ei.offload = o.offload_optimizer ? Offload::optimizer : Offload::none;
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
    t.notes = st.notes;
    return t;
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
    const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_bytes <= 0) return;
    const double physical = static_cast<double>(pages) * static_cast<double>(page_bytes);
    double need = 0;
    try {
        need = Estimator{}.run(prediction_inputs(o, world, false, 0)).gpu.total() *
               std::max(1, node_ranks);
    } catch (const UsageError&) {
        return;  // options the engine refuses: the Trainer names them in its own words
    }
    if (need <= physical) return;
    const std::string ranks =
        node_ranks > 1 ? ", " + std::to_string(node_ranks) + " ranks on this node" : "";
    char line[320];
    std::snprintf(
        line, sizeof line,
        "the run needs %.3g GB by napkin's prediction (B=%lld, T=%lld%s), more than this machine's "
        "%.1f "
        "GB of memory: lower --micro-batch or --seq-len (napkin estimate shows the breakdown)",
        need / 1e9, static_cast<long long>(o.plan.micro_batch),
        static_cast<long long>(o.plan.seq_len), ranks.c_str(), physical / 1e9);
    throw UsageError(line);
}

std::string out_of_memory_hint(const TrainOptions& o, int world) {
    const bool gpu = o.device == DeviceKind::cuda;
    double peak = 0;
    try {
        peak = Estimator{}.run(prediction_inputs(o, world, gpu, 0)).gpu.total();
    } catch (const UsageError&) {
        return "";  // options the estimator refuses: the error stands alone
    }
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; the estimator predicts a peak of %.2f GB per %s for this run (napkin estimate "
                  "breaks it down): lower --micro-batch, add --checkpointing full%s",
                  peak / 1e9, gpu ? "GPU" : "process",
                  gpu ? ", or shard the model states over more GPUs (--zero)" : "");
    return buf;
}

}  // namespace napkin::cli
