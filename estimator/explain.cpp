// --explain: each formula the estimate used, with its numbers substituted and its source.
// The same derivations, in prose, are in docs/ESTIMATOR.md.
#include <cstdio>
#include <sstream>

#include "estimator/report.h"

namespace napkin {

namespace {

std::string num(double x) {
    char buf[48];
    if (x != 0 && (x >= 1e7 || x < 1e-2)) std::snprintf(buf, sizeof buf, "%.4g", x);
    else std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

std::string gb(double bytes) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
    return buf;
}

// 1. The parameter count, term by term.
void explain_parameters(std::ostream& os, const EstimateInputs& in, const Estimate& e,
                        const ReportContext& ctx) {
    const double L = e.n_layers;
    os << "1. Parameters\n";
    if (in.params_only) {
        os << "   N = " << fmt_count(e.total_params)
           << (ctx.solve == "max-params" ? " (the largest that fits: {solve} max-params)\n"
                                         : " (given by {params})\n");
    } else {
        // Exact integers, so that the sum can be checked by hand.
        const auto n = [](std::int64_t v) { return fmt_count(static_cast<double>(v)); };
        os << "   N = token embedding V*C + position table + L * per-layer + final norm [+ untied "
              "head]\n"
           << "     = " << n(e.params.token_embedding) << " + " << n(e.params.position_embedding)
           << " + " << L << " * " << n(e.params.per_layer) << " + " << n(e.params.final_norm)
           << " + " << n(e.params.head) << " = " << fmt_count(e.total_params) << "\n"
           << "   (core/model_config.cpp; the presets' counts equal the published ones, tests pin "
              "them)\n";
        if (e.params.allocated != e.params.total) {
            os << "   allocated: the embedding" << (in.model.tied_embeddings ? "" : " and the head")
               << " padded to Vp = " << n(in.model.padded_vocab_size)
               << " rows (V = " << n(in.model.vocab_size)
               << ", a multiple of 128) = " << n(e.params.allocated)
               << "; memory below counts these\n";
        }
    }
    if (in.finetune != Finetune::full) {
        os << "   trainable = LoRA adapters r*(parts*K + N) on each block linear (Hu et al. 2021), r = "
           << in.lora_rank << ": " << num(e.lora_params) << "; the base " << num(e.frozen_params) << " is frozen\n";
    }
}

// 2. Bytes per trainable parameter under the recipe.
void explain_bytes_per_param(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    const auto& b = e.bytes_per_param;
    os << "\n2. Bytes per trainable parameter (" << enum_name(kPrecisionNames, in.precision) << ", "
       << enum_name(kOptimizerNames, in.optimizer) << ")\n"
       << "   weights " << num(b.weights) << " + master " << num(b.master) << " + gradients "
       << num(b.grads) << " + optimizer " << num(b.optimizer) << " = " << num(b.total())
       << " bytes\n"
       << "   (lecture: fp32 AdamW = 4 + 4 + 8 = 16; ZeRO paper sec. 3.1: mixed precision 2 + 2 + "
          "K, K = 12;\n"
       << "    {grads_fp32} keeps fp32 gradients beside the master copy: 2 + 4 + 4 + 8 = 18, as "
          "Megatron does)\n";
    if (in.optimizer == OptimizerKind::adamw_8bit) {
        os << "   8-bit AdamW: 2 moments x (1 byte + 4 bytes / 2048-element block) (Dettmers et al. 2022)\n";
    }
    if (in.finetune == Finetune::qlora) {
        os << "   QLoRA base linears: NF4 with double quantization = 4 + 8/64 + 32/(64*256) = "
           << num(formulas::kNf4BitsPerParam) << " bits per weight (Dettmers et al. 2023, sec. 3)\n";
    }
}

// 3. Model states per GPU under ZeRO, and what is offloaded.
void explain_model_states(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    const int W = in.gpus;
    os << "\n3. Model states per GPU: ZeRO stage " << in.zero << " over W = " << W
       << " GPUs (Rajbhandari et al. 2020, fig. 1)\n"
       << "   stage 0: (w + g + s) Psi; 1: (w + g) Psi + s Psi/W; 2: w Psi + (g + s) Psi/W; 3: (w "
          "+ g + s) Psi/W\n"
       << "   (s = master + optimizer bytes)\n";
    // Psi as the memory rows count it: a full model's allocated (padded) parameters, sharded in
    // units padded to a multiple of W; LoRA's adapters; napkin mode's N.
    const bool full_model = !in.params_only && in.finetune == Finetune::full;
    os << "   Psi = "
       << fmt_count(full_model ? static_cast<double>(e.params.allocated) : e.trainable_params)
       << (full_model ? " allocated" : "") << " trainable parameters"
       << (full_model && W > 1 ? ", each unit padded to a multiple of W as the engine shards it"
                               : "")
       << "\n"
       << "   weights " << gb(e.gpu.weights) << ", master " << gb(e.gpu.master) << ", gradients "
       << gb(e.gpu.grads) << ", optimizer " << gb(e.gpu.optimizer) << " = "
       << gb(e.gpu.model_states()) << "\n";
    if (in.finetune != Finetune::full) {
        os << "   frozen base: "
           << (in.zero == 3 && W > 1
                   ? "sharded too at stage 3 (FSDP + QLoRA), each unit's frozen tensors as flat storage of the\n"
                     "     working dtype (NF4 bytes packed in it) padded to a multiple of W, a shard per GPU"
                   : "replicated on every GPU below stage 3 (never communicated)")
           << "; its bytes are in the weights above\n";
    }
    if (in.optimizer == OptimizerKind::adamw_8bit && in.zero >= 1 && !in.params_only) {
        os << "   8-bit states sharded: every parameter and shard aligned to the 2048-element blocks, so each\n"
              "     block (and its absmax) lies whole in one GPU's shard: optimizer = 2 (S + 4 S/2048) bytes\n";
    }
    if (in.offload != Offload::none) {
        os << "   offload " << enum_name(kOffloadNames, in.offload)
           << " (ZeRO-Offload, Ren et al. 2021): master and optimizer state, with an fp32 gradient copy, live in\n"
           << "   host memory" << (in.offload == Offload::optimizer_params ? "; so do the weights, gathered two units at a time" : "")
           << ": " << gb(e.cpu.total()) << " per GPU, " << gb(e.cpu_node_bytes) << " per node of "
           << std::min(W, in.gpus_per_node) << " GPUs\n";
    }
    if (const auto& p = e.paged) {
        os << "   paged optimizer (QLoRA, Dettmers et al. 2023 sec. 3: NVIDIA unified memory): the "
              "state S = "
           << gb(p->state_bytes) << " lives in managed\n"
           << "     memory preferred on the host, prefetched to the GPU before the update and back "
              "after it:\n"
           << "     device peak = max(forward/backward total without S, w + master + g + S + norm "
              "workspace + batches)\n"
           << "                 = max(" << gb(e.gpu.total()) << ", " << gb(p->step_peak_bytes)
           << ") = " << gb(p->device_peak_bytes) << "\n"
           << "     page traffic = 2 S per step = " << gb(p->traffic_bytes_per_step) << ", S / "
           << gb(p->to_device_bytes_per_s) << "/s + S / " << gb(p->to_host_bytes_per_s)
           << "/s = " << num(1e3 * p->traffic_seconds_per_step) << " ms"
           << (p->link_assumed ? " (link assumed: PCIe 4.0 x16, no device profile's copy rates)"
                               : " (the device profile's host-device copy rates)")
           << "\n";
    }
}

// 4. Activations, the closed form beside the op plan's.
void explain_activations(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    const double L = e.n_layers;
    os << "\n4. Activations for one micro-batch (B = " << in.micro_batch << ", T = " << e.seq_len << ")\n"
       << "   closed form, Korthikanti et al. 2022 sec. 4.1, per layer with p bytes per element:\n"
       << "     none:      s*b*h*(p*(5 + qkv/h + fc/h + ff/h) + 2*dropout) + a*s^2*b*(p + dropout*(1 + p))\n"
       << "     selective: s*b*h*(p*(5 + qkv/h + fc/h + ff/h) + 2*dropout)   (also flash attention)\n"
       << "     full:      s*b*h*p\n"
       << "     (for GPT-2 widths at p = 2 with dropout: 34 s*b*h + 5 a*s^2*b, the paper's formula)\n"
       << "     = " << gb(e.act_closed_form_layer_bytes) << " per layer; x L = " << L
       << " + embedding output s*b*h*(p + dropout) + output layer 2*s*b*h*p = " << gb(e.act_closed_form_bytes) << "\n"
       << "   op plan (core/op_plan.cpp): every tensor each op keeps, in its dtype = " << gb(e.act_detailed_kept_bytes)
       << " kept;\n     + one block rebuilt during its backward (checkpointing) = " << gb(e.act_detailed_bytes) << "\n"
       << "     (the plan adds the norms' fp32 statistics, flash's logsumexp and LoRA's adapter inputs, and\n"
       << "      keeps the model's real dtypes, fp8 GEMM inputs included)\n";
    if (in.ignore_activations) os << "   {ignore_activations}: not counted in the total\n";
}

// 5. FLOPs per token.
void explain_flops(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    const double T = static_cast<double>(e.seq_len);
    const double L = e.n_layers;
    const double C = static_cast<double>(e.d_model);
    os << "\n5. FLOPs per token\n"
       << "   6N = 6 * " << num(e.total_params) << " = " << num(e.flops_6n_per_token)
       << "   (Kaplan et al. 2020: forward 2N, backward 4N; N the total, as the lecture counts)\n";
    if (!in.params_only) {
        os << "   6N with Kaplan et al.'s N, the non-embedding parameters: 6 * "
           << num(static_cast<double>(e.params.non_embedding)) << " = "
           << num(e.flops_6n_non_embedding_per_token) << "\n";
    }
    if (!in.params_only) {
        os << "   attention = " << (in.causal_attention_flops ? "6" : "12")
           << " * L * T * C = " << (in.causal_attention_flops ? "6" : "12") << " * " << L << " * "
           << T << " * " << C << " = " << num(e.flops_attention_per_token)
           << (in.causal_attention_flops
                   ? "   (causal: llm.c, Megatron-LM; {attention_flops} full gives PaLM's 12LTC)\n"
                   : "   (all T^2 pairs: PaLM appendix B; {attention_flops} causal gives 6LTC)\n");
        if (in.finetune == Finetune::full) {
            os << "   model FLOPs from the op plan = 6 N_matmul + attention over the exact "
                  "T(T+1)/2 pairs + biases\n"
               << "     = " << num(e.flops_matmul_per_token)
               << " + ... = " << num(e.model_flops_per_token);
        } else {
            // A frozen base runs its forward (2) and its input gradients (2), never its weight
            // gradients: 4 N_matmul, plus the adapters' 6 per parameter.
            os << "   model FLOPs from the op plan = 4 N_matmul (the frozen base: forward and "
                  "input gradients, no\n"
               << "     weight gradients) + the adapters + attention over the exact T(T+1)/2 pairs "
                  "+ biases\n"
               << "     = " << num(4.0 * static_cast<double>(e.params.matmul))
               << " + ... = " << num(e.model_flops_per_token);
        }
        os << "   (N_matmul = " << num(static_cast<double>(e.params.matmul))
           << ": the linear layers and the head)\n";
    }
    os << "   hardware FLOPs = model + recomputation (checkpointing, flash's backward) = "
       << num(e.hardware_flops_per_token) << "\n";
    if (in.checkpointing == Checkpointing::selective && in.attention == AttentionImpl::naive) {
        os << "     selective: the core attention forward runs again to rebuild what it dropped, Q "
              "K^T and\n"
              "     P V, 4 b s^2 h per layer over all pairs (Korthikanti et al.'s 1 + s/3h counts "
              "12 b s^2 h)\n";
    }
}

// 6. The run's FLOPs and time.
void explain_run(std::ostream& os, const EstimateInputs& in, const Estimate& e) {
    const int W = in.gpus;
    os << "\n6. The run\n";
    if (e.tokens > 0) {
        os << "   D = " << num(e.tokens) << " tokens; 6ND = " << num(e.run_flops_6nd)
           << " FLOPs; model FLOPs = " << num(e.model_flops_per_token)
           << " * D = " << num(e.run_model_flops) << "\n";
    } else {
        os << "   no D: fine-tuning has no default length (give {tokens} for the run's FLOPs and "
              "time)\n";
    }
    if (e.peak_flops_per_s > 0) {
        os << "   time = FLOPs / (W * peak * MFU) = " << num(e.run_model_flops) << " / (" << W
           << " * " << num(e.peak_flops_per_s) << " * " << in.mfu << ") = " << num(e.run_seconds)
           << " s = " << num(e.run_seconds / 86400.0) << " days\n"
           << "   (the lecture's question 1: 6 * 70e9 * 15e12 / (1024 * 989.5e12 * 0.5) / 86400 = "
              "143.9 days)\n"
           << "   per step: " << num(e.model_flops_per_step) << " FLOPs over " << W
           << " GPUs = " << num(e.step_seconds - e.parallel.bubble_seconds) << " s";
        if (e.parallel.bubble_seconds > 0) {
            os << " + the pipeline bubble (P - 1) / (V M) = " << num(e.parallel.bubble_fraction)
               << " of it = " << num(e.step_seconds) << " s";
        }
        os << "\n";
        if (in.measured_tokens_per_s > 0) {
            os << "   measured MFU = tokens/s * FLOPs/token / (W * peak) = "
               << num(in.measured_tokens_per_s) << " * " << num(e.model_flops_per_token) << " / ("
               << W << " * " << num(e.peak_flops_per_s) << ") = " << num(e.measured_mfu)
               << "   (PaLM appendix B)\n"
               << "   measured HFU = MFU * hardware / model FLOPs = " << num(e.measured_hfu)
               << "; at that rate a step (B T G DP tokens) takes " << num(e.measured_step_seconds)
               << " s";
            if (e.tokens > 0)
                os << ", the run (D tokens) " << num(e.measured_run_seconds / 86400.0) << " days";
            os << "\n";
        }
    } else {
        os << "   no peak FLOP/s known for this GPU and recipe: no time\n";
    }
}

// 7. Data-parallel traffic (more than one GPU only).
void explain_communication(std::ostream& os, const EstimateInputs& in, const Estimate& e,
                           const ReportContext& ctx) {
    const CommunicationEstimate& c = e.comm;
    if (c.world > 1) {
        os << "\n7. Communication per step per GPU (ZeRO-" << c.zero << ", W = " << c.world
           << ", G = " << in.grad_accum << " micro-batches per GPU)\n"
           << "   ZeRO paper sec. 7: DDP and stage 1 move 2 Psi per step, stage 2 (G + 1) Psi, "
              "stage 3 3 G Psi: "
           << paper_volume_label(c.zero, in.grad_accum) << " = "
           << fmt_count(c.paper_volume_elements) << " elements (psi = " << fmt_count(c.psi) << ")\n"
           << "   ring algorithm: a reduce-scatter or all-gather of n elements sends (W - 1) * "
              "ceil(n / W) per GPU,\n"
           << "     an all-reduce twice that; every collective runs over a whole unit padded to a "
              "multiple of W:\n";
        for (const CommLine& l : c.lines) {
            os << "     " << l.what << ", " << enum_name(kCollectiveNames, l.op) << " in " << dtype_name(l.dtype)
               << ": " << num(l.calls) << " calls over " << fmt_count(l.elements) << " elements -> "
               << gb(l.sent_bytes) << " sent\n";
        }
        if (in.finetune != Finetune::full && c.zero == 3) {
            os << "     (frozen: the sharded base gathered before each region that reads it, a block twice per\n"
                  "      micro-batch, as FSDP + QLoRA does; the adapters' own collectives are the stage's)\n";
        }
        os << "   sent " << gb(c.sent_bytes) << " = received per GPU per step";
        if (c.link_bytes_per_s > 0) {
            os << "; over " << ctx.link << " at " << num(c.link_bytes_per_s / 1e9) << " GB/s: " << num(c.seconds)
               << " s (bandwidth term only, no overlap)";
        }
        os << "\n";
    }
}

}  // namespace

std::string format_explain(const EstimateInputs& in, const Estimate& e, const ReportContext& ctx) {
    std::ostringstream os;
    os << "How napkin got these numbers (" << ctx.model_source
       << "). Sources: docs/ESTIMATOR.md.\n\n";
    explain_parameters(os, in, e, ctx);
    explain_bytes_per_param(os, in, e);
    explain_model_states(os, in, e);
    explain_activations(os, in, e);
    explain_flops(os, in, e);
    explain_run(os, in, e);
    explain_communication(os, in, e, ctx);
    os << explain_parallel(in, e);
    return os.str();
}

}  // namespace napkin
