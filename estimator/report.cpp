// The human-readable table and the JSON document of an estimate.
#include "estimator/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/config_json.h"
#include "core/dtype.h"

namespace napkin {

namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1073741824.0;
constexpr double kSecondsPerDay = 86400.0;

std::string printf_string(const char* fmt, double a) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, a);
    return buf;
}

}  // namespace

std::string fmt_duration(double s) {
    if (s < 1e-3) return printf_string("%.1f us", s * 1e6);
    if (s < 1) return printf_string("%.1f ms", s * 1e3);
    if (s < 120) return printf_string("%.2f s", s);
    if (s < 7200) return printf_string("%.1f min", s / 60);
    if (s < 2 * kSecondsPerDay) return printf_string("%.1f h", s / 3600);
    return printf_string("%.1f days", s / kSecondsPerDay);
}

namespace {

std::string dtype_label(DType t) { return std::string(dtype_name(t)); }

nlohmann::json null_if_zero(double v, bool known) { return known ? nlohmann::json(v) : nlohmann::json(nullptr); }

// Data-parallel traffic per step per rank (estimator/communication.h).
std::string format_communication(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    const CommunicationEstimate& c = e.comm;
    std::ostringstream os;
    char line[256];
    os << "\ncommunication per step per rank (ring; W=" << c.world << ", ZeRO-" << c.zero << ", G=" << in.grad_accum
       << ")\n";
    for (const CommLine& l : c.lines) {
        std::snprintf(line, sizeof line, "  %-11s %-15s %-5s %8.0f calls %16s elements %12.4f GB sent\n",
                      l.what.c_str(), std::string(enum_name(kCollectiveNames, l.op)).c_str(),
                      std::string(dtype_name(l.dtype)).c_str(), l.calls, fmt_count(l.elements).c_str(),
                      l.sent_bytes / kGB);
        os << line;
    }
    std::snprintf(line, sizeof line, "  sent %.4f GB, received %.4f GB; ZeRO paper volume %s = %s elements",
                  c.sent_bytes / kGB, c.received_bytes / kGB, c.zero == 3 ? "3 psi" : "2 psi",
                  fmt_count(c.paper_volume_elements).c_str());
    os << line;
    if (c.padding > 0) os << "; padding " << fmt_count(c.padding) << " elements";
    os << "\n";
    if (c.link_bytes_per_s > 0) {
        std::snprintf(line, sizeof line, "  on %s (%.1f GB/s per direction): %s per step", ctx.link.c_str(),
                      c.link_bytes_per_s / kGB, fmt_duration(c.seconds).c_str());
        os << line;
        if (e.step_seconds > 0) {
            os << " (" << printf_string("%.0f", 100.0 * c.seconds / e.step_seconds) << "% of the compute step)";
        }
        os << "\n";
    } else {
        os << "  no link given: --link (napkin estimate --list-links) or --link-gbps for a time\n";
    }
    return os.str();
}

nlohmann::json communication_json(const CommunicationEstimate& c, const ReportContext& ctx) {
    using nlohmann::json;
    json lines = json::array();
    for (const CommLine& l : c.lines) {
        lines.push_back({{"what", l.what},
                         {"op", enum_name(kCollectiveNames, l.op)},
                         {"dtype", dtype_name(l.dtype)},
                         {"calls", l.calls},
                         {"elements", l.elements},
                         {"sent_bytes", l.sent_bytes},
                         {"received_bytes", l.received_bytes}});
    }
    const bool timed = c.link_bytes_per_s > 0;
    return json{{"world", c.world},
                {"zero", c.zero},
                {"psi", c.psi},
                {"padding_elements", c.padding},
                {"paper_volume_elements", c.paper_volume_elements},
                {"collectives", lines},
                {"elements", c.elements},
                {"sent_bytes", c.sent_bytes},
                {"received_bytes", c.received_bytes},
                {"link", ctx.link.empty() ? json(nullptr) : json(ctx.link)},
                {"link_bytes_per_s", null_if_zero(c.link_bytes_per_s, timed)},
                {"seconds", null_if_zero(c.seconds, timed)}};
}

// One memory row: the label, then GB and GiB.
void row(std::ostream& os, const std::string& label, double bytes) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-28s %10.3f %10.3f\n", label.c_str(), bytes / kGB,
                  bytes / kGiB);
    os << line;
}

// The recipe, the shape of the run and the hardware, in two lines.
void text_header(std::ostream& os, const EstimateInputs& in, const Estimate& e,
                 const ReportContext& ctx) {
    os << "napkin estimate: " << ctx.model_source << ", " << enum_name(kPrecisionNames, in.precision) << ", "
       << enum_name(kOptimizerNames, in.optimizer) << ", " << enum_name(kAttentionNames, in.attention)
       << " attention, checkpointing " << enum_name(kCheckpointingNames, in.checkpointing);
    if (in.finetune != Finetune::full) {
        os << ", " << enum_name(kFinetuneNames, in.finetune) << " rank " << in.lora_rank;
    }
    os << "\n  B=" << in.micro_batch << " T=" << e.seq_len << " G=" << in.grad_accum << " W=" << in.gpus
       << " ZeRO-" << in.zero << " offload " << enum_name(kOffloadNames, in.offload) << "; " << ctx.gpu;
    if (e.peak_flops_per_s > 0) os << " " << printf_string("%.1f", e.peak_flops_per_s / 1e12) << " TFLOP/s dense";
    os << ", " << printf_string("%.0f", e.gpu_capacity_bytes / kGB) << " GB, MFU "
       << (e.time_predicted ? "predicted" : printf_string("%.2f", in.mfu)) << "\n\n";
}

// The parameter counts and the bytes each trainable one takes.
void text_parameters(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    char line[256];
    os << "parameters\n";
    std::snprintf(line, sizeof line, "  %-16s %20s\n", "total", fmt_count(e.total_params).c_str());
    os << line;
    if (!in.params_only) {
        const double emb = static_cast<double>(e.params.token_embedding + e.params.position_embedding + e.params.head);
        std::snprintf(line, sizeof line, "  %-16s %20s\n  %-16s %20s\n", "embedding", fmt_count(emb).c_str(),
                      "non-embedding", fmt_count(static_cast<double>(e.params.non_embedding)).c_str());
        os << line;
    }
    if (!in.params_only && e.params.allocated != e.params.total) {
        // Memory counts the embedding (and an untied head) padded to Vp rows: said here, so that
        // bytes per parameter x the total above is not taken for the memory rows below.
        std::snprintf(line, sizeof line,
                      "  %-16s %20s  (vocab %s padded to %s; memory counts these)\n", "allocated",
                      fmt_count(static_cast<double>(e.params.allocated)).c_str(),
                      fmt_count(static_cast<double>(in.model.vocab_size)).c_str(),
                      fmt_count(static_cast<double>(in.model.padded_vocab_size)).c_str());
        os << line;
    }
    std::snprintf(line, sizeof line, "  %-16s %20s\n", "trainable", fmt_count(e.trainable_params).c_str());
    os << line;
    if (e.frozen_params > 0) {
        std::snprintf(line, sizeof line, "  %-16s %20s  (%s)\n", "frozen", fmt_count(e.frozen_params).c_str(),
                      in.finetune == Finetune::qlora ? "block linears in NF4, the rest in the working dtype"
                                                     : "in the working dtype");
        os << line;
    }
    if (e.lora_params > 0) {  // trainable + frozen: the base model (total above) plus its adapters
        std::snprintf(line, sizeof line, "  %-16s %20s  (trainable + frozen)\n", "with adapters",
                      fmt_count(e.trainable_params + e.frozen_params).c_str());
        os << line;
    }

    const auto& b = e.bytes_per_param;
    std::snprintf(line, sizeof line,
                  "\nbytes per trainable parameter: weights %.6g + master %.6g + gradients %.6g + "
                  "optimizer %.6g = %.6g\n",
                  b.weights, b.master, b.grads, b.optimizer, b.total());
    os << line;
}

// Memory per GPU by category, the temporaries itemized, and the host's share when offloading.
void text_memory(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    char line[256];
    const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
    os << "\nmemory per GPU                       GB (1e9)  GiB (2^30)\n";
    const std::string weights_dtype =
        dtype_label(pd.weights) + (in.finetune == Finetune::qlora ? "/nf4" : "");
    row(os, "weights (" + weights_dtype + ")", e.gpu.weights);
    row(os, "master weights (fp32)", e.gpu.master);
    row(os, "gradients (" + dtype_label(pd.grads) + ")", e.gpu.grads);
    row(os,
        "optimizer (" + std::to_string(optimizer_state_count(in.optimizer)) + " x " +
            dtype_label(pd.optimizer_state) + ")",
        e.gpu.optimizer);
    row(os, "activations", e.gpu.activations);
    row(os, "temporaries", e.gpu.temporaries);
    if (e.gpu.temporaries > 0) {
        const auto& t = e.temporaries;
        if (t.activation_grads > 0) row(os, "  activation gradients", t.activation_grads);
        if (t.op_workspace > 0) row(os, "  op workspace (loss chunk)", t.op_workspace);
        if (t.attention_workspace > 0) row(os, "  naive attention dS", t.attention_workspace);
        if (t.param_gather > 0) row(os, "  gathered params (2 units)", t.param_gather);
        if (t.dequant > 0) row(os, "  NF4 dequant buffer", t.dequant);
        if (t.fp8_cast > 0) row(os, "  fp8 casts (weight, grad)", t.fp8_cast);
        if (t.gemm_workspace > 0) row(os, "  GEMM workspace", t.gemm_workspace);
        if (t.grad_norm_workspace > 0) row(os, "  global norm partial sums", t.grad_norm_workspace);
    }
    row(os, "total", e.gpu.total());
    std::snprintf(line, sizeof line, "  => %s the GPU's %.0f GB (%.0f%% used)\n", e.fits_gpu ? "fits" : "DOES NOT FIT",
                  e.gpu_capacity_bytes / kGB, 100.0 * e.gpu.total() / e.gpu_capacity_bytes);
    os << line;
    if (e.cpu.total() > 0) {
        os << "host memory for offloaded states, per GPU\n";
        row(os, "weights", e.cpu.weights);
        row(os, "master weights (fp32)", e.cpu.master);
        row(os, "gradients (fp32)", e.cpu.grads);
        row(os, "optimizer", e.cpu.optimizer);
        row(os, "per node", e.cpu_node_bytes);
        std::snprintf(line, sizeof line, "  => %s the node's %.0f GB\n", e.fits_cpu ? "fits" : "DOES NOT FIT",
                      e.cpu_capacity_bytes / kGB);
        os << line;
    }
}

// FLOPs per token, per step and per run.
void text_flops(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    char line[256];
    os << "\nFLOPs per token\n";
    std::snprintf(line, sizeof line, "  %-34s %12s\n", "6N", fmt_sci(e.flops_6n_per_token).c_str());
    os << line;
    if (e.flops_adapters_per_token > 0) {
        std::snprintf(line, sizeof line, "  %-34s %12s\n", "4N + 6 N_adapters (frozen base)",
                      fmt_sci(e.flops_adapters_per_token).c_str());
        os << line;
    }
    if (!in.params_only) {
        std::snprintf(line, sizeof line, "  %-34s %12s\n  %-34s %12s\n", "6 N_matmul (linear layers + head)",
                      fmt_sci(e.flops_matmul_per_token).c_str(),
                      in.causal_attention_flops ? "attention 6LTC (causal)" : "attention 12LTC (PaLM)",
                      fmt_sci(e.flops_attention_per_token).c_str());
        os << line;
    }
    std::snprintf(line, sizeof line, "  %-34s %12s\n  %-34s %12s\n", "model FLOPs (MFU basis)",
                  fmt_sci(e.model_flops_per_token).c_str(), "hardware FLOPs (+ recompute)",
                  fmt_sci(e.hardware_flops_per_token).c_str());
    os << line;
    os << "per step: " << fmt_count(e.tokens_per_step) << " tokens (B T G W), " << fmt_sci(e.model_flops_per_step)
       << " model FLOPs\n";
    os << "run: D = " << fmt_sci(e.tokens) << " tokens, 6ND = " << fmt_sci(e.run_flops_6nd) << " FLOPs, model FLOPs "
       << fmt_sci(e.run_model_flops) << ", " << fmt_count(e.steps) << " steps\n";
}

// Time at the assumed MFU (when a peak is known), and the MFU a measured throughput means.
void text_time(std::ostream& os, const EstimateInputs& in, const Estimate& e,
               const ReportContext& ctx) {
    if (e.time_predicted) {
        os << format_time_model(in, e, ctx);
    } else if (e.peak_flops_per_s > 0) {
        os << "\ntime at MFU " << printf_string("%.2f", in.mfu) << " on " << in.gpus << " x "
           << printf_string("%.1f", e.peak_flops_per_s / 1e12) << " TFLOP/s\n";
        os << "  step " << fmt_duration(e.step_seconds) << ", run " << fmt_duration(e.run_seconds);
        if (e.run_seconds < 2 * kSecondsPerDay) {
            os << " (" << printf_string("%.3f", e.run_seconds / kSecondsPerDay) << " days)";
        }
        os << "\n";
        if (in.measured_tokens_per_s > 0) {
            os << "  measured " << printf_string("%.0f", in.measured_tokens_per_s) << " tokens/s means MFU "
               << printf_string("%.3f", e.measured_mfu) << "\n";
        }
    }
}

// The answer of --solve.
void text_solve(std::ostream& os, const ReportContext& ctx, const Estimate& e) {
    if (ctx.solved != nullptr && ctx.solve == "fastest") {
        os << format_fastest(*ctx.solved, e.gpu_capacity_bytes);
    } else if (ctx.solved != nullptr) {
        os << "\nsolve " << ctx.solve << ": ";
        if (ctx.solved->value <= 0) {
            os << "nothing fits (even the smallest candidate needs " << fmt_bytes(ctx.solved->at.gpu.total())
               << " per GPU)\n";
        } else if (ctx.solve == "max-params") {
            os << fmt_count(ctx.solved->value) << " parameters (" << fmt_sci(ctx.solved->value)
               << ")";
        } else {
            os << "micro-batch " << fmt_count(ctx.solved->value);
        }
        if (ctx.solved->value > 0) {
            os << (ctx.solved->at_limit ? " or more (the search stops there, and it still fits)\n"
                                        : "\n");
        }
    }
}

// What the estimate was asked: the model, the run, the recipe, the hardware.
nlohmann::json inputs_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    using nlohmann::json;
    json inputs;
    if (in.params_only) {
        inputs["model"] = json{{"params", in.params}};
    } else {
        inputs["model"] = model_config_to_json(in.model);
    }
    inputs["model_source"] = ctx.model_source;
    inputs["seq_len"] = e.seq_len;
    inputs["micro_batch"] = in.micro_batch;
    inputs["grad_accum"] = in.grad_accum;
    inputs["tokens"] = e.tokens;
    inputs["precision"] = enum_name(kPrecisionNames, in.precision);
    inputs["optimizer"] = enum_name(kOptimizerNames, in.optimizer);
    inputs["grads_fp32"] = in.grads_fp32;
    inputs["checkpointing"] = enum_name(kCheckpointingNames, in.checkpointing);
    inputs["attention"] = enum_name(kAttentionNames, in.attention);
    inputs["attention_flops"] = in.causal_attention_flops ? "causal" : "full";
    inputs["gpus"] = in.gpus;
    inputs["zero"] = in.zero;
    inputs["offload"] = enum_name(kOffloadNames, in.offload);
    inputs["finetune"] = enum_name(kFinetuneNames, in.finetune);
    inputs["lora_rank"] = in.finetune == Finetune::full ? json(nullptr) : json(in.lora_rank);
    inputs["gpu"] = ctx.gpu;
    inputs["peak_flops_per_s"] = in.peak_flops_per_s;
    inputs["gpu_memory_bytes"] = in.gpu_memory_bytes;
    inputs["cpu_memory_bytes"] = in.cpu_memory_bytes;
    inputs["mfu"] = in.mfu;
    inputs["ignore_activations"] = in.ignore_activations;
    return inputs;
}

// Memory per GPU by category (temporaries itemized), and the host's for offloaded states.
nlohmann::json memory_json(const Estimate& e) {
    using nlohmann::json;
    auto mem = [](const MemoryBytes& m) {
        return json{{"weights", m.weights},         {"master", m.master},
                    {"grads", m.grads},             {"optimizer", m.optimizer},
                    {"activations", m.activations}, {"temporaries", m.temporaries},
                    {"model_states", m.model_states()}, {"total", m.total()}};
    };
    json gpu = mem(e.gpu);
    gpu["capacity"] = e.gpu_capacity_bytes;
    gpu["fits"] = e.fits_gpu;
    const auto& t = e.temporaries;
    gpu["temporaries_detail"] = {{"activation_grads", t.activation_grads},
                                 {"op_workspace", t.op_workspace},
                                 {"attention_workspace", t.attention_workspace},
                                 {"param_gather", t.param_gather},
                                 {"dequant", t.dequant},
                                 {"fp8_cast", t.fp8_cast},
                                 {"gemm_workspace", t.gemm_workspace},
                                 {"grad_norm_workspace", t.grad_norm_workspace}};
    json cpu = mem(e.cpu);
    cpu["node_total"] = e.cpu_node_bytes;
    cpu["capacity"] = e.cpu_capacity_bytes;
    cpu["fits"] = e.fits_cpu;
    return {{"unit", "bytes"}, {"gpu", gpu}, {"cpu", cpu}};
}

}  // namespace

std::string fmt_count(double n) {
    const long long v = std::llround(n);
    std::string digits = std::to_string(v < 0 ? -v : v);
    std::string out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

std::string fmt_sci(double x) { return printf_string("%.3g", x); }

std::string fmt_bytes(double bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f GB (%.2f GiB)", bytes / kGB, bytes / kGiB);
    return buf;
}

std::vector<std::string> note_texts(const EstimateInputs& in, const Estimate& e) {
    std::vector<std::string> out;
    const auto has = [&](Note n) { return (e.notes & n) != 0; };
    if (has(kNoteParamsOnlyFlops)) {
        out.push_back("--params: FLOPs are 6N per token exactly (the lecture's rule); the attention term "
                      "needs a shape, so it is left out");
    }
    if (has(kNoteParamsOnlyShape)) {
        out.push_back("--params: activations and temporaries use a derived dense shape of about N "
                      "parameters: L = " + std::to_string(e.n_layers) + ", d_model = 128 L = " +
                      std::to_string(e.d_model) + ", 128-wide heads, d_ff = 4 d_model, vocab 32000");
    }
    if (has(kNoteSeqLenDefault)) {
        out.push_back("--seq-len not given: T = " + std::to_string(e.seq_len) +
                      (in.params_only ? "" : " (the model's context, at most 8192)"));
    }
    if (has(kNoteTokensDefault)) {
        out.push_back("--tokens not given: D = 20 N = " + fmt_sci(e.tokens) +
                      " tokens (Chinchilla-optimal, Hoffmann et al. 2022)");
    }
    if (has(kNoteNoPeak)) {
        out.push_back(
            std::string(
                "no peak FLOP/s for this GPU in the recipe's GEMM dtype: no time estimate") +
            (in.measured_tokens_per_s > 0 ? " and no MFU for --measured-tokens-per-s" : "") +
            " (pick another --precision or give --peak-tflops)");
    }
    if (has(kNoteFp32Peak)) {
        out.push_back("fp32 recipe: time uses the GPU's non-tensor-core fp32 peak, as the lecture does; "
                      "TF32 GEMMs would run faster (--peak-tflops to override)");
    }
    if (has(kNoteSelectiveFlash)) {
        out.push_back("selective recomputation with flash attention: flash already keeps no attention "
                      "scores, so nothing more is recomputed");
    }
    if (has(kNoteActivationsIgnored)) {
        out.push_back("--ignore-activations: memory counts model states only (weights, master, "
                      "gradients, optimizer), as the lectures do");
    }
    if (has(kNoteSeqBeyondContext)) {
        out.push_back("--seq-len " + std::to_string(e.seq_len) + " exceeds the model's context length " +
                      std::to_string(in.model.context_length));
    }
    if (has(kNoteZeroOneGpu)) out.push_back("--zero over one GPU shards nothing");
    if (has(kNoteRunUnderOneStep)) {
        out.push_back(
            "D = " + fmt_sci(e.tokens) + " tokens is less than one step's " +
            fmt_sci(e.tokens_per_step) +
            " (B T G W): the run is a fraction of a step, and its time less than the step's");
    }
    if (has(kNoteLinkOneGpu)) {
        out.push_back(
            "--link / --link-gbps: one GPU exchanges nothing, so there is no communication to "
            "time");
    }
    if (has(kNoteQloraPrecision)) {
        out.push_back(
            in.precision == Precision::fp32
                ? "QLoRA under fp32: each NF4 weight is dequantized to fp32 for its GEMM, "
                  "which runs at the fp32 peak (the QLoRA paper computes in bf16)"
                : "QLoRA under fp8-amp: each NF4 weight is dequantized to bf16 and cast to "
                  "E4M3 for its GEMM, two roundings of the frozen base (the QLoRA paper "
                  "computes in bf16)");
    }
    if (has(kNoteCpuDoesNotFit)) {
        out.push_back("offloaded states need " + fmt_bytes(e.cpu_node_bytes) + " of host memory per node, more than " +
                      fmt_bytes(e.cpu_capacity_bytes) + " (--cpu-mem-gb)");
    }
    return out;
}

std::string format_text(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    std::ostringstream os;
    text_header(os, in, e, ctx);
    text_parameters(os, in, e);
    text_memory(os, in, e);
    if (e.comm.world > 1) os << format_communication(in, e, ctx);
    os << "\nactivations, one micro-batch        GB (1e9)  GiB (2^30)\n";
    row(os, "closed form (Korthikanti)", e.act_closed_form_bytes);
    row(os, "op plan, kept in forward", e.act_detailed_kept_bytes);
    row(os, "op plan, peak in backward", e.act_detailed_bytes);
    text_flops(os, in, e);
    text_time(os, in, e, ctx);
    text_solve(os, ctx, e);
    auto notes = note_texts(in, e);
    notes.insert(notes.end(), ctx.flag_notes.begin(), ctx.flag_notes.end());
    if (!notes.empty()) {
        os << "\nnotes\n";
        for (const auto& n : notes) os << "  - " << n << "\n";
    }
    return os.str();
}

nlohmann::json to_json(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    using nlohmann::json;
    json j;
    j["schema"] = "napkin-estimate/1";
    j["inputs"] = inputs_json(in, e, ctx);

    j["params"] = {
        {"total", e.total_params},
        {"embedding", in.params_only ? json(nullptr)
                                     : json(e.params.token_embedding + e.params.position_embedding +
                                            e.params.head)},
        {"non_embedding", in.params_only ? json(nullptr) : json(e.params.non_embedding)},
        {"matmul", in.params_only ? json(nullptr) : json(e.params.matmul)},
        {"allocated", in.params_only ? json(nullptr) : json(e.params.allocated)},
        {"trainable", e.trainable_params},
        {"frozen", e.frozen_params},
        {"lora", e.lora_params},
        {"total_with_adapters", e.total_params + e.lora_params},
    };
    const auto& b = e.bytes_per_param;
    j["bytes_per_param"] = {{"weights", b.weights}, {"master", b.master}, {"grads", b.grads},
                            {"optimizer", b.optimizer}, {"total", b.total()}};
    j["memory"] = memory_json(e);
    j["activations"] = {{"closed_form", e.act_closed_form_bytes},
                        {"closed_form_layer", e.act_closed_form_layer_bytes},
                        {"detailed_peak", e.act_detailed_bytes},
                        {"detailed_kept", e.act_detailed_kept_bytes},
                        {"detailed_layer", e.act_detailed_layer_bytes}};
    j["flops"] = {
        {"per_token",
         {{"six_n", e.flops_6n_per_token},
          {"adapters_4n_6m", null_if_zero(e.flops_adapters_per_token, e.flops_adapters_per_token > 0)},
          {"matmul", e.flops_matmul_per_token},
          {"attention", e.flops_attention_per_token},
          {"model", e.model_flops_per_token},
          {"hardware", e.hardware_flops_per_token},
          {"other", e.other_flops_per_token}}},
        {"per_step", {{"tokens", e.tokens_per_step}, {"model", e.model_flops_per_step}, {"hardware", e.hardware_flops_per_step}}},
        {"run", {{"tokens", e.tokens}, {"six_nd", e.run_flops_6nd}, {"model", e.run_model_flops}, {"steps", e.steps}}},
    };
    const bool timed = e.peak_flops_per_s > 0 || e.time_predicted;
    j["time"] = {{"peak_flops_per_s", null_if_zero(e.peak_flops_per_s, e.peak_flops_per_s > 0)},
                 {"mfu", e.time_predicted ? null_if_zero(e.mfu, e.mfu > 0) : json(in.mfu)},
                 {"step_seconds", null_if_zero(e.step_seconds, timed)},
                 {"run_seconds", null_if_zero(e.run_seconds, timed)},
                 {"run_days", null_if_zero(e.run_seconds / kSecondsPerDay, timed)},
                 {"hfu", null_if_zero(e.hfu, e.hfu > 0)}};
    add_time_model_json(e, ctx, j["time"]);
    j["measured"] = in.measured_tokens_per_s > 0
                        ? json{{"tokens_per_s", in.measured_tokens_per_s}, {"mfu", null_if_zero(e.measured_mfu, timed)}}
                        : json(nullptr);
    if (ctx.solved != nullptr) {
        j["solve"] = {{"kind", ctx.solve},
                      {"value", ctx.solved->value},
                      {"evaluations", ctx.solved->evaluations},
                      {"at_limit", ctx.solved->at_limit}};
        if (ctx.solve == "fastest") j["solve"]["candidates"] = fastest_json(*ctx.solved);
    }
    j["communication"] = communication_json(e.comm, ctx);
    j["fits"] = e.fits();
    auto notes = note_texts(in, e);
    notes.insert(notes.end(), ctx.flag_notes.begin(), ctx.flag_notes.end());
    j["notes"] = notes;
    return j;
}

}  // namespace napkin
