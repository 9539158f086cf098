// report.json's one reader: from_json, with every field's type checked and named in the error,
// and the schema versions it reads (profiler/run_report.h).
#include "profiler/run_report.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/config_json.h"

namespace napkin::profiler {

using json = nlohmann::json;

namespace {

std::string category_name(std::size_t c) {
    return std::string(enum_name(kMemCategoryNames, static_cast<MemCategory>(c)));
}

[[noreturn]] void fail(const std::string& field, const std::string& what) {
    throw InputError("field '" + field + "' " + what);
}

// One JSON object of the report and its path ("measured", "steps[3]"), for the messages.
class Object {
public:
    Object(const json& j, std::string path) : j_(j), path_(std::move(path)) {
        if (!j_.is_object()) fail(path_, "is not an object");
    }

    std::string at(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

    // The value at `key`; null when absent or null.
    const json* find(const char* key) const {
        const auto it = j_.find(key);
        return it == j_.end() || it->is_null() ? nullptr : &*it;
    }
    const json& require(const char* key) const {
        const json* v = find(key);
        if (v == nullptr) fail(at(key), "is missing");
        return *v;
    }

    double number(const char* key) const { return number_of(require(key), at(key)); }
    std::string string(const char* key) const { return string_of(require(key), at(key)); }
    bool boolean(const char* key) const {
        const json& v = require(key);
        if (!v.is_boolean()) fail(at(key), "is not true or false");
        return v.get<bool>();
    }
    template <class Int>
    Int integer(const char* key) const {
        return integer_of<Int>(require(key), at(key));
    }
    Object object(const char* key) const { return Object(require(key), at(key)); }

    std::optional<double> optional_number(const char* key) const {
        const json* v = find(key);
        return v ? std::optional(number_of(*v, at(key))) : std::nullopt;
    }
    std::optional<std::string> optional_string(const char* key) const {
        const json* v = find(key);
        return v ? std::optional(string_of(*v, at(key))) : std::nullopt;
    }
    template <class Int>
    std::optional<Int> optional_integer(const char* key) const {
        const json* v = find(key);
        return v ? std::optional(integer_of<Int>(*v, at(key))) : std::nullopt;
    }
    std::optional<Object> optional_object(const char* key) const {
        const json* v = find(key);
        return v ? std::optional<Object>(std::in_place, *v, at(key)) : std::nullopt;
    }

    // The array at `key`, each element an object read by `read(Object) -> T`.
    template <class Read>
    auto objects(const char* key, Read read) const {
        const json& v = require(key);
        if (!v.is_array()) fail(at(key), "is not an array");
        std::vector<decltype(read(std::declval<Object>()))> out;
        out.reserve(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
            out.push_back(read(Object(v[i], at(key) + "[" + std::to_string(i) + "]")));
        }
        return out;
    }

    // Each key of this object with its value as an object.
    template <class Fn>
    void each(Fn fn) const {
        for (const auto& [key, value] : j_.items())
            fn(key, Object(value, path_ + "." + key));
    }

private:
    static double number_of(const json& v, const std::string& field) {
        if (!v.is_number()) fail(field, "is not a number");
        return v.get<double>();
    }
    static std::string string_of(const json& v, const std::string& field) {
        if (!v.is_string()) fail(field, "is not a string");
        return v.get<std::string>();
    }
    // An integer, or a number with an integral value, that fits `Int`.
    template <class Int>
    static Int integer_of(const json& v, const std::string& field) {
        using Limits = std::numeric_limits<Int>;
        if (v.is_number_unsigned()) {
            const auto u = v.get<std::uint64_t>();
            if (std::cmp_less_equal(u, Limits::max())) return static_cast<Int>(u);
        } else if (v.is_number_integer()) {
            const auto i = v.get<std::int64_t>();
            if (std::in_range<Int>(i)) return static_cast<Int>(i);
        } else if (v.is_number_float()) {
            const double d = v.get<double>();
            const double bound = std::ldexp(1.0, Limits::digits);  // 2^63 for int64_t
            if (d == std::floor(d) && d < bound && d >= (Limits::is_signed ? -bound : 0.0))
                return static_cast<Int>(d);
        }
        fail(field, "is not an integer");
    }

    const json& j_;
    std::string path_;
};

template <class Bytes>
HostStateBytes<Bytes> read_host_state(const Object& o) {
    auto get = [&](const char* key) {
        if constexpr (std::is_integral_v<Bytes>)
            return o.integer<Bytes>(key);
        else
            return o.number(key);
    };
    return {get("master_weights"), get("gradients"), get("optimizer_state")};
}

RunOptions read_run(const Object& o) {
    RunOptions r;
    r.steps = o.integer<int>("steps");
    r.micro_batch = o.integer<std::int64_t>("micro_batch");
    r.seq_len = o.integer<std::int64_t>("seq_len");
    r.grad_accum = o.integer<int>("grad_accum");
    r.precision = o.string("precision");
    r.optimizer = o.string("optimizer");
    r.checkpointing = o.string("checkpointing");
    r.attention = o.string("attention");
    r.finetune = o.optional_string("finetune").value_or("full");
    r.lora_rank = o.optional_integer<std::int64_t>("lora_rank");
    if (r.finetune != "full" && !r.lora_rank) fail(o.at("lora_rank"), "is missing");
    r.lora_alpha = o.optional_number("lora_alpha");
    r.lr = o.number("lr");
    r.seed = o.integer<std::uint64_t>("seed");
    r.first_step = o.integer<int>("first_step");
    r.checkpoint = o.string("checkpoint");
    r.data = o.string("data");
    r.device = o.string("device");
    r.data_entropy_nats = o.optional_number("data_entropy_nats");
    r.offload = o.optional_string("offload");
    return r;
}

InitReport read_init(const Object& o) {
    return {o.string("path"),
            o.string("format"),
            o.string("strategy"),
            o.integer<std::int64_t>("tensors"),
            o.integer<std::int64_t>("bytes_read"),
            o.number("seconds"),
            o.integer<std::int64_t>("peak_rss_increase_bytes"),
            o.boolean("peak_rss_reset")};
}

TimePrediction read_time_prediction(const Object& o) {
    TimePrediction t;
    t.profile = o.string("profile");
    t.step_seconds = o.number("step_seconds");
    t.tokens_per_s = o.number("tokens_per_s");
    t.mfu = o.number("mfu");
    for (const auto& [key, v] : o.require("seconds_by_bucket").items()) {
        if (!v.is_number()) fail(o.at("seconds_by_bucket") + "." + key, "is not a number");
        t.seconds_by_bucket[key] = v.get<double>();
    }
    t.communication_seconds = o.number("communication_seconds");
    t.communication_exposed_seconds = o.number("communication_exposed_seconds");
    t.ops = o.objects("ops", [](const Object& op) {
        return PredictedOpTime{op.string("name"), op.string("bucket"), op.number("calls_per_step"),
                               op.number("seconds_per_step")};
    });
    const json& notes = o.require("notes");
    if (!notes.is_array()) fail(o.at("notes"), "is not an array");
    for (const json& n : notes) {
        if (!n.is_string()) fail(o.at("notes"), "holds something other than a string");
        t.notes.push_back(n.get<std::string>());
    }
    return t;
}

Prediction read_predicted(const Object& o) {
    Prediction p;
    for (std::size_t c = 0; c < kPredictedCategoryCount; ++c)
        p.bytes[c] = o.number(category_name(c).c_str());
    p.model_flops_per_step = o.number("model_flops_per_step");
    p.hardware_flops_per_step = o.optional_number("hardware_flops_per_step");
    if (const auto c = o.optional_object("closed_form")) {
        p.closed_form =
            ClosedForm{c->number("model_flops_per_step"), c->number("model_state_bytes"),
                       c->number("bytes_per_param"), c->number("activations")};
    }
    if (const auto h = o.optional_object("host_memory"))
        p.host_memory = read_host_state<double>(*h);
    if (const auto g = o.optional_object("paged_optimizer")) {
        p.paged_optimizer =
            PagedPrediction{g->number("state_bytes"), g->number("device_peak_bytes"),
                            g->number("traffic_bytes_per_step"),
                            g->number("traffic_seconds_per_step"), g->boolean("link_assumed")};
    }
    if (const auto t = o.optional_object("time")) p.time = read_time_prediction(*t);
    return p;
}

Measurement read_measured(const Object& o) {
    Measurement m;
    const Object peaks = o.object("peak_bytes");
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        const std::string name = category_name(c);
        m.peak_bytes[c] = c < kPredictedCategoryCount
                              ? peaks.integer<std::int64_t>(name.c_str())
                              : peaks.optional_integer<std::int64_t>(name.c_str());
    }
    m.peak_total_bytes = o.integer<std::int64_t>("peak_total_bytes");
    m.peak_rss_bytes = o.number("peak_rss_bytes");
    m.seconds = o.number("seconds");
    m.tokens_per_s = o.number("tokens_per_s");
    m.model_flops_per_s = o.number("model_flops_per_s");
    m.mfu = o.number("mfu");
    m.hardware_flops_per_s = o.optional_number("hardware_flops_per_s");
    m.hfu = o.optional_number("hfu");
    m.peak_flops_per_s = o.optional_number("peak_flops_per_s");
    m.peak_source = o.optional_string("peak_source");
    m.sgemm_peak_flops_per_s = o.optional_number("sgemm_peak_flops_per_s");
    if (!m.peak_flops_per_s && !m.sgemm_peak_flops_per_s)
        fail(o.at("peak_flops_per_s"), "is missing");
    if (const auto h = o.optional_object("host_peak_bytes"))
        m.host_peak_bytes = read_host_state<std::int64_t>(*h);
    if (const auto d = o.optional_object("device_memory")) {
        m.device_memory = DeviceMemory{d->integer<std::uint64_t>("baseline_used_bytes"),
                                       d->integer<std::uint64_t>("peak_used_bytes"),
                                       d->integer<std::uint64_t>("total_bytes")};
    }
    if (const auto g = o.optional_object("paged_optimizer")) {
        m.paged_optimizer = PagedMeasurement{
            g->integer<std::int64_t>("state_bytes"), g->number("to_device_bytes_per_step"),
            g->number("to_host_bytes_per_step"), g->number("traffic_seconds_per_step")};
    }
    return m;
}

StepReport read_step(const Object& o) {
    StepReport s;
    s.step = o.integer<int>("step");
    s.loss = o.number("loss");
    s.lr = o.number("lr");
    s.grad_norm = o.number("grad_norm");
    s.loss_scale = o.number("loss_scale");
    s.skipped = o.boolean("skipped");
    s.seconds = o.number("seconds");
    s.tokens_per_s = o.number("tokens_per_s");
    s.mfu = o.number("mfu");
    s.hfu = o.number("hfu");
    s.device_seconds = o.optional_number("device_seconds");
    if (o.find("comm_state_sent_bytes") != nullptr) {
        s.comm = StepTraffic{o.integer<std::uint64_t>("comm_state_sent_bytes"),
                             o.integer<std::uint64_t>("comm_state_received_bytes"),
                             o.integer<std::uint64_t>("comm_sent_bytes"),
                             o.integer<std::uint64_t>("comm_received_bytes"),
                             o.optional_number("comm_seconds")};
    }
    return s;
}

ProfileRow read_profile_row(const Object& o) {
    return {o.string("name"),
            o.string("category"),
            o.number("calls_per_step"),
            o.number("seconds_per_step"),
            o.number("roofline_seconds_per_step"),
            o.number("flops_per_step"),
            o.number("bytes_per_step"),
            o.number("achieved_flops_per_s"),
            o.number("achieved_bytes_per_s"),
            o.number("share_of_step"),
            o.optional_number("device_records_per_step"),
            o.optional_number("device_seconds_per_step"),
            o.optional_number("device_flops_per_s")};
}

GpuActivitySummary read_gpu_activity(const Object& o) {
    GpuActivitySummary g;
    g.error = o.optional_string("error");
    if (g.error) return g;
    g.records = o.integer<std::uint64_t>("records");
    g.kernels = o.integer<std::uint64_t>("kernels");
    g.tagged = o.integer<std::uint64_t>("tagged");
    g.dropped_records = o.integer<std::uint64_t>("dropped_records");
    g.buffers_refused = o.integer<std::uint64_t>("buffers_refused");
    g.cupti_failures = o.integer<std::uint64_t>("cupti_failures");
    g.unmatched_flows = o.integer<std::uint64_t>("unmatched_flows");
    return g;
}

ProfileReport read_profile(const Object& o) {
    ProfileReport p;
    p.steps_profiled = o.integer<std::uint64_t>("steps_profiled");
    const Object roof = o.object("roofline");
    p.roofline = {roof.number("peak_flops_per_s"), roof.number("peak_bytes_per_s")};
    p.steps = o.objects("steps", [](const Object& s) {
        return ProfileStepTime{s.string("name"),           s.number("seconds"),
                               s.number("op_seconds"),     s.number("op_coverage"),
                               s.number("kernel_seconds"), s.number("roofline_seconds")};
    });
    p.ops = o.objects("ops", read_profile_row);
    p.kernels = o.objects("kernels", read_profile_row);
    if (const auto g = o.optional_object("gpu_activity")) p.gpu_activity = read_gpu_activity(*g);
    return p;
}

CommunicationReport::PerStep read_per_step(const Object& o) {
    return {o.integer<std::uint64_t>("state_sent_bytes"),
            o.integer<std::uint64_t>("state_received_bytes"),
            o.integer<std::uint64_t>("state_sent_bytes_min"),
            o.integer<std::uint64_t>("state_sent_bytes_max"),
            o.integer<std::uint64_t>("sent_bytes"),
            o.integer<std::uint64_t>("received_bytes")};
}

CommunicationReport::Total read_total(const Object& o) {
    CommunicationReport::Total t;
    if (const auto by_op = o.optional_object("by_op")) {
        by_op->each([&](const std::string& name, const Object& c) {
            t.by_op[name] = {c.integer<std::uint64_t>("calls"),
                             c.integer<std::uint64_t>("sent_bytes"),
                             c.integer<std::uint64_t>("received_bytes"),
                             c.integer<std::uint64_t>("state_calls"),
                             c.integer<std::uint64_t>("state_sent_bytes"),
                             c.integer<std::uint64_t>("state_received_bytes")};
        });
    }
    t.sent_bytes = o.integer<std::uint64_t>("sent_bytes");
    t.received_bytes = o.integer<std::uint64_t>("received_bytes");
    t.seconds = o.number("seconds");
    return t;
}

CommunicationReport::Predicted read_predicted_traffic(const Object& o) {
    CommunicationReport::Predicted p;
    p.sent_bytes = o.number("sent_bytes");
    p.received_bytes = o.number("received_bytes");
    p.paper_volume_elements = o.number("paper_volume_elements");
    p.padding_elements = o.number("padding_elements");
    p.collectives = o.objects("collectives", [](const Object& c) {
        return PredictedCollective{c.string("what"),          c.string("op"),
                                   c.string("dtype"),         c.number("calls"),
                                   c.number("elements"),      c.number("sent_bytes"),
                                   c.number("received_bytes")};
    });
    return p;
}

// An integer field of "communication" with a lower bound: rank numbers and sizes.
int bounded(const Object& o, const char* key, int lo) {
    const int v = o.integer<int>(key);
    if (v < lo) fail(o.at(key), "is not an integer >= " + std::to_string(lo));
    return v;
}

CommunicationReport read_communication(const Object& o) {
    CommunicationReport c;
    c.backend = o.string("backend");
    c.host = o.optional_string("host").value_or("");
    c.clock_origin_ns = o.optional_integer<std::int64_t>("clock_origin_ns");
    c.world = bounded(o, "world", 1);
    c.rank = bounded(o, "rank", 0);
    c.local_rank = bounded(o, "local_rank", 0);
    c.zero = bounded(o, "zero", 0);
    if (c.rank >= c.world) {
        fail(o.at("rank"),
             "is " + std::to_string(c.rank) + ", outside world size " + std::to_string(c.world));
    }
    c.measured_per_step = read_per_step(o.object("measured_per_step"));
    c.measured_total = read_total(o.object("measured_total"));
    c.predicted_per_step = read_predicted_traffic(o.object("predicted_per_step"));
    return c;
}

// "napkin-train-report/N" with N in 1..kReportSchemaVersion; else InputError saying why.
void check_schema(const Object& doc) {
    const std::string versions =
        kReportSchemaVersion == 1 ? std::string("1") : "1-" + std::to_string(kReportSchemaVersion);
    const json* s = doc.find("schema");
    if (s == nullptr || !s->is_string()) {
        throw InputError("not a " + std::string(kReportSchemaName) + " file (no schema \"" +
                         std::string(kReportSchema) + "\")");
    }
    const std::string schema = s->get<std::string>();
    const std::string prefix = std::string(kReportSchemaName) + "/";
    if (schema.rfind(prefix, 0) != 0) {
        throw InputError("schema \"" + schema + "\" is not a " + std::string(kReportSchemaName) +
                         " file");
    }
    int version = 0;
    const char* first = schema.data() + prefix.size();
    const char* last = schema.data() + schema.size();
    const auto [end, ec] = std::from_chars(first, last, version);
    if (ec != std::errc() || end != last || first == last || version < 1) {
        throw InputError("schema \"" + schema + "\" is not a version this napkin reads (" +
                         versions + ")");
    }
    if (version > kReportSchemaVersion) {
        throw InputError("schema " + schema + " is newer than this napkin reads (" + versions +
                         "); update napkin");
    }
}

ModelConfig read_model(const Object& doc) {
    const json& model = doc.require("model");
    if (!model.is_object()) fail("model", "is not an object");
    try {
        return model_config_from_json(model, "model");
    } catch (const UsageError& e) {  // "model: field 'n_layers': expected a positive integer"
        throw InputError(e.what());
    }
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

std::vector<std::int64_t> read_shape(const json& v, const std::string& field) {
    if (!v.is_array()) fail(field, "is not an array of dimensions");
    std::vector<std::int64_t> shape;
    for (const json& d : v) {
        if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
            fail(field, "is not an array of dimensions");
        shape.push_back(d.get<std::int64_t>());
    }
    return shape;
}

AnomalyReport read_anomaly(const Object& o) {
    AnomalyReport a;
    a.step = o.integer<int>("step");
    a.micro_batch = o.integer<int>("micro_batch");
    a.op = o.string("op");
    a.layer = o.optional_integer<int>("layer");
    a.direction = o.string("direction");
    if (a.direction != "forward" && a.direction != "backward")
        fail(o.at("direction"), "is not \"forward\" or \"backward\"");
    a.tensor = o.string("tensor");
    a.shape = read_shape(o.require("shape"), o.at("shape"));
    a.nan = o.integer<std::uint64_t>("nan");
    a.inf = o.integer<std::uint64_t>("inf");
    a.input_max_finite = o.optional_number("input_max_finite");
    if (const auto b = o.optional_object("bad_input")) {
        a.bad_input = AnomalyReport::BadInput{
            b->string("tensor"), read_shape(b->require("shape"), b->at("shape")),
            b->integer<std::uint64_t>("nan"), b->integer<std::uint64_t>("inf")};
    }
    return a;
}

}  // namespace

void from_json(const json& j, GpuActivitySummary& g) {
    g = read_gpu_activity(Object(j, "gpu_activity"));
}

void from_json(const json& j, RunReport& r) {
    if (!j.is_object()) throw InputError("expected a JSON object");
    const Object doc(j, "");
    check_schema(doc);
    r.schema = doc.string("schema");
    r.model = read_model(doc);
    r.run = read_run(doc.object("run"));
    const auto init = doc.optional_object("init");
    r.init = init ? std::optional(read_init(*init)) : std::nullopt;
    r.predicted = read_predicted(doc.object("predicted"));
    r.measured = read_measured(doc.object("measured"));
    if (r.predicted.host_memory && !r.measured.host_peak_bytes)
        fail("measured.host_peak_bytes", "is missing");
    r.steps = doc.objects("steps", read_step);
    const auto anomaly = doc.optional_object("anomaly");
    r.anomaly = anomaly ? std::optional(read_anomaly(*anomaly)) : std::nullopt;
    // A run that --detect-anomaly stopped in its first step has none.
    if (r.steps.empty() && !r.anomaly) fail("steps", "is empty");
    const auto profile = doc.optional_object("profile");
    r.profile = profile ? std::optional(read_profile(*profile)) : std::nullopt;
    const auto comm = doc.optional_object("communication");
    r.communication = comm ? std::optional(read_communication(*comm)) : std::nullopt;
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
