// Presenting an estimate: the human table, the --json document (keys documented in
// docs/ESTIMATOR.md, "JSON output") and the --explain derivation with numbers substituted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "estimator/estimate.h"
#include "estimator/solver.h"

namespace napkin {

struct ReportContext {
    std::string model_source;  // "preset gpt2", "config cfg.json", "--params", "flags"
    std::string gpu;           // "h100-sxm" or "custom"
    std::string gpu_full_name;
    std::string link;  // "nvlink4", "--link-gbps 400", "" when none was given
    // "", "max-params", "max-micro-batch", "min-tp-pp", "fastest", "fastest-layout"
    std::string solve;
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
// --solve fastest's best few: a table, and `solve.candidates` in JSON; `layout` for
// --solve fastest-layout's (T, P, V, DP, M in place of precision and attention).
std::string format_fastest(const SolveResult& solved, double gpu_capacity_bytes,
                           bool layout = false);
nlohmann::json fastest_json(const SolveResult& solved, bool layout = false);

// Formatting shared by the CLI and the viewer.
std::string fmt_count(double n);           // 124,439,808
std::string fmt_sci(double x);             // 6.30e+24
std::string fmt_bytes(double bytes);       // "12.35 GB (11.50 GiB)"
std::string fmt_duration(double seconds);  // "850.0 ms", "2.45 s", "3.1 h", "143.9 days"
std::string fmt_exact(double x);           // the shortest text that reads back as x: "0.555"
std::string fmt_number(const char* printf_format, double v);  // fmt_number("%.1f", x)

// The 3D-parallel parts (report_parallel.cpp): the layout, the stages, the tensor- and
// pipeline-parallel traffic and the bubble, as text, JSON and --explain.
std::string format_parallel(const EstimateInputs& in, const Estimate& e);
nlohmann::json parallel_json(const EstimateInputs& in, const Estimate& e);
std::string explain_parallel(const EstimateInputs& in, const Estimate& e);

// Pieces of the --json document shared by its parts: memory by category (the `memory.gpu` keys),
// and one line of traffic (the `collectives` entries).
nlohmann::json memory_bytes_json(const MemoryBytes& m);
nlohmann::json traffic_line_json(const std::string& what, std::string_view op, DType dtype,
                                 double calls, double elements, double sent_bytes,
                                 double received_bytes);

// Rewrites every integral number of a JSON document (a byte count held in a double) as an
// integer, so that `--json` prints 124439808, not 124439808.0.
void integers_as_integers(nlohmann::json& doc);

}  // namespace napkin
