// Presenting an estimate: the human table, the --json document (keys documented in
// docs/ESTIMATOR.md, "JSON output") and the --explain derivation with numbers substituted.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "estimator/estimate.h"
#include "estimator/solver.h"

namespace napkin {

struct ReportContext {
    std::string model_source;  // "preset gpt2", "config cfg.json", "--params", "flags"
    std::string gpu;           // "h100-sxm" or "custom"
    std::string gpu_full_name;
    std::string link;          // "nvlink4", "--link-gbps 400", "" when none was given
    std::string solve;         // "", "max-params", "max-micro-batch", "fastest"
    std::string
        profile;  // where the performance model's profile came from (estimate.time_predicted)
    const SolveResult* solved = nullptr;
    std::vector<std::string> flag_notes;  // about flags given that this estimate does not use
};

// The notes set in `e.notes`, as sentences.
std::vector<std::string> note_texts(const EstimateInputs& in, const Estimate& e);

std::string format_text(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx);
nlohmann::json to_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx);
std::string format_explain(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx);

// The performance model's part (estimator/report_time.cpp): the predicted step, tokens/s and
// MFU and where the time goes, as text; in JSON, `source` and `tokens_per_s` in `time`, and
// `time.model` (null when the time is an assumed MFU's).
std::string format_time_model(const EstimateInputs& in, const Estimate& e,
                              const ReportContext& ctx);
void add_time_model_json(const Estimate& e, const ReportContext& ctx, nlohmann::json& time);
// --solve fastest's best few: a table, and `solve.candidates` in JSON.
std::string format_fastest(const SolveResult& solved, double gpu_capacity_bytes);
nlohmann::json fastest_json(const SolveResult& solved);

// Formatting shared by the CLI and the viewer.
std::string fmt_count(double n);      // 124,439,808
std::string fmt_sci(double x);        // 6.30e+24
std::string fmt_bytes(double bytes);  // "12.35 GB (11.50 GiB)"
std::string fmt_duration(double seconds);  // "12.3 ms", "4.5 days"

}  // namespace napkin
