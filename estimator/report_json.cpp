// The --json document of an estimate: one object, its keys documented in docs/ESTIMATOR.md,
// "JSON output" (schema napkin-estimate/1).
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/config_json.h"
#include "core/dtype.h"
#include "estimator/report.h"

namespace napkin {

namespace {

constexpr double kSecondsPerDay = 86400.0;

nlohmann::json null_if_zero(double v, bool known) {
    return known ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json communication_json(const CommunicationEstimate& c, const ReportContext& ctx) {
    using nlohmann::json;
    json lines = json::array();
    for (const CommLine& l : c.lines) {
        lines.push_back(traffic_line_json(l.what, enum_name(kCollectiveNames, l.op), l.dtype,
                                          l.calls, l.elements, l.sent_bytes, l.received_bytes));
    }
    const bool timed = c.link_bytes_per_s > 0;
    return json{{"world", c.world},
                {"zero", c.zero},
                {"psi", c.psi},
                {"padding_elements", c.padding},
                {"paper_volume_elements", c.paper_volume_elements},
                {"collectives", lines},
                {"elements", c.elements},
                {"sent_bytes", c.sent_bytes},
                {"received_bytes", c.received_bytes},
                {"link", !c.link.empty()    ? json(c.link)
                         : ctx.link.empty() ? json(nullptr)
                                            : json(ctx.link)},
                {"link_bytes_per_s", null_if_zero(c.link_bytes_per_s, timed)},
                {"seconds", null_if_zero(c.seconds, timed)}};
}

// What the estimate was asked: the model, the run, the recipe, the hardware.
nlohmann::json inputs_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    using nlohmann::json;
    json inputs;
    if (in.params_only) {
        inputs["model"] = json{{"params", in.params}};
    } else {
        inputs["model"] = model_config_to_json(in.model);
    }
    inputs["model_source"] = ctx.model_source;
    inputs["seq_len"] = e.seq_len;
    inputs["micro_batch"] = in.micro_batch;
    inputs["grad_accum"] = in.grad_accum;
    inputs["tokens"] = e.tokens > 0 ? json(e.tokens) : json(nullptr);
    inputs["precision"] = enum_name(kPrecisionNames, in.precision);
    inputs["optimizer"] = enum_name(kOptimizerNames, in.optimizer);
    inputs["grads_fp32"] = in.grads_fp32;
    // fp8-amp's delayed scaling history length (0: current scaling); null for other recipes.
    inputs["fp8_amax_history"] =
        in.precision == Precision::fp8_amp ? json(in.fp8_amax_history) : json(nullptr);
    inputs["optimizer_fp32"] = in.optimizer_fp32;
    inputs["checkpointing"] = enum_name(kCheckpointingNames, in.checkpointing);
    inputs["attention"] = enum_name(kAttentionNames, in.attention);
    inputs["attention_flops"] = in.causal_attention_flops ? "causal" : "full";
    inputs["gpus"] = in.gpus;
    inputs["tp"] = in.tp;
    inputs["pp"] = in.pp;
    inputs["vpp"] = in.vpp;
    inputs["sequence_parallel"] = in.sequence_parallel;
    inputs["zero"] = in.zero;
    inputs["offload"] = enum_name(kOffloadNames, in.offload);
    inputs["finetune"] = enum_name(kFinetuneNames, in.finetune);
    inputs["lora_rank"] = in.finetune == Finetune::full ? json(nullptr) : json(in.lora_rank);
    inputs["gpu"] = ctx.gpu;
    inputs["peak_flops_per_s"] = in.peak_flops_per_s;
    inputs["gpu_memory_bytes"] = in.gpu_memory_bytes;
    inputs["cpu_memory_bytes"] = in.cpu_memory_bytes;
    inputs["mfu"] = in.mfu;
    inputs["ignore_activations"] = in.ignore_activations;
    return inputs;
}

// Memory per GPU by category (temporaries itemized), and the host's for offloaded states.
nlohmann::json memory_json(const Estimate& e) {
    using nlohmann::json;
    json gpu = memory_bytes_json(e.gpu);
    gpu["capacity"] = e.gpu_capacity_bytes;
    gpu["fits"] = e.fits_gpu;
    const auto& t = e.temporaries;
    gpu["temporaries_detail"] = {{"activation_grads", t.activation_grads},
                                 {"op_workspace", t.op_workspace},
                                 {"attention_workspace", t.attention_workspace},
                                 {"param_gather", t.param_gather},
                                 {"dequant", t.dequant},
                                 {"fp8_cast", t.fp8_cast},
                                 {"fp8_history", t.fp8_history},
                                 {"gemm_workspace", t.gemm_workspace},
                                 {"grad_norm_workspace", t.grad_norm_workspace},
                                 {"anomaly_slots", t.anomaly_slots}};
    json cpu = memory_bytes_json(e.cpu);
    cpu["node_total"] = e.cpu_node_bytes;
    cpu["capacity"] = e.cpu_capacity_bytes;
    cpu["fits"] = e.fits_cpu;
    json out = {{"unit", "bytes"}, {"gpu", gpu}, {"cpu", cpu}};
    if (const auto& p = e.paged) {  // --paged-optimizer only: other estimates' JSON is unchanged
        out["paged_optimizer"] = {{"state", p->state_bytes},
                                  {"step_peak", p->step_peak_bytes},
                                  {"device_peak", p->device_peak_bytes},
                                  {"traffic_per_step", p->traffic_bytes_per_step},
                                  {"to_device_bytes_per_s", p->to_device_bytes_per_s},
                                  {"to_host_bytes_per_s", p->to_host_bytes_per_s},
                                  {"link_assumed", p->link_assumed},
                                  {"traffic_seconds_per_step", p->traffic_seconds_per_step}};
    }
    return out;
}

// FLOPs per token, per step (all GPUs) and per run (null without a run length).
nlohmann::json flops_json(const Estimate& e) {
    using nlohmann::json;
    const bool run = e.tokens > 0;
    return {
        {"per_token",
         {{"six_n", e.flops_6n_per_token},
          {"six_n_non_embedding", null_if_zero(e.flops_6n_non_embedding_per_token,
                                               e.flops_6n_non_embedding_per_token > 0)},
          {"adapters_4n_6m",
           null_if_zero(e.flops_adapters_per_token, e.flops_adapters_per_token > 0)},
          {"matmul", e.flops_matmul_per_token},
          {"attention", e.flops_attention_per_token},
          {"model", e.model_flops_per_token},
          {"hardware", e.hardware_flops_per_token},
          {"other", e.other_flops_per_token}}},
        {"per_step",
         {{"tokens", e.tokens_per_step},
          {"model", e.model_flops_per_step},
          {"hardware", e.hardware_flops_per_step}}},
        {"run",
         {{"tokens", null_if_zero(e.tokens, run)},
          {"six_nd", null_if_zero(e.run_flops_6nd, run)},
          {"model", null_if_zero(e.run_model_flops, run)},
          {"steps", null_if_zero(e.steps, run)}}},
    };
}

// The step and the run at the assumed MFU or as the performance model predicts them, or, when a
// throughput was measured, at the measured rate ("basis"): the MFU and HFU it means and the times
// it gives. `model`: the prediction op by op (report_time.cpp).
nlohmann::json time_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    using nlohmann::json;
    const bool timed = e.peak_flops_per_s > 0 || e.time_predicted, run = e.tokens > 0;
    const bool measured = in.measured_tokens_per_s > 0;
    const double step = measured ? e.measured_step_seconds : e.step_seconds;
    const double run_s = measured ? e.measured_run_seconds : e.run_seconds;
    const bool known = timed || measured;
    const json mfu = measured           ? null_if_zero(e.measured_mfu, e.peak_flops_per_s > 0)
                     : e.time_predicted ? null_if_zero(e.mfu, e.mfu > 0)
                                        : json(in.mfu);
    json t = {{"basis", measured           ? "measured"
                        : e.time_predicted ? "predicted"
                                           : "assumed"},
              {"peak_flops_per_s", null_if_zero(e.peak_flops_per_s, e.peak_flops_per_s > 0)},
              {"mfu", mfu},
              {"hfu", null_if_zero(measured ? e.measured_hfu : e.hfu, e.peak_flops_per_s > 0)},
              {"step_seconds", null_if_zero(step, known)},
              {"run_seconds", null_if_zero(run_s, known && run)},
              {"run_days", null_if_zero(run_s / kSecondsPerDay, known && run)}};
    if (e.parallel.layout.pp > 1) {
        t["bubble_fraction"] = e.parallel.bubble_fraction;
        t["bubble_seconds"] = null_if_zero(e.parallel.bubble_seconds, timed && !measured);
    }
    add_time_model_json(e, ctx, t);
    return t;
}

nlohmann::json measured_json(const EstimateInputs& in, const Estimate& e) {
    using nlohmann::json;
    if (in.measured_tokens_per_s <= 0) return nullptr;
    const bool timed = e.peak_flops_per_s > 0, run = e.tokens > 0;
    return {{"tokens_per_s", in.measured_tokens_per_s},
            {"mfu", null_if_zero(e.measured_mfu, timed)},
            {"hfu", null_if_zero(e.measured_hfu, timed)},
            {"step_seconds", e.measured_step_seconds},
            {"run_seconds", null_if_zero(e.measured_run_seconds, run)},
            {"run_days", null_if_zero(e.measured_run_seconds / kSecondsPerDay, run)}};
}

}  // namespace

nlohmann::json memory_bytes_json(const MemoryBytes& m) {
    return {{"weights", m.weights},
            {"master", m.master},
            {"grads", m.grads},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"temporaries", m.temporaries},
            {"data", m.data},
            {"model_states", m.model_states()},
            {"total", m.total()}};
}

nlohmann::json traffic_line_json(const std::string& what, std::string_view op, DType dtype,
                                 double calls, double elements, double sent_bytes,
                                 double received_bytes) {
    return {{"what", what},
            {"op", op},
            {"dtype", dtype_name(dtype)},
            {"calls", calls},
            {"elements", elements},
            {"sent_bytes", sent_bytes},
            {"received_bytes", received_bytes}};
}

void integers_as_integers(nlohmann::json& doc) {
    if (doc.is_structured()) {
        for (auto& v : doc)
            integers_as_integers(v);
    } else if (doc.is_number_float()) {
        const double v = doc.get<double>();
        if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
            doc = static_cast<std::int64_t>(v);
    }
}

nlohmann::json to_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    using nlohmann::json;
    json j;
    j["schema"] = "napkin-estimate/1";
    j["inputs"] = inputs_json(in, e, ctx);

    j["params"] = {
        {"total", e.total_params},
        {"embedding", in.params_only ? json(nullptr)
                                     : json(e.params.token_embedding + e.params.position_embedding +
                                            e.params.head)},
        {"non_embedding", in.params_only ? json(nullptr) : json(e.params.non_embedding)},
        {"matmul", in.params_only ? json(nullptr) : json(e.params.matmul)},
        {"allocated", in.params_only ? json(nullptr) : json(e.params.allocated)},
        {"trainable", e.trainable_params},
        {"frozen", e.frozen_params},
        {"lora", e.lora_params},
        {"total_with_adapters", e.total_params + e.lora_params},
    };
    const auto& b = e.bytes_per_param;
    j["bytes_per_param"] = {{"weights", b.weights},
                            {"master", b.master},
                            {"grads", b.grads},
                            {"optimizer", b.optimizer},
                            {"total", b.total()}};
    j["memory"] = memory_json(e);
    j["activations"] = {{"closed_form", e.act_closed_form_bytes},
                        {"closed_form_layer", e.act_closed_form_layer_bytes},
                        {"detailed_peak", e.act_detailed_bytes},
                        {"detailed_kept", e.act_detailed_kept_bytes},
                        {"detailed_layer", e.act_detailed_layer_bytes}};
    j["flops"] = flops_json(e);
    j["time"] = time_json(in, e, ctx);
    j["measured"] = measured_json(in, e);
    if (ctx.solved != nullptr) {
        j["solve"] = {{"kind", ctx.solve},
                      {"value", ctx.solved->value},
                      {"evaluations", ctx.solved->evaluations},
                      {"at_limit", ctx.solved->at_limit}};
        if (ctx.solve == "min-tp-pp") {
            j["solve"]["tp"] = ctx.solved->tp;
            j["solve"]["pp"] = ctx.solved->pp;
        }
        if (ctx.solve == "fastest" || ctx.solve == "fastest-layout")
            j["solve"]["candidates"] = fastest_json(*ctx.solved, ctx.solve == "fastest-layout");
    }
    j["communication"] = communication_json(e.comm, ctx);
    j["parallelism"] = parallel_json(in, e);
    j["fits"] = e.fits();
    auto notes = note_texts(in, e);
    notes.insert(notes.end(), ctx.flag_notes.begin(), ctx.flag_notes.end());
    j["notes"] = notes;
    integers_as_integers(j);
    return j;
}

}  // namespace napkin
