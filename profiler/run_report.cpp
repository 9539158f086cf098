// report.json's writer: to_json of each part, in the file's names (profiler/run_report.h).
#include "profiler/run_report.h"

#include <nlohmann/json.hpp>
#include <tuple>

#include "core/config_json.h"

namespace napkin::profiler {

namespace {

using json = nlohmann::json;

// An optional written as null when unset (the key is always there).
template <class T>
json or_null(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

// An optional written only when set.
template <class T>
void put(json& j, const char* key, const std::optional<T>& v) {
    if (v) j[key] = *v;
}

std::string category_name(std::size_t c) {
    return std::string(enum_name(kMemCategoryNames, static_cast<MemCategory>(c)));
}

}  // namespace

template <class Bytes>
void to_json(json& j, const HostStateBytes<Bytes>& h) {
    j = {{"master_weights", h.master_weights},
         {"gradients", h.gradients},
         {"optimizer_state", h.optimizer_state}};
}

void to_json(json& j, const PagedPrediction& p) {
    j = {{"state_bytes", p.state_bytes},
         {"device_peak_bytes", p.device_peak_bytes},
         {"traffic_bytes_per_step", p.traffic_bytes_per_step},
         {"traffic_seconds_per_step", p.traffic_seconds_per_step},
         {"link_assumed", p.link_assumed}};
}

void to_json(json& j, const PagedMeasurement& m) {
    j = {{"state_bytes", m.state_bytes},
         {"to_device_bytes_per_step", m.to_device_bytes_per_step},
         {"to_host_bytes_per_step", m.to_host_bytes_per_step},
         {"traffic_seconds_per_step", m.traffic_seconds_per_step}};
}

void to_json(json& j, const RunOptions& o) {
    j = {{"steps", o.steps},
         {"micro_batch", o.micro_batch},
         {"seq_len", o.seq_len},
         {"grad_accum", o.grad_accum},
         {"precision", o.precision},
         {"optimizer", o.optimizer},
         {"checkpointing", o.checkpointing},
         {"attention", o.attention},
         {"finetune", o.finetune},
         {"lora_rank", or_null(o.lora_rank)},
         {"lora_alpha", or_null(o.lora_alpha)},
         {"lr", o.lr},
         {"seed", o.seed},
         {"first_step", o.first_step},
         {"checkpoint", o.checkpoint},
         {"data", o.data},
         {"device", o.device}};
    put(j, "data_entropy_nats", o.data_entropy_nats);
    put(j, "offload", o.offload);
    put(j, "fp8_amax_history", o.fp8_amax_history);
    put(j, "loss_chunk", o.loss_chunk);
    put(j, "cuda_graph", o.cuda_graph);
    put(j, "cuda_graph_off", o.cuda_graph_off);
    put(j, "attention_candidates", o.attention_candidates);
}

void to_json(json& j, const InitReport& i) {
    j = {{"path", i.path},
         {"format", i.format},
         {"strategy", i.strategy},
         {"tensors", i.tensors},
         {"bytes_read", i.bytes_read},
         {"seconds", i.seconds},
         {"peak_rss_increase_bytes", i.peak_rss_increase_bytes},
         {"peak_rss_reset", i.peak_rss_reset}};
}

void to_json(json& j, const ClosedForm& c) {
    j = {{"model_flops_per_step", c.model_flops_per_step},
         {"model_state_bytes", c.model_state_bytes},
         {"bytes_per_param", c.bytes_per_param},
         {"activations", c.activations}};
}

void to_json(json& j, const TimePrediction& t) {
    json ops = json::array();
    for (const PredictedOpTime& o : t.ops) {
        ops.push_back({{"name", o.name},
                       {"bucket", o.bucket},
                       {"calls_per_step", o.calls_per_step},
                       {"seconds_per_step", o.seconds_per_step}});
    }
    j = {{"profile", t.profile},
         {"step_seconds", t.step_seconds},
         {"tokens_per_s", t.tokens_per_s},
         {"mfu", t.mfu},
         {"seconds_by_bucket", t.seconds_by_bucket},
         {"communication_seconds", t.communication_seconds},
         {"communication_exposed_seconds", t.communication_exposed_seconds},
         {"ops", ops},
         {"notes", t.notes}};
}

void to_json(json& j, const Prediction& p) {
    j = json::object();
    for (std::size_t c = 0; c < kPredictedCategoryCount; ++c)
        j[category_name(c)] = p.bytes[c];
    put(j, "data", p.data);
    j["model_flops_per_step"] = p.model_flops_per_step;
    put(j, "hardware_flops_per_step", p.hardware_flops_per_step);
    put(j, "closed_form", p.closed_form);
    put(j, "host_memory", p.host_memory);
    put(j, "paged_optimizer", p.paged_optimizer);
    put(j, "time", p.time);
}

void to_json(json& j, const DeviceMemory& d) {
    j = {{"baseline_used_bytes", d.baseline_used_bytes},
         {"peak_used_bytes", d.peak_used_bytes},
         {"total_bytes", d.total_bytes}};
}

void to_json(json& j, const Measurement& m) {
    json peaks = json::object();
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        if (m.peak_bytes[c]) peaks[category_name(c)] = *m.peak_bytes[c];
    }
    j = {{"peak_bytes", peaks},
         {"peak_total_bytes", m.peak_total_bytes},
         {"peak_rss_bytes", m.peak_rss_bytes},
         {"seconds", m.seconds},
         {"tokens_per_s", m.tokens_per_s},
         {"model_flops_per_s", m.model_flops_per_s},
         {"mfu", m.mfu}};
    put(j, "hardware_flops_per_s", m.hardware_flops_per_s);
    put(j, "hfu", m.hfu);
    put(j, "peak_flops_per_s", m.peak_flops_per_s);
    put(j, "peak_source", m.peak_source);
    put(j, "sgemm_peak_flops_per_s", m.sgemm_peak_flops_per_s);
    put(j, "host_peak_bytes", m.host_peak_bytes);
    put(j, "device_memory", m.device_memory);
    put(j, "paged_optimizer", m.paged_optimizer);
}

void to_json(json& j, const StepReport& s) {
    j = {{"step", s.step},
         {"loss", s.loss},
         {"lr", s.lr},
         {"grad_norm", s.grad_norm},
         {"loss_scale", s.loss_scale},
         {"skipped", s.skipped},
         {"seconds", s.seconds},
         {"tokens_per_s", s.tokens_per_s},
         {"mfu", s.mfu},
         {"hfu", s.hfu}};
    put(j, "device_seconds", s.device_seconds);
    if (s.comm) {
        j["comm_state_sent_bytes"] = s.comm->state_sent_bytes;
        j["comm_state_received_bytes"] = s.comm->state_received_bytes;
        j["comm_sent_bytes"] = s.comm->sent_bytes;
        j["comm_received_bytes"] = s.comm->received_bytes;
        put(j, "comm_seconds", s.comm->seconds);
    }
}

void to_json(json& j, const ProfileStepTime& s) {
    j = {{"name", s.name},
         {"seconds", s.seconds},
         {"op_seconds", s.op_seconds},
         {"op_coverage", s.op_coverage},
         {"kernel_seconds", s.kernel_seconds},
         {"roofline_seconds", s.roofline_seconds}};
}

void to_json(json& j, const ProfileRow& r) {
    j = {{"name", r.name},
         {"category", r.category},
         {"calls_per_step", r.calls_per_step},
         {"seconds_per_step", r.seconds_per_step},
         {"roofline_seconds_per_step", r.roofline_seconds_per_step},
         {"flops_per_step", r.flops_per_step},
         {"bytes_per_step", r.bytes_per_step},
         {"achieved_flops_per_s", r.achieved_flops_per_s},
         {"achieved_bytes_per_s", r.achieved_bytes_per_s},
         {"share_of_step", r.share_of_step}};
    put(j, "device_records_per_step", r.device_records_per_step);
    put(j, "device_seconds_per_step", r.device_seconds_per_step);
    put(j, "device_flops_per_s", r.device_flops_per_s);
}

void to_json(json& j, const GpuActivitySummary& g) {
    if (g.error) {
        j = {{"error", *g.error}};
        return;
    }
    j = {{"records", g.records},
         {"kernels", g.kernels},
         {"tagged", g.tagged},
         {"dropped_records", g.dropped_records},
         {"buffers_refused", g.buffers_refused},
         {"cupti_failures", g.cupti_failures},
         {"unmatched_flows", g.unmatched_flows}};
}

void to_json(json& j, const ProfileReport& p) {
    j = {{"steps_profiled", p.steps_profiled},
         {"roofline",
          {{"peak_flops_per_s", p.roofline.peak_flops_per_s},
           {"peak_bytes_per_s", p.roofline.peak_bytes_per_s}}},
         {"steps", p.steps},
         {"ops", p.ops},
         {"kernels", p.kernels}};
    put(j, "gpu_activity", p.gpu_activity);
}

void to_json(json& j, const CollectiveTotals& c) {
    j = {{"calls", c.calls},
         {"sent_bytes", c.sent_bytes},
         {"received_bytes", c.received_bytes},
         {"state_calls", c.state_calls},
         {"state_sent_bytes", c.state_sent_bytes},
         {"state_received_bytes", c.state_received_bytes}};
}

void to_json(json& j, const PredictedCollective& c) {
    j = {{"what", c.what},
         {"op", c.op},
         {"dtype", c.dtype},
         {"calls", c.calls},
         {"elements", c.elements},
         {"sent_bytes", c.sent_bytes},
         {"received_bytes", c.received_bytes}};
}

void to_json(json& j, const CommunicationReport& c) {
    const CommunicationReport::PerStep& m = c.measured_per_step;
    const CommunicationReport::Predicted& p = c.predicted_per_step;
    j = {{"backend", c.backend},
         {"host", c.host},
         {"rank", c.rank},
         {"local_rank", c.local_rank},
         {"world", c.world},
         {"zero", c.zero},
         {"measured_per_step",
          {{"state_sent_bytes", m.state_sent_bytes},
           {"state_received_bytes", m.state_received_bytes},
           {"state_sent_bytes_min", m.state_sent_bytes_min},
           {"state_sent_bytes_max", m.state_sent_bytes_max},
           {"sent_bytes", m.sent_bytes},
           {"received_bytes", m.received_bytes}}},
         {"measured_total",
          {{"by_op", c.measured_total.by_op},
           {"sent_bytes", c.measured_total.sent_bytes},
           {"received_bytes", c.measured_total.received_bytes},
           {"seconds", c.measured_total.seconds}}},
         {"predicted_per_step",
          {{"sent_bytes", p.sent_bytes},
           {"received_bytes", p.received_bytes},
           {"paper_volume_elements", p.paper_volume_elements},
           {"padding_elements", p.padding_elements},
           {"collectives", p.collectives}}}};
    put(j, "clock_origin_ns", c.clock_origin_ns);
}

void to_json(json& j, const AnomalyReport::BadInput& b) {
    j = {{"tensor", b.tensor}, {"shape", b.shape}, {"nan", b.nan}, {"inf", b.inf}};
}

void to_json(json& j, const AnomalyReport& a) {
    j = {{"step", a.step},
         {"micro_batch", a.micro_batch},
         {"op", a.op},
         {"layer", or_null(a.layer)},
         {"direction", a.direction},
         {"tensor", a.tensor},
         {"shape", a.shape},
         {"nan", a.nan},
         {"inf", a.inf},
         {"input_max_finite", or_null(a.input_max_finite)},
         {"bad_input", or_null(a.bad_input)}};
}

void to_json(json& j, const RunReport& r) {
    j = {{"schema", r.schema},
         {"model", model_config_to_json(r.model)},
         {"run", r.run},
         {"init", or_null(r.init)},
         {"predicted", r.predicted},
         {"measured", r.measured},
         {"steps", r.steps},
         {"profile", or_null(r.profile)}};
    put(j, "communication", r.communication);
    put(j, "anomaly", r.anomaly);
    if (r.diverged) j["diverged"] = {{"step", r.diverged->step}};
}

std::string run_report_text(const RunReport& r) {
    return json(r).dump(2) + "\n";
}

bool RunReport::operator==(const RunReport& o) const {
    return model_config_to_json(model) == model_config_to_json(o.model) &&
           std::tie(schema, run, init, predicted, measured, steps, profile, communication, anomaly,
                    diverged) == std::tie(o.schema, o.run, o.init, o.predicted, o.measured, o.steps,
                                          o.profile, o.communication, o.anomaly, o.diverged);
}

double Measurement::mfu_peak_flops_per_s() const {
    if (peak_flops_per_s) return *peak_flops_per_s;
    return sgemm_peak_flops_per_s.value_or(0.0);
}

}  // namespace napkin::profiler
