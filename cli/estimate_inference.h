// napkin estimate --inference: serving a model (estimator/inference.h) instead of training it.
// The model flags (--model, --config, the custom shape), the hardware flags (--gpu,
// --peak-tflops, --gpu-mem-gb, --mfu, --device-profile), --lora-rank, --solve, --json and
// --explain keep their meaning; the training flags are refused, and the inference flags
// (--weights, --kv-cache, --batch, --prompt-len, --gen-len, --adapters) need --inference.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/estimate_time.h"
#include "core/model_config.h"

namespace napkin::cli {

struct InferenceFlags {
    bool on = false;
    std::string weights = "bf16", kv_cache = "bf16";
    std::int64_t batch = 1, prompt_len = 512, gen_len = 512;
    int adapters = 0;
};

void add_inference_flags(CLI::App* cmd, InferenceFlags& f);

// Without --inference: UsageError if an inference flag is given. Returns f.on.
bool inference_requested(const InferenceFlags& f, const CLI::App& cmd);

// The estimate's flags that --inference reads too.
struct SharedEstimateFlags {
    const std::string& gpu;
    double peak_tflops, gpu_mem_gb, mfu;
    std::int64_t lora_rank;
    const std::string& solve;
    bool json, explain;
    const TimeFlags& time;
};

// Checks the flags (one UsageError line naming the flag), estimates and prints.
void run_inference_estimate(const InferenceFlags& f, const SharedEstimateFlags& shared,
                            const CLI::App& cmd, const ModelConfig& model,
                            const std::string& model_source);

}  // namespace napkin::cli
