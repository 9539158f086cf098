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

// generate.json read back, for `napkin report` (cli/report_generate.cpp): the run, the memory by
// category predicted and measured (the order of kGenerateCategoryNames), the times. Every field
// is one generate_json writes.
inline constexpr const char* kGenerateCategoryNames[] = {"parameters", "kv_cache", "activations",
                                                         "temporaries", "data"};
struct GenerateReport {
    std::string model, device, device_name, precision, weights;
    std::int64_t batch = 0, prompt_len = 0, max_new_tokens = 0;
    bool flash_decoding = false;
    std::array<std::int64_t, 5> predicted_bytes{}, measured_bytes{};
    std::int64_t predicted_total_bytes = 0, measured_total_bytes = 0;
    struct Time {
        std::string source;
        double prefill_seconds = 0, decode_seconds_per_token = 0, tokens_per_s = 0;
    };
    std::optional<Time> predicted_time;  // none for a GPU the hardware table lacks
    double prefill_seconds = 0, decode_seconds_per_token = 0, tokens_per_s = 0;
    std::int64_t decode_steps = 0;
};
// InputError naming the file and the field (core/json_reader.h) on anything else.
GenerateReport read_generate_report(const std::string& file);
void print_generate_summary(const GenerateOptions& o, const GeneratePrediction& p,
                            const GenerateMeasurement& m);

}  // namespace napkin::cli
