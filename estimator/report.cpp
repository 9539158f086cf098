// The human-readable table of an estimate (the JSON document: report_json.cpp; the notes:
// report_notes.cpp).
#include "estimator/report.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/config_json.h"
#include "core/dtype.h"

namespace napkin {

namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1073741824.0;
constexpr double kSecondsPerDay = 86400.0;

std::string printf_string(const char* fmt, double a) {
    return fmt_number(fmt, a);
}

std::string dtype_label(DType t) { return std::string(dtype_name(t)); }

// Data-parallel traffic per step per rank (estimator/communication.h).
std::string format_communication(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    const CommunicationEstimate& c = e.comm;
    std::ostringstream os;
    char line[256];
    if (in.tp * in.pp > 1) {
        os << "\ndata-parallel communication per step per rank (ring; DP=" << c.world
           << " replicas, ZeRO-" << c.zero << ", G=" << in.grad_accum << ")\n";
    } else {
        os << "\ncommunication per step per rank (ring; W=" << c.world << ", ZeRO-" << c.zero
           << ", G=" << in.grad_accum << ")\n";
    }
    for (const CommLine& l : c.lines) {
        std::snprintf(line, sizeof line, "  %-11s %-15s %-5s %8.0f calls %16s elements %12.4f GB sent\n",
                      l.what.c_str(), std::string(enum_name(kCollectiveNames, l.op)).c_str(),
                      std::string(dtype_name(l.dtype)).c_str(), l.calls, fmt_count(l.elements).c_str(),
                      l.sent_bytes / kGB);
        os << line;
    }
    std::snprintf(line, sizeof line,
                  "  sent %.4f GB, received %.4f GB; ZeRO paper volume %s = %s elements",
                  c.sent_bytes / kGB, c.received_bytes / kGB,
                  paper_volume_label(c.zero, in.grad_accum).c_str(),
                  fmt_count(c.paper_volume_elements).c_str());
    os << line;
    if (c.padding > 0) os << "; padding " << fmt_count(c.padding) << " elements";
    os << "\n";
    if (c.link_bytes_per_s > 0) {
        std::snprintf(line, sizeof line, "  on %s (%.1f GB/s per direction): %s per step",
                      (c.link.empty() ? ctx.link : c.link).c_str(), c.link_bytes_per_s / kGB,
                      fmt_duration(c.seconds).c_str());
        os << line;
        if (e.step_seconds > 0) {
            os << " (" << printf_string("%.0f", 100.0 * c.seconds / e.step_seconds) << "% of the compute step)";
        }
        os << "\n";
    } else {
        os << "  no link given: {link} (napkin estimate {list_links}) or {link_bytes_per_s} for a "
              "time\n";
    }
    return os.str();
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
    if (in.precision == Precision::fp8_amp) {
        if (in.fp8_amax_history > 0)
            os << ", fp8 amax history " << in.fp8_amax_history;
        else
            os << ", fp8 current scaling";
    }
    os << "\n  B=" << in.micro_batch << " T=" << e.seq_len << " G=" << in.grad_accum
       << " W=" << in.gpus;
    if (in.tp * in.pp > 1) {
        const ParallelLayout& p = e.parallel.layout;
        os << " (TP=" << p.tp << " PP=" << p.pp;
        if (p.vpp > 1) os << " V=" << p.vpp;
        os << (p.sp ? " SP" : "") << " DP=" << p.dp << ")";
    }
    os << " ZeRO-" << in.zero << " offload " << enum_name(kOffloadNames, in.offload) << "; "
       << ctx.gpu;
    if (e.peak_flops_per_s > 0) os << " " << printf_string("%.1f", e.peak_flops_per_s / 1e12) << " TFLOP/s dense";
    // The MFU as given, every digit: the time below uses exactly this.
    os << ", " << printf_string("%.0f", e.gpu_capacity_bytes / kGB) << " GB, MFU "
       << (e.time_predicted ? std::string("predicted") : fmt_exact(in.mfu)) << "\n\n";
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

// --paged-optimizer: the state in managed memory, the update's resident peak, the traffic.
void text_paged(std::ostream& os, const PagedOptimizerEstimate& p) {
    os << "paged optimizer state (managed memory, preferred on the host)\n";
    row(os, "optimizer state S, paged", p.state_bytes);
    row(os, "update's resident set", p.step_peak_bytes);
    row(os, "device peak", p.device_peak_bytes);
    row(os, "page traffic per step (2 S)", p.traffic_bytes_per_step);
    os << "  page traffic time per step " << printf_string("%.3f", 1e3 * p.traffic_seconds_per_step)
       << " ms over "
       << (p.link_assumed ? "an assumed 25 GB/s each way (PCIe 4.0 x16)"
                          : "the profile's host-device copy rates")
       << "\n";
}

// Memory per GPU by category, the temporaries itemized, and the host's share when offloading.
void text_memory(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    char line[256];
    const PrecisionDTypes pd = recipe_dtypes(in);
    if (in.tp * in.pp > 1) {
        const Estimate::StageSummary& st =
            e.parallel.stages[static_cast<std::size_t>(e.parallel.shown)];
        if (in.pp > 1) {
            os << "\nmemory per GPU of pipeline stage " << st.stage + 1 << " of " << in.pp << " ("
               << st.layers << " layers, " << printf_string("%g", st.in_flight)
               << " micro-batches in flight; " << fmt_count(st.params) << " parameters)\n";
        } else {
            os << "\nmemory per GPU, one of " << in.tp << " tensor-parallel ranks ("
               << fmt_count(st.params) << " parameters)\n";
        }
        os << "                                     GB (1e9)  GiB (2^30)\n";
    } else {
        os << "\nmemory per GPU                       GB (1e9)  GiB (2^30)\n";
    }
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
        if (t.fp8_history > 0) row(os, "  fp8 amax histories, scales", t.fp8_history);
        if (t.gemm_workspace > 0) row(os, "  GEMM workspace", t.gemm_workspace);
        if (t.grad_norm_workspace > 0) row(os, "  global norm partial sums", t.grad_norm_workspace);
        if (t.anomaly_slots > 0) row(os, "  anomaly check slots", t.anomaly_slots);
    }
    if (e.gpu.data > 0) row(os, "data (token batches)", e.gpu.data);
    row(os, "total", e.gpu.total());
    if (e.paged) text_paged(os, *e.paged);
    const double peak = e.paged ? e.paged->device_peak_bytes : e.gpu.total();
    std::snprintf(line, sizeof line, "  => %s the GPU's %.0f GB (%.0f%% used)\n",
                  e.fits_gpu ? "fits" : "DOES NOT FIT", e.gpu_capacity_bytes / kGB,
                  100.0 * peak / e.gpu_capacity_bytes);
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
    std::snprintf(line, sizeof line, "  %-34s %12s\n", in.params_only ? "6N" : "6N, N = total",
                  fmt_sci(e.flops_6n_per_token).c_str());
    os << line;
    if (!in.params_only) {  // Kaplan et al.'s N leaves the embeddings out
        std::snprintf(line, sizeof line, "  %-34s %12s\n", "6N, N = non-embedding (Kaplan)",
                      fmt_sci(e.flops_6n_non_embedding_per_token).c_str());
        os << line;
    }
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
    os << "per step: " << fmt_count(e.tokens_per_step)
       << (in.tp * in.pp > 1 ? " tokens (B T G DP), " : " tokens (B T G W), ")
       << fmt_sci(e.model_flops_per_step) << " model FLOPs\n";
    if (e.tokens > 0) {
        os << "run: D = " << fmt_sci(e.tokens) << " tokens, 6ND = " << fmt_sci(e.run_flops_6nd)
           << " FLOPs, model FLOPs " << fmt_sci(e.run_model_flops) << ", " << fmt_count(e.steps)
           << " steps\n";
    } else {
        os << "run: no length ({tokens} not given; fine-tuning has no default)\n";
    }
}

// Time at the assumed MFU (when a peak is known), and the MFU a measured throughput means.
void text_time(std::ostream& os, const EstimateInputs& in, const Estimate& e,
               const ReportContext& ctx) {
    if (e.time_predicted) {
        os << format_time_model(in, e, ctx);
    } else if (e.peak_flops_per_s > 0) {
        os << "\ntime at MFU " << fmt_exact(in.mfu) << " on " << in.gpus << " x "
           << printf_string("%.1f", e.peak_flops_per_s / 1e12) << " TFLOP/s\n";
        os << "  step " << fmt_duration(e.step_seconds);
        if (e.parallel.bubble_seconds > 0) {
            os << " (compute " << fmt_duration(e.parallel.compute_seconds) << " + pipeline bubble "
               << fmt_duration(e.parallel.bubble_seconds) << ")";
        }
        if (e.tokens > 0) {
            os << ", run " << fmt_duration(e.run_seconds);
            if (e.run_seconds < 2 * kSecondsPerDay) {
                os << " (" << printf_string("%.3f", e.run_seconds / kSecondsPerDay) << " days)";
            }
        }
        os << "; HFU " << printf_string("%.3f", e.hfu) << "\n";
    }
    if (in.measured_tokens_per_s > 0) {
        if (e.peak_flops_per_s <= 0) os << "\ntime\n";
        os << "  measured " << printf_string("%.0f", in.measured_tokens_per_s) << " tokens/s";
        if (e.peak_flops_per_s > 0) {
            os << " means MFU " << printf_string("%.3f", e.measured_mfu) << ", HFU "
               << printf_string("%.3f", e.measured_hfu) << ";";
        }
        os << " step " << fmt_duration(e.measured_step_seconds);
        if (e.tokens > 0) os << ", run " << fmt_duration(e.measured_run_seconds) << " at that rate";
        os << "\n";
    }
}

// The answer of --solve.
void text_solve(std::ostream& os, const ReportContext& ctx, const Estimate& e) {
    if (ctx.solved != nullptr && (ctx.solve == "fastest" || ctx.solve == "fastest-layout")) {
        os << format_fastest(*ctx.solved, e.gpu_capacity_bytes, ctx.solve == "fastest-layout");
    } else if (ctx.solved != nullptr) {
        os << "\nsolve " << ctx.solve << ": ";
        if (ctx.solved->value <= 0) {
            os << "nothing fits (even the smallest candidate needs " << fmt_bytes(ctx.solved->at.gpu.total())
               << " per GPU)\n";
        } else if (ctx.solve == "min-tp-pp") {
            os << "TP " << ctx.solved->tp << " x PP " << ctx.solved->pp << " = "
               << fmt_count(ctx.solved->value) << " GPUs per model replica";
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

}  // namespace

std::string fmt_number(const char* fmt, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v);
    return buf;
}

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

std::string fmt_duration(double s) {
    if (s < 1e-3) return printf_string("%.1f us", s * 1e6);
    if (s < 1) return printf_string("%.1f ms", s * 1e3);
    if (s < 120) return printf_string("%.2f s", s);
    if (s < 7200) return printf_string("%.1f min", s / 60);
    if (s < 2 * kSecondsPerDay) return printf_string("%.1f h", s / 3600);
    return printf_string("%.1f days", s / kSecondsPerDay);
}

std::string fmt_exact(double x) {
    char buf[40];
    for (int digits = 1; digits <= 17; ++digits) {
        std::snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (std::strtod(buf, nullptr) == x) break;
    }
    return buf;
}

std::string fmt_bytes(double bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f GB (%.2f GiB)", bytes / kGB, bytes / kGiB);
    return buf;
}

std::string format_text(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    std::ostringstream os;
    text_header(os, in, e, ctx);
    text_parameters(os, in, e);
    text_memory(os, in, e);
    if (e.comm.world > 1) os << format_communication(in, e, ctx);
    os << format_parallel(in, e);
    if (in.tp * in.pp > 1) {
        os << "\nactivations per GPU of that stage   GB (1e9)  GiB (2^30)\n";
    } else {
        os << "\nactivations, one micro-batch        GB (1e9)  GiB (2^30)\n";
    }
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

}  // namespace napkin
