#include "cli/generate_report.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/config_json.h"
#include "core/json_reader.h"
#include "estimator/hardware.h"
#include "estimator/profile_catalog.h"
#include "kernels/matmul.h"
#include "kernels/stream.h"
#include "profiler/run_folder.h"

namespace napkin::cli {

using nlohmann::ordered_json;

double GenerateMeasurement::decode_median_seconds() const {
    if (decode_seconds.empty()) return 0;
    std::vector<double> s = decode_seconds;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

namespace {

// The device's profile (shipped, else its ceilings); none for a GPU the table lacks.
std::optional<ChosenProfile> device_profile(const GenerateOptions& o, const GpuSpec*& gpu) {
    if (o.device == DeviceKind::cpu) {
        return choose_profile("", this_cpu(), false, "--device-profile", [] {
            return cpu_roofline_profile(this_cpu(), cpu::sgemm_peak_flops(),
                                        cpu::stream_copy_bandwidth(), omp_get_max_threads());
        });
    }
    gpu = gpu_for_device_name(o.device_name);
    if (gpu == nullptr) return std::nullopt;
    DeviceIdentity id = gpu_identity(*gpu);
    id.name = o.device_name;
    return choose_profile("", id, false, "--device-profile",
                          [gpu] { return datasheet_profile(*gpu); });
}

}  // namespace

GeneratePrediction predict_generate(const GenerateOptions& o) {
    const bool bf16 = o.storage == DType::bf16;
    InferenceInputs in;
    in.model = o.model;
    in.weights = bf16 ? WeightFormat::bf16 : WeightFormat::fp32;
    in.kv = bf16 ? KvFormat::bf16 : KvFormat::fp32;
    in.batch = o.batch;
    in.prompt_len = o.prompt_len;
    in.gen_len = o.gen_len;
    in.gemm_dtype = o.storage;
    const GpuSpec* gpu = nullptr;
    const std::optional<ChosenProfile> profile = device_profile(o, gpu);
    GeneratePrediction p;
    if (profile) {
        in.profile = &profile->profile;
        in.memory_bytes_per_s = profile->profile.memory_bytes_per_s;
        in.peak_flops_per_s = profile->profile.peak_for(o.storage);
        if (!(in.peak_flops_per_s > 0)) in.peak_flops_per_s = profile->profile.peak_for(DType::f32);
        in.gpu_memory_bytes = gpu != nullptr ? gpu->memory_gb * 1e9 : this_cpu().memory_bytes;
        p.time_source = profile->origin;
    } else {  // memory only: stand-in rates, the times not reported
        in.memory_bytes_per_s = 1;
        in.peak_flops_per_s = 1;
        in.gpu_memory_bytes = std::numeric_limits<double>::max();
    }
    p.estimate = estimate_inference(in);
    p.memory = inference_engine_memory(in, p.estimate, o.device, o.flash_decoding);
    return p;
}

namespace {

constexpr MemCategory kGenerateCategories[] = {MemCategory::parameters, MemCategory::kv_cache,
                                               MemCategory::activations, MemCategory::temporaries,
                                               MemCategory::data};
static_assert(std::size(kGenerateCategories) == std::size(kGenerateCategoryNames));

double predicted_bytes(const InferenceEngineMemory& m, MemCategory c) {
    switch (c) {
        case MemCategory::parameters:
            return m.parameters;
        case MemCategory::kv_cache:
            return m.kv_cache;
        case MemCategory::activations:
            return m.activations;
        case MemCategory::temporaries:
            return m.temporaries;
        case MemCategory::data:
            return m.data;
        default:
            return 0;
    }
}

std::string name(MemCategory c) {
    return std::string(enum_name(kMemCategoryNames, c));
}

ordered_json predicted_json(const GeneratePrediction& p) {
    ordered_json mem;
    for (MemCategory c : kGenerateCategories)
        mem[name(c)] = static_cast<std::int64_t>(predicted_bytes(p.memory, c));
    mem["total"] = static_cast<std::int64_t>(p.memory.total());
    ordered_json serving = {
        {"weights", static_cast<std::int64_t>(p.estimate.memory.weights())},
        {"kv_cache", static_cast<std::int64_t>(p.estimate.memory.kv_total)},
        {"kv_per_token", static_cast<std::int64_t>(p.estimate.memory.kv_per_token)},
        {"prefill_activations", static_cast<std::int64_t>(p.estimate.memory.prefill_activations)},
        {"total", static_cast<std::int64_t>(p.estimate.memory.total)}};
    ordered_json time = nullptr;
    if (!p.time_source.empty()) {
        const InferenceEstimate& e = p.estimate;
        time = {{"source", p.time_source},
                {"prefill_seconds", e.prefill.seconds()},
                {"decode_seconds_per_token", e.seconds_per_token},
                {"tokens_per_s", e.tokens_per_s}};
    }
    return {{"memory", mem}, {"serving_memory", serving}, {"time", time}};
}

ordered_json measured_json(const GenerateOptions& o, const GenerateMeasurement& m) {
    ordered_json peaks;
    for (MemCategory c : kGenerateCategories)
        peaks[name(c)] = m.peak_bytes[static_cast<std::size_t>(c)];
    const double median = m.decode_median_seconds();
    return {{"peak_bytes", peaks},
            {"peak_total_bytes", m.peak_total_bytes},
            {"prefill_seconds", m.prefill_seconds},
            {"decode_steps", m.decode_seconds.size()},
            {"decode_seconds_per_token", median},
            {"tokens_per_s", median > 0 ? static_cast<double>(o.batch) / median : 0.0},
            {"decode_step_seconds", m.decode_seconds}};
}

}  // namespace

std::string generate_json(const GenerateOptions& o, const GeneratePrediction& p,
                          const GenerateMeasurement& m) {
    const ordered_json run = {{"device", enum_name(kDeviceKindNames, o.device)},
                              {"device_name", o.device_name},
                              {"precision", o.storage == DType::bf16 ? "bf16" : "fp32"},
                              {"weights", o.weights},
                              {"batch", o.batch},
                              {"prompt_len", o.prompt_len},
                              {"max_new_tokens", o.gen_len},
                              {"prompt", o.prompt},
                              {"temperature", o.temperature},
                              {"seed", o.seed},
                              {"flash_decoding", o.flash_decoding}};
    const ordered_json doc = {{"schema", "napkin-generate/1"},
                              {"model", model_config_to_json(o.model)},
                              {"run", run},
                              {"predicted", predicted_json(p)},
                              {"measured", measured_json(o, m)},
                              {"tokens", m.tokens}};
    return doc.dump(2) + "\n";
}

GenerateReport read_generate_report(const std::string& file) {
    const nlohmann::json doc = profiler::read_json_file(file);
    const JsonSource source =
        JsonSource::raising<InputError>(file, JsonSource::Integers::integral_values);
    const JsonField root(doc, source);
    root["schema"].schema_version("napkin-generate", 1);
    GenerateReport r;
    r.model = root["model"]["name"].string();
    const JsonField run = root["run"];
    r.device = run["device"].string();
    r.device_name = run["device_name"].string();
    r.precision = run["precision"].string();
    r.weights = run["weights"].string();
    r.batch = run["batch"].integer<std::int64_t>(1);
    r.prompt_len = run["prompt_len"].integer<std::int64_t>(1);
    r.max_new_tokens = run["max_new_tokens"].integer<std::int64_t>(1);
    r.flash_decoding = run["flash_decoding"].optional(&JsonField::boolean).value_or(false);
    const JsonField predicted = root["predicted"], measured = root["measured"];
    for (std::size_t c = 0; c < std::size(kGenerateCategoryNames); ++c) {
        r.predicted_bytes[c] =
            predicted["memory"][kGenerateCategoryNames[c]].integer<std::int64_t>(0);
        r.measured_bytes[c] =
            measured["peak_bytes"][kGenerateCategoryNames[c]].integer<std::int64_t>(0);
    }
    r.predicted_total_bytes = predicted["memory"]["total"].integer<std::int64_t>(0);
    r.measured_total_bytes = measured["peak_total_bytes"].integer<std::int64_t>(0);
    r.predicted_time = predicted["time"].optional([](const JsonField& t) {
        return GenerateReport::Time{t["source"].string(), t["prefill_seconds"].non_negative(),
                                    t["decode_seconds_per_token"].non_negative(),
                                    t["tokens_per_s"].non_negative()};
    });
    r.prefill_seconds = measured["prefill_seconds"].non_negative();
    r.decode_steps = measured["decode_steps"].integer<std::int64_t>(0);
    r.decode_seconds_per_token = measured["decode_seconds_per_token"].non_negative();
    r.tokens_per_s = measured["tokens_per_s"].non_negative();
    return r;
}

namespace {

// ", 12.345 <unit> predicted", or ", no prediction" without a time prediction.
std::string predicted_text(bool timed, double value, const char* unit) {
    if (!timed) return ", no prediction";
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.3f%s%s predicted", value, *unit != '\0' ? " " : "", unit);
    return buf;
}

}  // namespace

void print_generate_summary(const GenerateOptions& o, const GeneratePrediction& p,
                            const GenerateMeasurement& m) {
    std::printf("generated %lld x %lld tokens (%s, %s, %s)\n", static_cast<long long>(o.batch),
                static_cast<long long>(o.gen_len), o.model.name.c_str(),
                o.storage == DType::bf16 ? "bf16" : "fp32", o.device_name.c_str());
    std::printf("  %-12s %16s %16s\n", "memory", "measured B", "predicted B");
    for (MemCategory c : kGenerateCategories) {
        const auto measured = m.peak_bytes[static_cast<std::size_t>(c)];
        const auto predicted = static_cast<std::int64_t>(predicted_bytes(p.memory, c));
        std::printf("  %-12s %16lld %16lld%s\n", name(c).c_str(), static_cast<long long>(measured),
                    static_cast<long long>(predicted), measured == predicted ? "" : "  DIFFERS");
    }
    const double median = m.decode_median_seconds();
    const InferenceEstimate& e = p.estimate;
    const bool timed = !p.time_source.empty();
    std::printf("  prefill      %10.3f ms measured%s\n", m.prefill_seconds * 1e3,
                predicted_text(timed, e.prefill.seconds() * 1e3, "ms").c_str());
    std::printf("  decode       %10.3f ms/token measured (median of %zu steps)%s\n", median * 1e3,
                m.decode_seconds.size(),
                predicted_text(timed, e.seconds_per_token * 1e3, "ms").c_str());
    if (median > 0) {
        std::printf("  tokens/s     %10.1f measured (all sequences)%s\n",
                    static_cast<double>(o.batch) / median,
                    predicted_text(timed, e.tokens_per_s, "").c_str());
    }
    if (timed) std::printf("  time model: %s\n", p.time_source.c_str());
    for (std::size_t b = 0; b < m.tokens.size() && b < 4; ++b) {
        std::printf("  sequence %zu:", b);
        for (std::size_t i = 0; i < m.tokens[b].size() && i < 16; ++i)
            std::printf(" %d", m.tokens[b][i]);
        std::printf("%s\n", m.tokens[b].size() > 16 ? " ..." : "");
    }
}

}  // namespace napkin::cli
