// napkin estimate: the analytic estimator's command line. The flag names are the public
// interface (docs/ESTIMATOR.md); keep them.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "cli/commands.h"
#include "cli/estimate_inference.h"
#include "cli/estimate_time.h"
#include "cli/flag_checks.h"
#include "cli/flag_names.h"
#include "core/check.h"
#include "core/config_json.h"
#include "core/model_config.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "estimator/links.h"
#include "estimator/report.h"
#include "estimator/solver.h"

namespace napkin::cli {

namespace {

struct EstimateFlags {
    std::string model, config;
    double params = 0;
    // Shape flags.
    int layers = 0, heads = 0, kv_heads = 0;
    std::int64_t d_model = 0, d_ff = 0, vocab = 50257, context = 0;
    std::string norm = "layernorm", mlp = "gelu", positions = "learned";
    bool no_bias = false, untied = false, qkv_bias = false;
    std::int64_t head_dim = 0;
    double dropout = -1;
    // Data.
    std::int64_t seq_len = 0, micro_batch = 1, grad_accum = 1, loss_chunk = 1024;
    double tokens = 0;
    // Recipe.
    std::string precision = "bf16-amp", optimizer = "adamw", checkpointing = "none",
                attention = "flash";
    std::string attention_flops = "causal";
    bool grads_fp32 = false, fp32_optimizer_state = false, paged_optimizer = false;
    std::int64_t fp8_amax_history = 16;  // fp8-amp: delayed scaling's history; 0: current scaling
    // Parallel.
    int gpus = 1, zero = 0, tp = 1, pp = 1, vpp = 1;
    bool sp = false;
    std::int64_t micro_batches = 0;
    std::string offload = "none";
    // Fine-tuning.
    std::string finetune = "full";
    std::int64_t lora_rank = 64;
    // Hardware.
    std::string gpu = "h100-sxm";
    double peak_tflops = 0, gpu_mem_gb = 0, cpu_mem_gb = 256, mfu = 0.5;
    double measured_tokens_per_s = 0;
    std::string link, node_link, net_link;
    double link_gbps = 0;
    std::string solve;
    TimeFlags time;
    InferenceFlags inference;
    bool json = false, explain = false, ignore_activations = false;
    bool list_models = false, list_gpus = false, list_links = false;
};

void list_models(bool as_json) {
    nlohmann::json out = nlohmann::json::array();
    if (!as_json) {
        std::printf("%-12s %16s %4s %6s %4s %4s %6s %7s %7s  %s\n", "name", "params", "L", "C",
                    "NH", "KVH", "F", "V", "context", "published count");
    }
    for (const auto& src : preset_sources()) {
        const ModelConfig& c = preset_or_throw(src.name);
        const ParamCounts p = count_params(c);
        if (as_json) {
            nlohmann::json j = model_config_to_json(c);
            j["params"] = p.total;
            j["published_params"] = src.published_params;
            j["source"] = src.source;
            out.push_back(j);
        } else {
            std::printf("%-12s %16s %4d %6lld %4d %4d %6lld %7lld %7lld  %s\n", src.name,
                        fmt_count(static_cast<double>(p.total)).c_str(), c.n_layers,
                        static_cast<long long>(c.d_model), c.n_heads, c.n_kv_heads,
                        static_cast<long long>(c.d_ff), static_cast<long long>(c.vocab_size),
                        static_cast<long long>(c.context_length), src.source);
        }
    }
    if (as_json) std::cout << out.dump(2) << "\n";
}

void list_gpus(bool as_json) {
    nlohmann::json out = nlohmann::json::array();
    if (!as_json) {
        std::printf(
            "dense peak TFLOP/s (no sparsity); memory GB = 1e9 bytes; sources in "
            "docs/HARDWARE.md\n");
        std::printf("%-10s %-30s %7s %7s %7s %7s %7s %7s %6s %6s\n", "name", "part", "fp32", "tf32",
                    "bf16", "fp16", "fp8", "int8", "GB", "TB/s");
    }
    for (const auto& g : gpu_table()) {
        if (as_json) {
            out.push_back({{"name", g.name},
                           {"full_name", g.full_name},
                           {"tflops",
                            {{"fp32", g.tflops_fp32},
                             {"tf32", g.tflops_tf32},
                             {"bf16", g.tflops_bf16},
                             {"fp16", g.tflops_fp16},
                             {"fp8", g.tflops_fp8},
                             {"int8", g.tflops_int8}}},
                           {"memory_gb", g.memory_gb},
                           {"bandwidth_tb_per_s", g.bandwidth_tbs},
                           {"node_link", g.node_link},
                           {"network_link", g.network_link},
                           {"source", g.source}});
        } else {
            std::printf("%-10s %-30s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %6.0f %6.3f\n",
                        std::string(g.name).c_str(), std::string(g.full_name).c_str(),
                        g.tflops_fp32, g.tflops_tf32, g.tflops_bf16, g.tflops_fp16, g.tflops_fp8,
                        g.tflops_int8, g.memory_gb, g.bandwidth_tbs);
        }
    }
    if (as_json) std::cout << out.dump(2) << "\n";
}

void list_links(bool as_json) {
    nlohmann::json out = nlohmann::json::array();
    if (!as_json) {
        std::printf(
            "bandwidth per GPU, one direction; Gb/s = 1e9 bits/s, GB/s = 1e9 bytes/s; sources in "
            "docs/HARDWARE.md\n");
        std::printf("%-8s %-58s %8s %8s\n", "name", "link", "Gb/s", "GB/s");
    }
    for (const auto& l : link_table()) {
        if (as_json) {
            out.push_back({{"name", l.name},
                           {"full_name", l.full_name},
                           {"gbit_per_s", l.gbit_per_s},
                           {"bytes_per_s", l.bytes_per_s()},
                           {"source", l.source}});
        } else {
            std::printf("%-8s %-58s %8.1f %8.2f\n", std::string(l.name).c_str(),
                        std::string(l.full_name).c_str(), l.gbit_per_s, l.bytes_per_s() / 1e9);
        }
    }
    if (as_json) std::cout << out.dump(2) << "\n";
}

// The flags that describe a custom shape beside --layers/--d-model/--heads: a preset, a config
// or --params has its own shape, so there they are refused rather than ignored.
constexpr const char* kShapeOnlyFlags[] = {"--kv-heads", "--d-ff",     "--vocab",     "--context",
                                           "--norm",     "--mlp",      "--positions", "--no-bias",
                                           "--untied",   "--head-dim", "--qkv-bias"};

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

// A number flag that is given must be finite and > 0.
void require_positive(const CLI::App& cmd, const char* flag, double v) {
    if (cmd.count(flag) > 0 && (!(v > 0) || !std::isfinite(v))) {
        throw UsageError(std::string(flag) + ": must be a positive number (got " + number(v) + ")");
    }
}

ModelConfig shape_from_flags(const EstimateFlags& f, const CLI::App& cmd) {
    // Report flag-level errors by flag name before the estimator sees the shape; a flag that is
    // given must hold a value, not fall back to its default.
    for (const auto& [flag, v] : {std::pair<const char*, std::int64_t>{"--layers", f.layers},
                                  {"--d-model", f.d_model},
                                  {"--heads", f.heads},
                                  {"--kv-heads", f.kv_heads},
                                  {"--d-ff", f.d_ff},
                                  {"--head-dim", f.head_dim},
                                  {"--context", f.context}}) {
        if (cmd.count(flag) > 0 && v <= 0) {
            throw UsageError(std::string(flag) + ": must be a positive integer (got " +
                             std::to_string(v) + ")");
        }
    }
    if (f.layers == 0 || f.d_model == 0 || f.heads == 0) {
        throw UsageError(
            "a model needs --model, --config, --params, or all of --layers, --d-model and --heads");
    }
    ModelConfig c;
    c.name = "custom";
    c.n_layers = f.layers;
    c.d_model = f.d_model;
    c.n_heads = f.heads;
    c.n_kv_heads = f.kv_heads > 0 ? f.kv_heads : f.heads;
    c.d_ff = f.d_ff > 0 ? f.d_ff : 4 * f.d_model;
    c.vocab_size = f.vocab;
    c.padded_vocab_size = pad_vocab(f.vocab);
    c.context_length = f.context > 0 ? f.context : (f.seq_len > 0 ? f.seq_len : 2048);
    c.norm = parse_enum(kNormNames, f.norm, "--norm");
    c.mlp = parse_enum(kMlpNames, f.mlp, "--mlp");
    c.positions = parse_enum(kPositionNames, f.positions, "--positions");
    c.bias = !f.no_bias;
    c.qkv_bias = f.qkv_bias;
    if (f.qkv_bias && !f.no_bias) {
        throw UsageError("--qkv-bias: biases on q, k and v only, with --no-bias for the rest");
    }
    c.explicit_head_dim = f.head_dim;
    c.tied_embeddings = !f.untied;
    validate(c);
    return c;
}

// Whether the flags give a custom shape (--layers, --d-model, --heads).
bool has_shape_flags(const CLI::App& cmd) {
    return cmd.count("--layers") + cmd.count("--d-model") + cmd.count("--heads") > 0;
}

// How many models the flags name (one at most), refusing the shape-only flags without a shape.
int count_model_sources(const CLI::App& cmd) {
    const bool shape_flags = has_shape_flags(cmd);
    const int model_sources = (cmd.count("--model") > 0) + (cmd.count("--config") > 0) +
                              (cmd.count("--params") > 0) + (shape_flags ? 1 : 0);
    if (model_sources > 1) {
        throw UsageError(
            "give one model: --model, --config, --params, or --layers/--d-model/--heads");
    }
    if (!shape_flags) {
        for (const char* flag : kShapeOnlyFlags) {
            if (cmd.count(flag) > 0) {
                throw UsageError(
                    std::string(flag) +
                    ": describes a custom shape (with --layers, --d-model and --heads); "
                    "a preset, a config or --params has its own");
            }
        }
    }
    return model_sources;
}

// Every number flag given is finite and positive.
void check_given_numbers(const EstimateFlags& f, const CLI::App& cmd) {
    for (const auto& [flag, v] : {std::pair<const char*, double>{"--params", f.params},
                                  {"--tokens", f.tokens},
                                  {"--peak-tflops", f.peak_tflops},
                                  {"--gpu-mem-gb", f.gpu_mem_gb},
                                  {"--cpu-mem-gb", f.cpu_mem_gb},
                                  {"--measured-tokens-per-s", f.measured_tokens_per_s},
                                  {"--link-gbps", f.link_gbps}}) {
        require_positive(cmd, flag, v);
    }
    // Counts: a whole number of parameters or tokens, and memory of at least one byte (JSON
    // gives the bytes as integers).
    for (const auto& [flag, v] :
         {std::pair<const char*, double>{"--params", f.params}, {"--tokens", f.tokens}}) {
        if (cmd.count(flag) > 0 && v != std::floor(v)) {
            throw UsageError(std::string(flag) + ": must be a whole number (got " + number(v) +
                             ")");
        }
    }
    for (const auto& [flag, gb] : {std::pair<const char*, double>{"--gpu-mem-gb", f.gpu_mem_gb},
                                   {"--cpu-mem-gb", f.cpu_mem_gb}}) {
        if (cmd.count(flag) > 0 && std::round(gb * 1e9) < 1) {
            throw UsageError(std::string(flag) + ": must be at least one byte, 1e-9 GB (got " +
                             number(gb) + ")");
        }
    }
}

// The model: solved for, a parameter count, a config file, a custom shape or a preset.
void set_model(const EstimateFlags& f, const CLI::App& cmd, int model_sources, EstimateInputs& in,
               ReportContext& ctx) {
    const bool shape_flags = has_shape_flags(cmd);
    if (f.solve == "max-params") {
        if (model_sources > 0) {
            throw UsageError(
                "--solve max-params searches over model size: drop "
                "--model/--config/--params/--layers");
        }
        ctx.model_source = "napkin shape (solving for N)";
    } else if (cmd.count("--params") > 0) {
        in.params_only = true;
        in.params = f.params;
        ctx.model_source = "--params " + fmt_sci(f.params);
    } else if (cmd.count("--config") > 0) {
        in.model = load_model_config(f.config);
        ctx.model_source = "config " + f.config;
    } else if (shape_flags) {
        in.model = shape_from_flags(f, cmd);
        ctx.model_source = "custom shape";
    } else {
        in.model = preset_or_throw(f.model);
        ctx.model_source = "preset " + f.model;
    }
    if (cmd.count("--dropout") > 0) {
        if (in.params_only || f.solve == "max-params") {
            throw UsageError("--dropout needs a model shape (not --params or --solve max-params)");
        }
        if (!(f.dropout >= 0 && f.dropout < 1)) {
            throw UsageError("--dropout: must be in [0, 1) (got " + number(f.dropout) + ")");
        }
        in.model.dropout = f.dropout;
    }
}

// Data, recipe, parallelism, fine-tuning and the assumed MFU.
void set_run(const EstimateFlags& f, const CLI::App& cmd, EstimateInputs& in) {
    in.seq_len = f.seq_len;
    if (cmd.count("--seq-len") > 0 && f.seq_len <= 0) {
        throw UsageError("--seq-len: must be a positive integer (got " + std::to_string(f.seq_len) +
                         ")");
    }
    in.micro_batch = f.micro_batch;
    in.grad_accum = f.grad_accum;
    in.tokens = f.tokens;
    in.loss_chunk_rows = f.loss_chunk;
    if (f.loss_chunk < 0) throw UsageError("--loss-chunk: must be 0 (all rows) or positive");
    in.precision = parse_enum(kPrecisionNames, f.precision, "--precision");
    in.optimizer = parse_enum(kOptimizerNames, f.optimizer, "--optimizer");
    in.checkpointing = parse_enum(kCheckpointingNames, f.checkpointing, "--checkpointing");
    in.attention = parse_enum(kAttentionNames, f.attention, "--attention");
    if (f.attention_flops != "causal" && f.attention_flops != "full") {
        throw UsageError("--attention-flops: unknown value '" + f.attention_flops +
                         "' (expected causal|full)");
    }
    in.causal_attention_flops = f.attention_flops == "causal";
    check_fp8_amax_history(f.fp8_amax_history, cmd.count("--fp8-amax-history") > 0, in.precision);
    in.fp8_amax_history = f.fp8_amax_history;
    in.grads_fp32 = f.grads_fp32;
    in.optimizer_fp32 = f.fp32_optimizer_state;
    in.paged_optimizer = f.paged_optimizer;
    in.gpus = f.gpus;
    in.zero = f.zero;
    in.tp = f.tp;
    in.pp = f.pp;
    in.vpp = f.vpp;
    in.sequence_parallel = f.sp;
    if (cmd.count("--micro-batches") > 0) {
        if (cmd.count("--grad-accum") > 0) {
            throw UsageError(
                "--micro-batches and --grad-accum: the same count (micro-batches per step "
                "per replica), give one");
        }
        if (f.micro_batches <= 0) {
            throw UsageError("--micro-batches: must be a positive integer (got " +
                             std::to_string(f.micro_batches) + ")");
        }
        in.grad_accum = f.micro_batches;
    }
    in.offload = parse_enum(kOffloadNames, f.offload, "--offload");
    in.finetune = parse_enum(kFinetuneNames, f.finetune, "--finetune");
    in.lora_rank = f.lora_rank;
    if (cmd.count("--lora-rank") > 0 && in.finetune == Finetune::full) {
        throw UsageError(
            "--lora-rank: needs --finetune lora or qlora (full fine-tuning has no adapters)");
    }
    if (in.grads_fp32 && (in.precision == Precision::fp32 || in.precision == Precision::bf16)) {
        throw UsageError(
            "--grads-fp32: applies to the mixed-precision recipes fp16-amp, bf16-amp and fp8-amp "
            "(got --precision " +
            std::string(enum_name(kPrecisionNames, in.precision)) + ")");
    }
    if (f.solve == "max-micro-batch" && cmd.count("--micro-batch") > 0) {
        throw UsageError(
            "--solve max-micro-batch searches over the micro-batch: drop --micro-batch");
    }
    in.mfu = f.mfu;
    in.measured_tokens_per_s = f.measured_tokens_per_s;
    in.ignore_activations = f.ignore_activations;
}

// Hardware: a table entry, overridden field by field; the data-parallel link.
void set_hardware(const EstimateFlags& f, const CLI::App& cmd, EstimateInputs& in,
                  ReportContext& ctx, std::optional<ChosenProfile>& profile) {
    const GpuSpec& gpu = gpu_or_throw(f.gpu);
    const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
    ctx.gpu = std::string(gpu.name);
    ctx.gpu_full_name = std::string(gpu.full_name);
    in.peak_flops_per_s = gpu.peak_tflops(pd.gemm_compute) * 1e12;
    in.gpu_memory_bytes = gpu.memory_gb * 1e9;
    if (cmd.count("--peak-tflops") > 0) {
        in.peak_flops_per_s = f.peak_tflops * 1e12;
        ctx.gpu += " (peak overridden)";
    }
    if (cmd.count("--gpu-mem-gb") > 0) {
        in.gpu_memory_bytes = std::round(f.gpu_mem_gb * 1e9);  // whole bytes
        ctx.gpu += " (memory overridden)";
    }
    in.cpu_memory_bytes = std::round(f.cpu_mem_gb * 1e9);
    if (cmd.count("--cpu-mem-gb") > 0 && in.offload == Offload::none)
        ctx.flag_notes.push_back(
            "--cpu-mem-gb: nothing is offloaded (--offload none), so host memory is not "
            "checked");
    // The links 3D parallelism places its groups on: the GPU's usual server, or as given.
    const auto link_choice = [](std::string_view name) {
        if (name.empty()) return LinkChoice{};
        const LinkSpec& l = link_or_throw(name);
        return LinkChoice{std::string(l.name), l.bytes_per_s()};
    };
    in.node_link =
        link_choice(cmd.count("--node-link") > 0 ? std::string_view(f.node_link) : gpu.node_link);
    in.network_link =
        link_choice(cmd.count("--net-link") > 0 ? std::string_view(f.net_link) : gpu.network_link);
    if (cmd.count("--link") > 0 && cmd.count("--link-gbps") > 0)
        throw UsageError("--link and --link-gbps: pick one");
    if (cmd.count("--link") > 0) {
        const LinkSpec& l = link_or_throw(f.link);
        in.link_bytes_per_s = l.bytes_per_s();
        ctx.link = std::string(l.name);
    } else if (cmd.count("--link-gbps") > 0) {
        in.link_bytes_per_s = f.link_gbps * 1e9 / 8;
        ctx.link = "--link-gbps " + fmt_sci(f.link_gbps);
    }
    set_time_model(f.time, cmd, gpu, in, ctx, profile);
}

// --solve fastest-layout: its flags checked, the search run, and `in` set to the answer's layout
// (the base's when nothing fits).
SolveResult solve_fastest_layout_flags(const CLI::App& cmd, EstimateInputs& in, ReportContext& ctx,
                                       Estimator& est) {
    if (in.gpus < 2) {
        throw UsageError(
            "--solve fastest-layout: lays out --gpus W GPUs at the global batch of "
            "the flags given; give --gpus > 1");
    }
    if (in.params_only) {
        throw UsageError(
            "--solve fastest-layout: needs a model shape (--model, --config or "
            "--layers, --d-model and --heads), not --params");
    }
    if (in.mfu != 0 || in.profile == nullptr || cmd.count("--mfu") > 0) {
        throw UsageError(
            "--solve fastest-layout: needs the performance model's prediction "
            "(drop --mfu)");
    }
    SolveResult solved = solve_fastest_layout(in, est);
    if (!solved.candidates.empty()) {
        std::string placed_link;
        in = with_layout(in, solved.candidates.front(), &placed_link);
        if (!placed_link.empty()) ctx.link = placed_link;
    }
    return solved;
}

// The estimate, or the --solve search and the estimate at its answer, printed as asked.
void estimate_and_print(const EstimateFlags& f, const CLI::App& cmd, EstimateInputs& in,
                        ReportContext& ctx) {
    Estimator est;
    Estimate e;
    SolveResult solved;
    if (cmd.count("--solve") == 0) {
        e = est.run(in);
    } else if (f.solve == "max-params") {
        solved = solve_max_params(in, est);
        in.params_only = true;
        in.params = solved.value > 0 ? solved.value : 1e6;
        e = solved.at;
        ctx.solve = f.solve;
        ctx.solved = &solved;
    } else if (f.solve == "max-micro-batch") {
        solved = solve_max_micro_batch(in, est);
        in.micro_batch = solved.value > 0 ? static_cast<std::int64_t>(solved.value) : 1;
        e = solved.at;
        ctx.solve = f.solve;
        ctx.solved = &solved;
    } else if (f.solve == "fastest") {
        solved = solve_fastest(in, est, solve_precisions(f.time));
        if (!solved.candidates.empty()) {
            const SolveCandidate& best = solved.candidates.front();
            in.precision = best.precision;
            in.micro_batch = best.micro_batch;
            in.checkpointing = best.checkpointing;
            in.attention = best.attention;
            in.zero = best.zero;
        }
        e = solved.at;
        ctx.solve = f.solve;
        ctx.solved = &solved;
    } else if (f.solve == "fastest-layout") {
        solved = solve_fastest_layout_flags(cmd, in, ctx, est);
        e = solved.at;
        ctx.solve = f.solve;
        ctx.solved = &solved;
    } else if (f.solve == "min-tp-pp") {
        solved = solve_min_tp_pp(in, est);
        in.tp = solved.tp;  // the answer's layout, or the largest tried when nothing fits
        in.pp = solved.pp;
        in.vpp = solved.pp > 1 ? in.vpp : 1;
        in.sequence_parallel = in.sequence_parallel && solved.tp > 1;
        if (in.gpus == 1) in.gpus = solved.tp * solved.pp;
        e = solved.at;
        ctx.solve = f.solve;
        ctx.solved = &solved;
    } else {
        throw UsageError(
            "--solve: unknown value '" + f.solve +
            "' (expected max-params|max-micro-batch|min-tp-pp|fastest|fastest-layout)");
    }

    // The report names settings by field ({tokens}); the user reads them as flags.
    if (f.json) {
        std::cout << with_flags(to_json(in, e, ctx).dump(2)) << "\n";
    } else if (f.explain) {
        std::cout << with_flags(format_text(in, e, ctx)) << "\n"
                  << with_flags(format_explain(in, e, ctx));
    } else {
        std::cout << with_flags(format_text(in, e, ctx));
    }
}

void run_estimate(const EstimateFlags& f, const CLI::App& cmd) {
    if (f.list_models) return list_models(f.json);
    if (f.list_gpus) return list_gpus(f.json);
    if (f.list_links) return list_links(f.json);
    if (f.json && f.explain) throw UsageError("--json and --explain: pick one");

    EstimateInputs in;
    ReportContext ctx;
    const int model_sources = count_model_sources(cmd);
    check_given_numbers(f, cmd);
    set_model(f, cmd, model_sources, in, ctx);
    if (inference_requested(f.inference, cmd)) {
        const SharedEstimateFlags shared{f.gpu,   f.peak_tflops, f.gpu_mem_gb, f.mfu, f.lora_rank,
                                         f.solve, f.json,        f.explain,    f.time};
        return run_inference_estimate(f.inference, shared, cmd, in.model, ctx.model_source);
    }
    set_run(f, cmd, in);
    std::optional<ChosenProfile> profile;  // the performance model's, alive for the estimate
    set_hardware(f, cmd, in, ctx, profile);
    estimate_and_print(f, cmd, in, ctx);
}

// The model: a preset, a config file, a parameter count or a custom shape.
void add_model_flags(CLI::App* cmd, EstimateFlags& f) {
    auto g = "Model";
    cmd->add_option("--model", f.model, "Preset name (--list-models)")
        ->group(g)
        ->default_str("gpt2");
    f.model = "gpt2";
    cmd->add_option("--config", f.config,
                    "Model config JSON: napkin's format or a Hugging Face config.json (gpt2, "
                    "llama, mistral, phi3, qwen2)")
        ->group(g);
    cmd->add_option("--params", f.params,
                    "Napkin mode: a dense model known only by its size N (e.g. 70e9)")
        ->group(g);
    cmd->add_option("--layers", f.layers, "Custom shape: layers L")->group(g);
    cmd->add_option("--d-model", f.d_model, "Custom shape: d_model C")->group(g);
    cmd->add_option("--heads", f.heads, "Custom shape: attention heads")->group(g);
    cmd->add_option("--kv-heads", f.kv_heads,
                    "Custom shape: kv heads (default: heads; GQA/MQA when fewer)")
        ->group(g);
    cmd->add_option("--d-ff", f.d_ff, "Custom shape: MLP width (default 4 d_model)")->group(g);
    cmd->add_option("--vocab", f.vocab, "Custom shape: vocabulary (padded to a multiple of 128)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--context", f.context,
                    "Custom shape: context length (default: --seq-len, or 2048)")
        ->group(g);
    cmd->add_option("--norm", f.norm, "Custom shape: layernorm|rmsnorm")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--mlp", f.mlp, "Custom shape: gelu|swiglu")->group(g)->capture_default_str();
    cmd->add_option("--positions", f.positions, "Custom shape: learned|rope")
        ->group(g)
        ->capture_default_str();
    cmd->add_flag("--no-bias", f.no_bias, "Custom shape: no biases")->group(g);
    cmd->add_flag("--untied", f.untied, "Custom shape: separate output head")->group(g);
    cmd->add_option("--head-dim", f.head_dim, "Custom shape: head dim (default d_model / heads)")
        ->group(g);
    cmd->add_flag("--qkv-bias", f.qkv_bias,
                  "Custom shape: biases on q, k and v only (with --no-bias; Qwen2)")
        ->group(g);
    cmd->add_option("--dropout", f.dropout,
                    "Dropout probability (> 0 keeps 1-byte masks; default: the model's, 0)")
        ->group(g);
}

// The data, the recipe, data parallelism and fine-tuning.
void add_run_flags(CLI::App* cmd, EstimateFlags& f) {
    auto g = "Data";
    cmd->add_option("--seq-len", f.seq_len,
                    "Sequence length T (default min(context, 8192); 2048 with --params)")
        ->group(g);
    cmd->add_option("--micro-batch", f.micro_batch, "Micro-batch B per GPU")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--grad-accum", f.grad_accum, "Gradient accumulation steps G")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--tokens", f.tokens, "Training tokens D (default 20 N, Chinchilla)")->group(g);
    cmd->add_option("--loss-chunk", f.loss_chunk,
                    "Rows of fp32 logits alive at once in the chunked loss (0: all)")
        ->group(g)
        ->capture_default_str();

    g = "Recipe";
    cmd->add_option("--precision", f.precision, "fp32|fp16-amp|bf16-amp|bf16|fp8-amp")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--optimizer", f.optimizer,
                    "sgd|momentum|adagrad|rmsprop|adam|adamw|adamw-8bit")
        ->group(g)
        ->capture_default_str();
    cmd->add_flag("--grads-fp32", f.grads_fp32,
                  "Mixed precision: keep fp32 gradients beside the fp32 master (18 B/param, "
                  "Megatron) instead of "
                  "half-precision ones (16, ZeRO paper)")
        ->group(g);
    cmd->add_flag("--fp32-optimizer-state", f.fp32_optimizer_state,
                  "With --precision bf16: optimizer moments in fp32, no master (QLoRA's recipe)")
        ->group(g);
    cmd->add_flag("--paged-optimizer", f.paged_optimizer,
                  "Optimizer state in managed memory preferred on the host, paged in for the "
                  "update and out after it (QLoRA's paged optimizer; napkin train on CUDA)")
        ->group(g);
    cmd->add_option("--checkpointing", f.checkpointing, "none|full|selective")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--attention", f.attention, "naive|flash")->group(g)->capture_default_str();
    cmd->add_option("--attention-flops", f.attention_flops,
                    "causal (6LTC per token, llm.c/Megatron) | full (12LTC, PaLM's MFU)")
        ->group(g)
        ->capture_default_str();

    g = "Parallel";
    cmd->add_option("--fp8-amax-history", f.fp8_amax_history,
                    "fp8-amp's scaling, as napkin train's: delayed over the last N steps' amaxes "
                    "(an amax history of N floats and a scale pair per cast site); 0: current "
                    "scaling, no history")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--gpus", f.gpus, "GPUs W (data parallelism over W / (TP PP) replicas)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--zero", f.zero, "ZeRO stage 0|1|2|3 (3 = FSDP), over the data-parallel group")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--tp", f.tp, "Tensor-parallel GPUs T (Megatron-LM)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--pp", f.pp, "Pipeline stages P (1F1B schedule)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--vpp", f.vpp, "Interleaved chunks per GPU V (the interleaved schedule)")
        ->group(g)
        ->capture_default_str();
    cmd->add_flag("--sp", f.sp, "Sequence parallelism beside --tp (Korthikanti et al. 2022)")
        ->group(g);
    cmd->add_option("--micro-batches", f.micro_batches,
                    "Micro-batches per step per replica M (the pipeline's; same as --grad-accum)")
        ->group(g);
    cmd->add_option("--offload", f.offload, "none|optimizer|optimizer+params (to host memory)")
        ->group(g)
        ->capture_default_str();

    g = "Fine-tuning";
    cmd->add_option("--finetune", f.finetune, "full|lora|qlora")->group(g)->capture_default_str();
    cmd->add_option("--lora-rank", f.lora_rank, "LoRA rank r")->group(g)->capture_default_str();
}

// The hardware, and what to print.
void add_hardware_and_output_flags(CLI::App* cmd, EstimateFlags& f) {
    auto g = "Hardware";
    cmd->add_option("--gpu", f.gpu, "GPU from the table (--list-gpus)")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--peak-tflops", f.peak_tflops,
                    "Override the peak dense TFLOP/s of the recipe's GEMM dtype")
        ->group(g);
    cmd->add_option("--gpu-mem-gb", f.gpu_mem_gb, "Override GPU memory, GB (1e9 bytes)")->group(g);
    cmd->add_option("--cpu-mem-gb", f.cpu_mem_gb, "Host memory per node for offloaded states, GB")
        ->group(g)
        ->capture_default_str();
    cmd->add_option("--mfu", f.mfu,
                    "Assume this model FLOPs utilization instead of predicting the time op by op")
        ->group(g);
    cmd->add_option("--measured-tokens-per-s", f.measured_tokens_per_s,
                    "A measured throughput (whole job): prints the MFU it means")
        ->group(g);
    cmd->add_option(
           "--link", f.link,
           "Data-parallel link from the table (--list-links): time of the step's collectives")
        ->group(g);
    cmd->add_option("--link-gbps", f.link_gbps,
                    "Data-parallel link bandwidth per GPU, one direction, in Gb/s (1e9 bits/s)")
        ->group(g);
    cmd->add_option(
           "--node-link", f.node_link,
           "Link between a node's GPUs for --tp/--pp placement (default: the GPU's, e.g. nvlink4)")
        ->group(g);
    cmd->add_option("--net-link", f.net_link,
                    "Link across nodes for --tp/--pp placement (default: the GPU's, e.g. ib-ndr)")
        ->group(g);

    g = "Output";
    cmd->add_option("--solve", f.solve,
                    "max-params|max-micro-batch: the largest that fits; min-tp-pp: the smallest "
                    "TP x PP; fastest: the highest predicted tokens/s that fits over "
                    "micro-batch, checkpointing, attention and ZeRO stage; fastest-layout: the "
                    "same over TP, PP, VPP, micro-batch and micro-batches, checkpointing and ZeRO "
                    "stage at the global batch given; under --inference, "
                    "max-batch|max-context: the largest batch or prompt that fits")
        ->group(g);
    cmd->add_flag("--json", f.json, "One JSON document (keys in docs/ESTIMATOR.md)")->group(g);
    cmd->add_flag("--explain", f.explain, "Every formula with its numbers and its source")
        ->group(g);
    cmd->add_flag(
           "--ignore-activations", f.ignore_activations,
           "Count model states only (weights, master, gradients, optimizer), as the lectures do")
        ->group(g);
    cmd->add_flag("--list-models", f.list_models, "List the presets and exit")->group(g);
    cmd->add_flag("--list-gpus", f.list_gpus, "List the GPU table and exit")->group(g);
    cmd->add_flag("--list-links", f.list_links,
                  "List the link table (NVLink, InfiniBand, PCIe) and exit")
        ->group(g);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
    auto f = std::make_shared<EstimateFlags>();
    CLI::App* cmd = app.add_subcommand("estimate",
                                       "Napkin math for a training run: parameters, memory per GPU "
                                       "by category, FLOPs, time and MFU.\n"
                                       "Units: GB = 1e9 bytes, GiB = 2^30 bytes, TFLOP/s = 1e12 "
                                       "FLOP/s. Formulas: docs/ESTIMATOR.md.");
    cmd->footer(
        "Examples:\n"
        "  napkin estimate --model gpt2 --seq-len 1024 --micro-batch 16\n"
        "  napkin estimate --params 70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5\n"
        "  napkin estimate --solve max-params --gpus 8 --zero 3 --precision fp32 "
        "--ignore-activations\n"
        "  napkin estimate --model llama2-7b --gpus 16 --zero 3 --link ib-ndr\n"
        "  napkin estimate --model gpt2 --seq-len 1024 --gpu h200 --solve fastest\n"
        "  napkin estimate --model llama3-405b --gpus 16384 --tp 8 --pp 16 --sp --micro-batches 16 "
        "\\\n"
        "                  --checkpointing selective --zero 1\n"
        "  napkin estimate --model llama2-70b --finetune qlora --gpus 2 --zero 3 --checkpointing "
        "full \\\n"
        "                  --offload optimizer+params --gpu rtx3090 --seq-len 2048 --explain\n"
        "  napkin estimate --inference --model llama3-8b --weights nf4 --batch 16 --prompt-len "
        "2048 --gen-len 512");
    add_model_flags(cmd, *f);
    add_run_flags(cmd, *f);
    add_hardware_and_output_flags(cmd, *f);
    add_time_flags(cmd, f->time);
    add_inference_flags(cmd, f->inference);

    cmd->callback([f, cmd] { run_estimate(*f, *cmd); });
}

}  // namespace napkin::cli
