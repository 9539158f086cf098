// report.json's one reader: from_json, with every field's type checked and named in the error,
// and the schema versions it reads (profiler/run_report.h).
#include "profiler/run_report.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/check.h"
#include "core/config_json.h"
#include "core/json_reader.h"

namespace napkin::profiler {

using json = nlohmann::json;

namespace {

std::string category_name(std::size_t c) {
    return std::string(enum_name(kMemCategoryNames, static_cast<MemCategory>(c)));
}

// A report's integers may have passed through a double (a tool that rewrites the file):
// 12.0 reads as 12, 12.5 is refused.
JsonSource report_source() {
    return JsonSource::raising<InputError>("", JsonSource::Integers::integral_values);
}

template <class Int>
Int integer(const JsonField& f) {
    return f.integer<Int>();
}
const auto number = &JsonField::number;
const auto text = &JsonField::string;

template <class Bytes>
HostStateBytes<Bytes> read_host_state(const JsonField& o) {
    auto get = [&](const char* key) {
        if constexpr (std::is_integral_v<Bytes>)
            return o[key].integer<Bytes>();
        else
            return o[key].number();
    };
    return {get("master_weights"), get("gradients"), get("optimizer_state")};
}

RunOptions read_run(const JsonField& o) {
    RunOptions r;
    r.steps = o["steps"].integer<int>();
    r.micro_batch = o["micro_batch"].integer<std::int64_t>();
    r.seq_len = o["seq_len"].integer<std::int64_t>();
    r.grad_accum = o["grad_accum"].integer<int>();
    r.precision = o["precision"].string();
    r.optimizer = o["optimizer"].string();
    r.checkpointing = o["checkpointing"].string();
    r.attention = o["attention"].string();
    r.finetune = o["finetune"].optional(text).value_or("full");
    // LoRA and QLoRA runs name their rank; a full fine-tune has none.
    r.lora_rank = r.finetune == "full" ? o["lora_rank"].optional(integer<std::int64_t>)
                                       : o["lora_rank"].integer<std::int64_t>();
    r.lora_alpha = o["lora_alpha"].optional(number);
    r.lr = o["lr"].number();
    r.seed = o["seed"].integer<std::uint64_t>();
    r.first_step = o["first_step"].integer<int>();
    r.checkpoint = o["checkpoint"].string();
    r.data = o["data"].string();
    r.device = o["device"].string();
    r.data_entropy_nats = o["data_entropy_nats"].optional(number);
    r.offload = o["offload"].optional(text);
    r.fp8_amax_history = o["fp8_amax_history"].optional(integer<std::int64_t>);
    r.loss_chunk = o["loss_chunk"].optional(integer<std::int64_t>);
    r.cuda_graph = o["cuda_graph"].optional(&JsonField::boolean);
    r.cuda_graph_off = o["cuda_graph_off"].optional(text);
    r.attention_candidates = o["attention_candidates"].optional(text);
    return r;
}

InitReport read_init(const JsonField& o) {
    return {o["path"].string(),
            o["format"].string(),
            o["strategy"].string(),
            o["tensors"].integer<std::int64_t>(),
            o["bytes_read"].integer<std::int64_t>(),
            o["seconds"].number(),
            o["peak_rss_increase_bytes"].integer<std::int64_t>(),
            o["peak_rss_reset"].boolean()};
}

TimePrediction read_time_prediction(const JsonField& o) {
    TimePrediction t;
    t.profile = o["profile"].string();
    t.step_seconds = o["step_seconds"].number();
    t.tokens_per_s = o["tokens_per_s"].number();
    t.mfu = o["mfu"].number();
    o["seconds_by_bucket"].members(
        [&](const std::string& key, const JsonField& v) { t.seconds_by_bucket[key] = v.number(); });
    t.communication_seconds = o["communication_seconds"].number();
    t.communication_exposed_seconds = o["communication_exposed_seconds"].number();
    t.ops = o["ops"].elements([](const JsonField& op) {
        return PredictedOpTime{op["name"].string(), op["bucket"].string(),
                               op["calls_per_step"].number(), op["seconds_per_step"].number()};
    });
    t.notes = o["notes"].elements(text);
    return t;
}

Prediction read_predicted(const JsonField& o) {
    Prediction p;
    for (std::size_t c = 0; c < kPredictedCategoryCount; ++c)
        p.bytes[c] = o[category_name(c)].number();
    p.data = o["data"].optional(number);
    p.model_flops_per_step = o["model_flops_per_step"].number();
    p.hardware_flops_per_step = o["hardware_flops_per_step"].optional(number);
    p.closed_form = o["closed_form"].optional([](const JsonField& c) {
        return ClosedForm{c["model_flops_per_step"].number(), c["model_state_bytes"].number(),
                          c["bytes_per_param"].number(), c["activations"].number()};
    });
    p.host_memory = o["host_memory"].optional(read_host_state<double>);
    p.paged_optimizer = o["paged_optimizer"].optional([](const JsonField& g) {
        return PagedPrediction{g["state_bytes"].number(), g["device_peak_bytes"].number(),
                               g["traffic_bytes_per_step"].number(),
                               g["traffic_seconds_per_step"].number(), g["link_assumed"].boolean()};
    });
    p.time = o["time"].optional(read_time_prediction);
    return p;
}

Measurement read_measured(const JsonField& o) {
    Measurement m;
    const JsonField peaks = o["peak_bytes"].object();
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        const JsonField peak = peaks[category_name(c)];
        m.peak_bytes[c] = c < kPredictedCategoryCount ? peak.integer<std::int64_t>()
                                                      : peak.optional(integer<std::int64_t>);
    }
    m.peak_total_bytes = o["peak_total_bytes"].integer<std::int64_t>();
    m.peak_rss_bytes = o["peak_rss_bytes"].number();
    m.seconds = o["seconds"].number();
    m.tokens_per_s = o["tokens_per_s"].number();
    m.model_flops_per_s = o["model_flops_per_s"].number();
    m.mfu = o["mfu"].number();
    m.hardware_flops_per_s = o["hardware_flops_per_s"].optional(number);
    m.hfu = o["hfu"].optional(number);
    m.peak_flops_per_s = o["peak_flops_per_s"].optional(number);
    m.peak_source = o["peak_source"].optional(text);
    m.sgemm_peak_flops_per_s = o["sgemm_peak_flops_per_s"].optional(number);
    if (!m.peak_flops_per_s && !m.sgemm_peak_flops_per_s)
        o["peak_flops_per_s"].expected("a number (or sgemm_peak_flops_per_s)");
    m.host_peak_bytes = o["host_peak_bytes"].optional(read_host_state<std::int64_t>);
    m.device_memory = o["device_memory"].optional([](const JsonField& d) {
        return DeviceMemory{d["baseline_used_bytes"].integer<std::uint64_t>(),
                            d["peak_used_bytes"].integer<std::uint64_t>(),
                            d["total_bytes"].integer<std::uint64_t>()};
    });
    m.paged_optimizer = o["paged_optimizer"].optional([](const JsonField& g) {
        return PagedMeasurement{
            g["state_bytes"].integer<std::int64_t>(), g["to_device_bytes_per_step"].number(),
            g["to_host_bytes_per_step"].number(), g["traffic_seconds_per_step"].number()};
    });
    return m;
}

StepReport read_step(const JsonField& o) {
    StepReport s;
    s.step = o["step"].integer<int>();
    s.loss = o["loss"].number();
    s.lr = o["lr"].number();
    s.grad_norm = o["grad_norm"].number();
    s.loss_scale = o["loss_scale"].number();
    s.skipped = o["skipped"].boolean();
    s.seconds = o["seconds"].number();
    s.tokens_per_s = o["tokens_per_s"].number();
    s.mfu = o["mfu"].number();
    s.hfu = o["hfu"].number();
    s.device_seconds = o["device_seconds"].optional(number);
    if (o.has("comm_state_sent_bytes")) {
        s.comm = StepTraffic{o["comm_state_sent_bytes"].integer<std::uint64_t>(),
                             o["comm_state_received_bytes"].integer<std::uint64_t>(),
                             o["comm_sent_bytes"].integer<std::uint64_t>(),
                             o["comm_received_bytes"].integer<std::uint64_t>(),
                             o["comm_seconds"].optional(number)};
    }
    return s;
}

ProfileRow read_profile_row(const JsonField& o) {
    return {o["name"].string(),
            o["category"].string(),
            o["calls_per_step"].number(),
            o["seconds_per_step"].number(),
            o["roofline_seconds_per_step"].number(),
            o["flops_per_step"].number(),
            o["bytes_per_step"].number(),
            o["achieved_flops_per_s"].number(),
            o["achieved_bytes_per_s"].number(),
            o["share_of_step"].number(),
            o["device_records_per_step"].optional(number),
            o["device_seconds_per_step"].optional(number),
            o["device_flops_per_s"].optional(number)};
}

GpuActivitySummary read_gpu_activity(const JsonField& o) {
    GpuActivitySummary g;
    g.error = o["error"].optional(text);
    if (g.error) return g;
    g.records = o["records"].integer<std::uint64_t>();
    g.kernels = o["kernels"].integer<std::uint64_t>();
    g.tagged = o["tagged"].integer<std::uint64_t>();
    g.dropped_records = o["dropped_records"].integer<std::uint64_t>();
    g.buffers_refused = o["buffers_refused"].integer<std::uint64_t>();
    g.cupti_failures = o["cupti_failures"].integer<std::uint64_t>();
    g.unmatched_flows = o["unmatched_flows"].integer<std::uint64_t>();
    return g;
}

ProfileReport read_profile(const JsonField& o) {
    ProfileReport p;
    p.steps_profiled = o["steps_profiled"].integer<std::uint64_t>();
    const JsonField roof = o["roofline"].object();
    p.roofline = {roof["peak_flops_per_s"].number(), roof["peak_bytes_per_s"].number()};
    p.steps = o["steps"].elements([](const JsonField& s) {
        return ProfileStepTime{s["name"].string(),           s["seconds"].number(),
                               s["op_seconds"].number(),     s["op_coverage"].number(),
                               s["kernel_seconds"].number(), s["roofline_seconds"].number()};
    });
    p.ops = o["ops"].elements(read_profile_row);
    p.kernels = o["kernels"].elements(read_profile_row);
    p.gpu_activity = o["gpu_activity"].optional(read_gpu_activity);
    return p;
}

CommunicationReport::PerStep read_per_step(const JsonField& o) {
    return {o["state_sent_bytes"].integer<std::uint64_t>(),
            o["state_received_bytes"].integer<std::uint64_t>(),
            o["state_sent_bytes_min"].integer<std::uint64_t>(),
            o["state_sent_bytes_max"].integer<std::uint64_t>(),
            o["sent_bytes"].integer<std::uint64_t>(),
            o["received_bytes"].integer<std::uint64_t>()};
}

CommunicationReport::Total read_total(const JsonField& o) {
    CommunicationReport::Total t;
    if (o.has("by_op")) {
        o["by_op"].members([&](const std::string& name, const JsonField& c) {
            t.by_op[name] = {c["calls"].integer<std::uint64_t>(),
                             c["sent_bytes"].integer<std::uint64_t>(),
                             c["received_bytes"].integer<std::uint64_t>(),
                             c["state_calls"].integer<std::uint64_t>(),
                             c["state_sent_bytes"].integer<std::uint64_t>(),
                             c["state_received_bytes"].integer<std::uint64_t>()};
        });
    }
    t.sent_bytes = o["sent_bytes"].integer<std::uint64_t>();
    t.received_bytes = o["received_bytes"].integer<std::uint64_t>();
    t.seconds = o["seconds"].number();
    return t;
}

CommunicationReport::Predicted read_predicted_traffic(const JsonField& o) {
    CommunicationReport::Predicted p;
    p.sent_bytes = o["sent_bytes"].number();
    p.received_bytes = o["received_bytes"].number();
    p.paper_volume_elements = o["paper_volume_elements"].number();
    p.padding_elements = o["padding_elements"].number();
    p.collectives = o["collectives"].elements([](const JsonField& c) {
        return PredictedCollective{c["what"].string(),          c["op"].string(),
                                   c["dtype"].string(),         c["calls"].number(),
                                   c["elements"].number(),      c["sent_bytes"].number(),
                                   c["received_bytes"].number()};
    });
    return p;
}

CommunicationReport read_communication(const JsonField& o) {
    CommunicationReport c;
    c.backend = o["backend"].string();
    c.host = o["host"].optional(text).value_or("");
    c.clock_origin_ns = o["clock_origin_ns"].optional(integer<std::int64_t>);
    c.world = o["world"].integer<int>(1);
    c.rank = o["rank"].integer<int>(0);
    c.local_rank = o["local_rank"].integer<int>(0);
    c.zero = o["zero"].integer<int>(0);
    if (c.rank >= c.world)
        o["rank"].expected("a rank below the world size " + std::to_string(c.world));
    c.measured_per_step = read_per_step(o["measured_per_step"].object());
    c.measured_total = read_total(o["measured_total"].object());
    c.predicted_per_step = read_predicted_traffic(o["predicted_per_step"].object());
    return c;
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error
// while parsing object - unexpected end of input; expected '}'" without the bracketed id.
std::string parse_message(const std::string& what) {
    std::string m = what;
    if (!m.empty() && m.front() == '[') {
        const std::size_t close = m.find("] ");
        if (close != std::string::npos) m = m.substr(close + 2);
    }
    if (m.rfind("parse error at ", 0) == 0) m = m.substr(std::strlen("parse error at "));
    return m;
}

struct TooDeep {};

// A tensor's dimensions: integers as written (a shape is never rewritten through doubles).
std::vector<std::int64_t> read_shape(const JsonField& f) {
    return f.elements([](const JsonField& d) {
        if (!d.present() || !d.value().is_number_integer()) d.expected("an integer >= 0");
        return d.integer<std::int64_t>(0);
    });
}

AnomalyReport read_anomaly(const JsonField& o) {
    AnomalyReport a;
    a.step = o["step"].integer<int>();
    a.micro_batch = o["micro_batch"].integer<int>();
    a.op = o["op"].string();
    a.layer = o["layer"].optional(integer<int>);
    a.direction = o["direction"].string();
    if (a.direction != "forward" && a.direction != "backward")
        o["direction"].expected("\"forward\" or \"backward\"");
    a.tensor = o["tensor"].string();
    a.shape = read_shape(o["shape"]);
    a.nan = o["nan"].integer<std::uint64_t>();
    a.inf = o["inf"].integer<std::uint64_t>();
    a.input_max_finite = o["input_max_finite"].optional(number);
    a.bad_input = o["bad_input"].optional([](const JsonField& b) {
        return AnomalyReport::BadInput{b["tensor"].string(), read_shape(b["shape"]),
                                       b["nan"].integer<std::uint64_t>(),
                                       b["inf"].integer<std::uint64_t>()};
    });
    return a;
}

}  // namespace

void from_json(const json& j, GpuActivitySummary& g) {
    const JsonSource source = report_source();
    g = read_gpu_activity(JsonField(j, source, "gpu_activity"));
}

void from_json(const json& j, RunReport& r) {
    const JsonSource source = report_source();
    const JsonField doc = JsonField(j, source).object();
    doc["schema"].schema_version(kReportSchemaName, kReportSchemaVersion);
    r.schema = doc["schema"].string();
    r.model = read_model_config(doc["model"], "model");
    r.run = read_run(doc["run"].object());
    r.init = doc["init"].optional(read_init);
    r.predicted = read_predicted(doc["predicted"].object());
    r.measured = read_measured(doc["measured"].object());
    if (r.predicted.host_memory && !r.measured.host_peak_bytes)
        doc["measured"]["host_peak_bytes"].expected("an object (predicted.host_memory is given)");
    r.steps = doc["steps"].elements(read_step);
    r.anomaly = doc["anomaly"].optional(read_anomaly);
    r.diverged = doc["diverged"].optional(
        [](const JsonField& d) { return DivergedReport{d["step"].integer<int>(0)}; });
    // A run that --detect-anomaly or non-finite gradients stopped in its first step has none.
    if (r.steps.empty() && !r.anomaly && !r.diverged) doc["steps"].expected("at least one step");
    r.profile = doc["profile"].optional(read_profile);
    r.communication = doc["communication"].optional(read_communication);
}

namespace {

// Runs `parse`, with nlohmann's exceptions as one-line InputErrors.
template <class Parse>
json one_line_errors(Parse parse, int max_depth) {
    try {
        return parse();
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
        throw InputError("not valid JSON (" + parse_message(e.what()) + ")");
    } catch (const TooDeep&) {
        throw InputError("JSON nested deeper than " + std::to_string(max_depth) + " levels");
    }
}

}  // namespace

json parse_json_text(std::string_view text) {
    return one_line_errors([&] { return json::parse(text); }, 0);
}

json parse_json_text(std::string_view text, int max_depth) {
    // The callback sees each value's depth as the parser goes, and stops it at the limit
    // before a deeper document is built.
    return one_line_errors(
        [&] {
            return json::parse(text, [max_depth](int depth, json::parse_event_t, json&) {
                if (depth > max_depth) throw TooDeep{};
                return true;
            });
        },
        max_depth);
}

RunReport parse_run_report(std::string_view text) {
    return parse_json_text(text, kMaxReportDepth).get<RunReport>();
}

}  // namespace napkin::profiler
