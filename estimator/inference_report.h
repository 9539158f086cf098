// Presenting an inference estimate (estimator/inference.h): the human table, the --explain
// derivation with the numbers substituted and the sources, and the --json document (schema
// napkin-inference/1; keys in docs/INFERENCE.md, "JSON output").
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "estimator/inference.h"

namespace napkin {

inline constexpr const char* kInferenceSchema = "napkin-inference/1";

struct InferenceContext {
    std::string model_source;  // "preset llama3-8b", "config cfg.json", "custom shape"
    std::string gpu;           // "h100-sxm" (and what was overridden)
    std::string gpu_full_name;
    std::string time_source;  // "--mfu 0.5", or where the device profile came from
    std::string solve;        // "", "max-batch", "max-context"
    const InferenceSolve* solved = nullptr;
};

std::string format_inference_text(const InferenceInputs& in, const InferenceEstimate& e,
                                  const InferenceContext& ctx);
std::string format_inference_explain(const InferenceInputs& in, const InferenceEstimate& e);
nlohmann::json inference_to_json(const InferenceInputs& in, const InferenceEstimate& e,
                                 const InferenceContext& ctx);

}  // namespace napkin
