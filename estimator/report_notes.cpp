// The notes of an estimate: one sentence for each default taken, approximation made or input
// that changes how to read the numbers (Estimate::notes), for the text and --json.
#include <string>

#include "estimator/report.h"

namespace napkin {

namespace {

// Defaults taken and approximations of the model, the data and the recipe.
void model_and_recipe_notes(const EstimateInputs& in, const Estimate& e,
                            std::vector<std::string>& out) {
    const auto has = [&](Note n) { return (e.notes & n) != 0; };
    if (has(kNoteParamsOnlyFlops)) {
        out.push_back(
            "{params}: FLOPs are 6N per token exactly (the lecture's rule); the attention term "
            "needs a shape, so it is left out");
    }
    if (has(kNoteParamsOnlyShape)) {
        out.push_back(
            "{params}: activations and temporaries use a derived dense shape of about N "
            "parameters: L = " +
            std::to_string(e.n_layers) + ", d_model = 128 L = " + std::to_string(e.d_model) +
            ", 128-wide heads, d_ff = 4 d_model, vocab 32000");
    }
    if (has(kNoteSeqLenDefault)) {
        out.push_back("{seq_len} not given: T = " + std::to_string(e.seq_len) +
                      (in.params_only ? "" : " (the model's context, at most 8192)"));
    }
    if (has(kNoteTokensDefault)) {
        out.push_back("{tokens} not given: D = 20 N = " + fmt_sci(e.tokens) +
                      " tokens (Chinchilla-optimal, Hoffmann et al. 2022)");
    }
    if (has(kNoteNoPeak)) {
        out.push_back(
            std::string(
                "no peak FLOP/s for this GPU in the recipe's GEMM dtype: no time estimate") +
            (in.measured_tokens_per_s > 0 ? " and no MFU for {measured_tokens_per_s}" : "") +
            " (pick another {precision} or give {peak_flops_per_s})");
    }
    if (has(kNoteFp32Peak)) {
        out.push_back(
            "fp32 recipe: time uses the GPU's non-tensor-core fp32 peak, as the lecture does; "
            "TF32 GEMMs would run faster ({peak_flops_per_s} to override)");
    }
    if (has(kNoteSelectiveFlash)) {
        out.push_back(
            "selective recomputation with flash attention: flash already keeps no attention "
            "scores, so nothing more is recomputed");
    }
    if (has(kNoteActivationsIgnored)) {
        out.push_back(
            "{ignore_activations}: memory counts model states only (weights, master, "
            "gradients, optimizer), as the lectures do");
    }
    if (has(kNoteSeqBeyondContext)) {
        out.push_back("{seq_len} " + std::to_string(e.seq_len) +
                      " exceeds the model's context length " +
                      std::to_string(in.model.context_length));
    }
}

// The parallel layout, the run's length and the hardware.
void layout_and_run_notes(const EstimateInputs& in, const Estimate& e,
                          std::vector<std::string>& out) {
    const auto has = [&](Note n) { return (e.notes & n) != 0; };
    if (has(kNoteZeroOneGpu)) {
        out.push_back(in.tp * in.pp > 1 ? "{zero} over one data-parallel replica shards nothing"
                                        : "{zero} over one GPU shards nothing");
    }
    if (has(kNoteOffloadReplicated)) {
        out.push_back("{offload} " + std::string(enum_name(kOffloadNames, in.offload)) +
                      " with {zero} 0 on " + std::to_string(in.gpus) +
                      " GPUs: every rank keeps a full host copy of the offloaded states (" +
                      fmt_bytes(e.cpu.total()) + " each); {zero} 1-3 shards them");
    }
    if (has(kNoteFinetuneNoTokens)) {
        out.push_back(
            "{tokens} not given: fine-tuning has no default length (Chinchilla's D = 20 N "
            "is a pretraining budget), so no run FLOPs or time");
    }
    if (has(kNoteUnevenStages)) {
        out.push_back(
            "{pp} " + std::to_string(in.pp) + " does not divide the " + std::to_string(e.n_layers) +
            " layers: the first stages hold one more (Megatron-LM needs the first and last "
            "stage sizes given)");
    }
    if (has(kNoteFewMicroBatches)) {
        out.push_back("fewer micro-batches per step ({grad_accum} " +
                      std::to_string(in.grad_accum) + ") than pipeline stages ({pp} " +
                      std::to_string(in.pp) +
                      "): the pipeline never fills, and the bubble exceeds the compute");
    }
    if (has(kNoteGroupWithoutLink)) {
        out.push_back(
            "a parallel group has no known link for this GPU: its communication is not timed "
            "({node_link}, {net_link})");
    }
    if (has(kNoteRunUnderOneStep)) {
        out.push_back(
            "D = " + fmt_sci(e.tokens) + " tokens is less than one step's " +
            fmt_sci(e.tokens_per_step) +
            " (B T G W): the run is a fraction of a step, and its time less than the step's");
    }
    if (has(kNoteLinkOneGpu)) {
        out.push_back(
            "{link} / {link_bytes_per_s}: one GPU exchanges nothing, so there is no communication "
            "to "
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
        out.push_back("offloaded states need " + fmt_bytes(e.cpu_node_bytes) +
                      " of host memory per node, more than " + fmt_bytes(e.cpu_capacity_bytes) +
                      " ({cpu_memory_bytes})");
    }
}

}  // namespace

std::vector<std::string> note_texts(const EstimateInputs& in, const Estimate& e) {
    std::vector<std::string> out;
    model_and_recipe_notes(in, e, out);
    layout_and_run_notes(in, e, out);
    return out;
}

}  // namespace napkin
