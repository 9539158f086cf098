// napkin generate's report: the estimator's prediction for the run (estimate_inference on the
// same inputs, its engine-exact memory beside the serving-style figures, the time over the
// device's profile), what was measured, and RUN_DIR/generate.json (schema napkin-generate/1,
// docs/INFERENCE.md "generate.json") and the one-screen summary.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/model_config.h"
#include "estimator/inference.h"

namespace napkin::cli {

struct GenerateOptions {
    ModelConfig model;
    std::string weights = "random";  // "random" or the file the weights came from
    DeviceKind device = DeviceKind::cpu;
    std::string device_name = "cpu";
    DType storage = DType::f32;
    std::int64_t batch = 1, prompt_len = 0, gen_len = 16;
    std::string prompt = "tokens";  // tokens | file | synthetic
    double temperature = 0;         // 0: greedy
    std::uint64_t seed = 1337;
    // --flash-decoding as the engine runs it: on CUDA the decode steps' split-KV attention (its
    // workspace among the temporaries); always false on the CPU, whose engine has one kernel.
    bool flash_decoding = false;
};

struct GeneratePrediction {
    InferenceEstimate estimate;
    InferenceEngineMemory memory;
    std::string time_source;  // empty: no time prediction (a GPU missing from the table)
};

struct GenerateMeasurement {
    std::array<std::int64_t, kMemCategoryCount> peak_bytes{};
    std::int64_t peak_total_bytes = 0;
    double prefill_seconds = 0;
    std::vector<double> decode_seconds;  // per step
    double decode_median_seconds() const;
    std::vector<std::vector<std::int32_t>> tokens;  // (B, G) generated
};

// The prediction on this device: its shipped profile, else its ceilings (a CPU's sgemm rate and
// stream bandwidth measured now, a GPU's datasheet); no time for a GPU the table lacks.
GeneratePrediction predict_generate(const GenerateOptions& o);

// generate.json, and the summary lines.
std::string generate_json(const GenerateOptions& o, const GeneratePrediction& p,
                          const GenerateMeasurement& m);
void print_generate_summary(const GenerateOptions& o, const GeneratePrediction& p,
                            const GenerateMeasurement& m);

}  // namespace napkin::cli
