// napkin estimate --inference (cli/estimate_inference.h).
#include "cli/estimate_inference.h"

#include <cmath>
#include <iostream>
#include <optional>
#include <utility>

#include "cli/flag_names.h"
#include "core/check.h"
#include "estimator/hardware.h"
#include "estimator/inference.h"
#include "estimator/inference_report.h"

namespace napkin::cli {

namespace {

constexpr const char* kInferenceOnlyFlags[] = {"--weights",    "--kv-cache", "--batch",
                                               "--prompt-len", "--gen-len",  "--adapters"};

// Training flags and, where there is one, the inference flag to give instead.
constexpr std::pair<const char*, const char*> kTrainingFlags[] = {
    {"--params", "--model, --config or a custom shape"},
    {"--seq-len", "--prompt-len and --gen-len"},
    {"--micro-batch", "--batch"},
    {"--precision", "--weights and --kv-cache"},
    {"--finetune", "--adapters and --lora-rank"},
    {"--grad-accum", ""},
    {"--tokens", ""},
    {"--loss-chunk", ""},
    {"--optimizer", ""},
    {"--grads-fp32", ""},
    {"--fp32-optimizer-state", ""},
    {"--checkpointing", ""},
    {"--attention", ""},
    {"--attention-flops", ""},
    {"--gpus", ""},
    {"--zero", ""},
    {"--tp", ""},
    {"--pp", ""},
    {"--vpp", ""},
    {"--sp", ""},
    {"--micro-batches", ""},
    {"--offload", ""},
    {"--cpu-mem-gb", ""},
    {"--link", ""},
    {"--link-gbps", ""},
    {"--node-link", ""},
    {"--net-link", ""},
    {"--dropout", ""},
    {"--ignore-activations", ""},
    {"--overlap", ""},
    {"--solve-precisions", ""},
    {"--measured-tokens-per-s", ""},
};

void refuse_training_flags(const CLI::App& cmd) {
    for (const auto& [flag, instead] : kTrainingFlags) {
        if (cmd.count(flag) == 0) continue;
        throw UsageError(std::string(flag) + ": a training flag, not read by --inference" +
                         (*instead != '\0' ? std::string(" (give ") + instead + ")" : ""));
    }
}

InferenceInputs inputs_from_flags(const InferenceFlags& f, const SharedEstimateFlags& s,
                                  const CLI::App& cmd, const ModelConfig& model) {
    InferenceInputs in;
    in.model = model;
    in.weights = parse_enum(kWeightFormatNames, f.weights, "--weights");
    in.kv = parse_enum(kKvFormatNames, f.kv_cache, "--kv-cache");
    for (const auto& [flag, v] : {std::pair<const char*, std::int64_t>{"--batch", f.batch},
                                  {"--prompt-len", f.prompt_len},
                                  {"--gen-len", f.gen_len}}) {
        if (v < 1)
            throw UsageError(std::string(flag) + ": must be a positive integer (got " +
                             std::to_string(v) + ")");
    }
    if (f.adapters < 0)
        throw UsageError("--adapters: must be 0 or a positive integer (got " +
                         std::to_string(f.adapters) + ")");
    if (cmd.count("--lora-rank") > 0 && f.adapters == 0)
        throw UsageError(
            "--lora-rank: needs --adapters N (the LoRA adapters served beside the base)");
    if (s.lora_rank < 1) throw UsageError("--lora-rank: must be a positive integer");
    in.batch = f.batch;
    in.prompt_len = f.prompt_len;
    in.gen_len = f.gen_len;
    in.adapters = f.adapters;
    in.lora_rank = s.lora_rank;
    return in;
}

// The GEMMs' dtype: the weights' own when they are plain floats, fp8 where the GPU has fp8
// tensor cores, else the 16-bit dtype the GPU has (fp16 on a T4).
DType gemm_dtype(WeightFormat w, const GpuSpec& gpu) {
    if (w == WeightFormat::fp32) return DType::f32;
    if (w == WeightFormat::fp16) return DType::f16;
    if (w == WeightFormat::fp8 && gpu.tflops_fp8 > 0) return DType::f8e4m3;
    return gpu.tflops_bf16 > 0 ? DType::bf16 : DType::f16;
}

// The GPU, its overrides and the time model: the device profile's rates, or --mfu's.
void set_hardware(const SharedEstimateFlags& s, const CLI::App& cmd, InferenceInputs& in,
                  InferenceContext& ctx, std::optional<ChosenProfile>& holder) {
    const GpuSpec& gpu = gpu_or_throw(s.gpu);
    in.gemm_dtype = gemm_dtype(in.weights, gpu);
    EstimateInputs time_in;
    ReportContext time_ctx;
    time_ctx.gpu = std::string(gpu.name);
    time_ctx.gpu_full_name = std::string(gpu.full_name);
    time_in.peak_flops_per_s = gpu.peak_tflops(in.gemm_dtype) * 1e12;
    time_in.gpu_memory_bytes = gpu.memory_gb * 1e9;
    if (cmd.count("--peak-tflops") > 0) time_in.peak_flops_per_s = s.peak_tflops * 1e12;
    if (cmd.count("--gpu-mem-gb") > 0) time_in.gpu_memory_bytes = s.gpu_mem_gb * 1e9;
    set_time_model(s.time, cmd, gpu, time_in, time_ctx, holder);
    in.peak_flops_per_s = time_in.peak_flops_per_s;
    in.gpu_memory_bytes = time_in.gpu_memory_bytes;
    in.memory_bytes_per_s = gpu.bandwidth_tbs * 1e12;
    ctx.gpu = time_ctx.gpu;
    ctx.gpu_full_name = time_ctx.gpu_full_name;
    if (time_in.profile != nullptr) {
        in.profile = time_in.profile;
        if (in.profile->memory_bytes_per_s > 0)
            in.memory_bytes_per_s = in.profile->memory_bytes_per_s;
        ctx.time_source = time_ctx.profile;
    } else {
        in.mfu = s.mfu;
        ctx.time_source = "compute at --mfu " + fmt_exact(s.mfu) + " of the peak";
    }
}

}  // namespace

void add_inference_flags(CLI::App* cmd, InferenceFlags& f) {
    const auto* g = "Inference";
    cmd->add_flag("--inference", f.on,
                  "Serve the model instead of training it: weights, KV cache, prefill and decode "
                  "(docs/INFERENCE.md)")
        ->group(g);
    cmd->add_option("--weights", f.weights, "Linear weights: fp32|bf16|fp16|fp8|int8|int4|nf4")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--kv-cache", f.kv_cache, "KV cache: fp32|bf16|fp16|fp8|int8")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--batch", f.batch, "Sequences B decoded together")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--prompt-len", f.prompt_len, "Prompt tokens Tp per sequence")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--gen-len", f.gen_len, "Tokens G generated per sequence")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--adapters", f.adapters,
                    "LoRA adapters held beside the base weights (rank --lora-rank)")
        ->group(g)
        ->capture_default_str();
}

bool inference_requested(const InferenceFlags& f, const CLI::App& cmd) {
    if (f.on) return true;
    for (const char* flag : kInferenceOnlyFlags) {
        if (cmd.count(flag) > 0) throw UsageError(std::string(flag) + ": needs --inference");
    }
    return false;
}

void run_inference_estimate(const InferenceFlags& f, const SharedEstimateFlags& s,
                            const CLI::App& cmd, const ModelConfig& model,
                            const std::string& model_source) {
    refuse_training_flags(cmd);
    InferenceInputs in = inputs_from_flags(f, s, cmd, model);
    InferenceContext ctx;
    ctx.model_source = model_source;
    std::optional<ChosenProfile> holder;  // the profile, alive for the estimate
    set_hardware(s, cmd, in, ctx, holder);

    InferenceEstimate e;
    InferenceSolve solved;
    if (cmd.count("--solve") == 0) {
        e = estimate_inference(in);
    } else {
        InferenceSolveFor what = InferenceSolveFor::max_batch;
        if (s.solve == "max-context")
            what = InferenceSolveFor::max_context;
        else if (s.solve != "max-batch")
            throw UsageError("--solve: unknown value '" + s.solve +
                             "' under --inference (expected max-batch|max-context)");
        const char* fixed = what == InferenceSolveFor::max_batch ? "--batch" : "--prompt-len";
        if (cmd.count(fixed) > 0)
            throw UsageError("--solve " + s.solve + " searches over " + fixed + ": drop it");
        const InferenceInputs base = in;
        solved = solve_inference(base, what, in);
        e = solved.at;
        ctx.solve = s.solve;
        ctx.solved = &solved;
    }
    if (s.json) {
        std::cout << with_flags(inference_to_json(in, e, ctx).dump(2)) << "\n";
    } else {
        std::cout << with_flags(format_inference_text(in, e, ctx));
        if (s.explain) std::cout << "\n" << with_flags(format_inference_explain(in, e));
    }
}

}  // namespace napkin::cli
