#include "cli/report_generate.h"

#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/generate_report.h"
#include "core/check.h"

namespace napkin::cli {

namespace fs = std::filesystem;
using nlohmann::json;

RunKind run_kind(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw InputError(path.string() + ": no such folder");
    if (!fs::is_directory(path, ec))
        return path.filename() == "generate.json" ? RunKind::generate : RunKind::train;
    if (fs::exists(path / "report.json", ec)) return RunKind::train;
    if (fs::exists(path / "generate.json", ec)) return RunKind::generate;
    throw InputError(path.string() +
                     ": holds neither report.json (napkin train --out) nor generate.json "
                     "(napkin generate --out)");
}

namespace {

json pair(const std::optional<double>& predicted, double measured) {
    return {{"predicted", predicted ? json(*predicted) : json()}, {"measured", measured}};
}

}  // namespace

json summarize_generate_run(const fs::path& path) {
    std::error_code ec;
    const bool folder = fs::is_directory(path, ec);
    const fs::path file = folder ? path / "generate.json" : path;
    const fs::path dir = folder ? path : path.parent_path();
    const GenerateReport r = read_generate_report(file.string());
    const fs::path norm = fs::weakly_canonical(dir, ec);
    std::string label = (ec ? dir : norm).filename().string();
    if (label.empty()) label = dir.string();
    json memory;
    for (std::size_t c = 0; c < std::size(kGenerateCategoryNames); ++c) {
        memory[kGenerateCategoryNames[c]] = {{"predicted", r.predicted_bytes[c]},
                                             {"measured", r.measured_bytes[c]}};
    }
    memory["total"] = {{"predicted", r.predicted_total_bytes},
                       {"measured", r.measured_total_bytes}};
    const auto& t = r.predicted_time;
    const auto predicted = [&](double GenerateReport::Time::*field) {
        return t ? std::optional<double>((*t).*field) : std::nullopt;
    };
    return {{"dir", dir.string()},
            {"label", label},
            {"model", r.model},
            {"device", r.device},
            {"device_name", r.device_name},
            {"precision", r.precision},
            {"weights", r.weights},
            {"batch", r.batch},
            {"prompt_len", r.prompt_len},
            {"max_new_tokens", r.max_new_tokens},
            {"flash_decoding", r.flash_decoding},
            {"memory", memory},
            {"time_source", t ? json(t->source) : json()},
            {"prefill_seconds",
             pair(predicted(&GenerateReport::Time::prefill_seconds), r.prefill_seconds)},
            {"decode_steps", r.decode_steps},
            {"decode_seconds_per_token",
             pair(predicted(&GenerateReport::Time::decode_seconds_per_token),
                  r.decode_seconds_per_token)},
            {"tokens_per_s", pair(predicted(&GenerateReport::Time::tokens_per_s), r.tokens_per_s)}};
}

namespace {

// "12.345 ms" (value in seconds), or "-" for null.
std::string ms(const json& v) {
    if (!v.is_number()) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", v.get<double>() * 1e3);
    return buf;
}

std::string number(const json& v, const char* format) {
    if (!v.is_number()) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v.get<double>());
    return buf;
}

// measured / predicted, "-" without a prediction.
std::string ratio(const json& p) {
    const json& pred = p["predicted"];
    if (!pred.is_number() || !(pred.get<double>() > 0)) return "-";
    return number(p["measured"].get<double>() / pred.get<double>(), "%.2f");
}

void print_run(const json& r) {
    std::printf("generate run %s: %s, %s (%s), %s, B %lld, %lld prompt + %lld new tokens%s\n",
                r["label"].get<std::string>().c_str(), r["model"].get<std::string>().c_str(),
                r["device"].get<std::string>().c_str(), r["device_name"].get<std::string>().c_str(),
                r["precision"].get<std::string>().c_str(), r["batch"].get<long long>(),
                r["prompt_len"].get<long long>(), r["max_new_tokens"].get<long long>(),
                r["device"] == "cuda" ? (r["flash_decoding"].get<bool>() ? ", flash-decoding on"
                                                                         : ", flash-decoding off")
                                      : "");
    std::printf("  %-24s %16s %16s\n", "memory (bytes)", "predicted", "measured");
    std::vector<std::string> rows(std::begin(kGenerateCategoryNames),
                                  std::end(kGenerateCategoryNames));
    rows.emplace_back("total");
    for (const std::string& name : rows) {
        const json& m = r["memory"][name];
        const long long p = m["predicted"].get<long long>(), v = m["measured"].get<long long>();
        std::printf("  %-24s %16lld %16lld%s\n", name.c_str(), p, v, p == v ? "" : "  DIFFERS");
    }
    std::printf("  %-24s %16s %16s %10s\n", "time", "predicted", "measured", "meas/pred");
    const json& prefill = r["prefill_seconds"];
    const json& decode = r["decode_seconds_per_token"];
    const json& tps = r["tokens_per_s"];
    std::printf("  %-24s %16s %16s %10s\n", "prefill", ms(prefill["predicted"]).c_str(),
                ms(prefill["measured"]).c_str(), ratio(prefill).c_str());
    const std::string decode_name =
        "decode per token (" + std::to_string(r["decode_steps"].get<long long>()) + ")";
    std::printf("  %-24s %16s %16s %10s\n", decode_name.c_str(), ms(decode["predicted"]).c_str(),
                ms(decode["measured"]).c_str(), ratio(decode).c_str());
    std::printf("  %-24s %16s %16s %10s\n", "tokens/s (all sequences)",
                number(tps["predicted"], "%.1f").c_str(), number(tps["measured"], "%.1f").c_str(),
                ratio(tps).c_str());
    std::printf("  time model: %s\n", r["time_source"].is_string()
                                          ? r["time_source"].get<std::string>().c_str()
                                          : "none (a device the hardware table lacks)");
}

}  // namespace

void print_generate_runs(const std::vector<json>& runs) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
        if (i > 0) std::printf("\n");
        print_run(runs[i]);
    }
}

}  // namespace napkin::cli
