// The closed-form napkin math, one function per formula, each with its source. These are the
// lecture's and the papers' formulas as written; the detailed model (detailed_model.h) sums the
// op plan instead, and the estimator reports both. docs/ESTIMATOR.md derives each one.
#pragma once

#include <cstdint>

#include "core/recipe.h"

namespace napkin::formulas {

// Training FLOPs per token for N parameters: 2N forward + 4N backward (Kaplan et al. 2020,
// section 2.1; the lecture's "6 x parameters x tokens").
inline double training_flops_per_token_6n(double n_params) { return 6.0 * n_params; }

// Fine-tuning with adapters (LoRA/QLoRA) on a frozen base of N parameters with m adapter
// parameters: 2N forward and 2N for the input gradients through the frozen weights (no weight
// gradients), and 6m for the adapters: 4N + 6m (the QLoRA paper's accounting of LoRA's savings:
// the frozen weights skip the backward's weight-gradient GEMMs).
inline double adapter_training_flops_per_token(double n_base, double n_adapters) {
    return 4.0 * n_base + 6.0 * n_adapters;
}

// The attention score FLOPs per token that 6N leaves out: QK^T and PV are 2 * 2 * T * d_model
// per layer forward when every pair is counted, times 3 for forward + backward:
// 12 * L * T * d_model (PaLM, Chowdhery et al. 2022, appendix B). A causal mask keeps half of
// the pairs, 6 * L * T * d_model (llm.c, Megatron-LM's MFU counting).
inline double attention_flops_per_token(double layers, double seq_len, double d_model, bool causal) {
    return (causal ? 6.0 : 12.0) * layers * seq_len * d_model;
}

// Time to do `flops` on `gpus` devices of `peak_flops_per_s` each at utilization `mfu`.
inline double training_seconds(double flops, double gpus, double peak_flops_per_s, double mfu) {
    return flops / (gpus * peak_flops_per_s * mfu);
}

// The MFU that a measured throughput means (PaLM appendix B): achieved model FLOP/s over peak.
inline double mfu_from_throughput(double tokens_per_s, double flops_per_token, double gpus,
                                  double peak_flops_per_s) {
    return tokens_per_s * flops_per_token / (gpus * peak_flops_per_s);
}

// Bytes per parameter of each model state under a recipe (the lecture: fp32 AdamW is 4 + 4 +
// 8 = 16; ZeRO paper section 3.1: mixed-precision Adam is 2 + 2 + K with K = 12).
struct BytesPerParam {
    double weights = 0;    // working copy
    double master = 0;     // fp32 master copy (mixed precision)
    double grads = 0;
    double optimizer = 0;  // moments, plus 8-bit block scales
    double total() const { return weights + master + grads + optimizer; }
};
BytesPerParam bytes_per_param(Precision p, OptimizerKind opt, bool grads_fp32);

// NF4 with double quantization (Dettmers et al. 2023, QLoRA, section 3): 4-bit codes, one
// 8-bit absmax per 64 weights, and one fp32 constant per 256 of those absmax values:
// 4 + 8/64 + 32/(64*256) = 4.127 bits per weight.
inline constexpr double kNf4BitsPerParam = 4.0 + 8.0 / 64.0 + 32.0 / (64.0 * 256.0);

// ZeRO (Rajbhandari et al. 2020, figure 1): per-GPU model-state bytes for Psi parameters over
// Nd data-parallel GPUs, with 2 + 2 + K bytes per parameter:
//   stage 0 (DP):  (2 + 2 + K) Psi     stage 1 (Pos): 2 Psi + 2 Psi + K Psi / Nd
//   stage 2 (Pos+g): 2 Psi + (2 + K) Psi / Nd      stage 3 (Pos+g+p): (2 + 2 + K) Psi / Nd
// Generalized to any recipe's bytes per parameter.
double zero_model_state_bytes(const BytesPerParam& b, double psi, int stage, int nd);

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// section 4.1: activation bytes of one transformer layer for sequence s, micro-batch b,
// hidden h, a heads, with 2-byte activations and 1-byte dropout masks:
//   no recomputation       s*b*h*(34 + 5*a*s/h)
//   selective recomputation s*b*h*34          (attention scores recomputed)
//   full recomputation      s*b*h*2           (only the layer input kept)
// Generalized (docs/ESTIMATOR.md): element size p bytes, dropout on or off, and the model's
// own widths: the 16 = 5 + 3 + 4 + 4 of GPT-2 becomes 4 + q/h + qkv/h + fc/h + ff/h, so GQA,
// SwiGLU and explicit head dims are counted with their real projections. At p = 2, dropout on
// and GPT-2 widths these are the paper's formulas exactly.
// With t-way tensor parallelism (section 4.2.1, Table 2), per rank: the norms' inputs, the two
// GEMM inputs they feed and the two dropout masks stay whole, 4p + 2 (the paper's 10), the
// rest and the scores are split t ways:
//   s*b*h*(10 + 24/t + 5*a*s/(h*t));  with sequence parallelism (4.2.2) all of it: s*b*h*34/t
//   + 5*a*s^2*b/t; selective recomputation drops the score terms; full recomputation keeps the
//   layer input, s*b*h*2, split t ways along s under sequence parallelism.
struct LayerActivationTerms {
    double s, b, h, a;  // sequence, micro-batch, hidden, heads
    double q_width;     // NH HD, the attention output: h unless the head dim is explicit
    double qkv_width;   // h for MHA; h + 2 * kv_dim under GQA
    double fc_width;    // 4h for GPT-2; 2 * d_ff for SwiGLU (gate and up)
    double ff_width;    // 4h for GPT-2; d_ff
    double p;           // bytes per activation element
    bool dropout;
    double t = 1;                    // tensor-parallel ranks
    bool sequence_parallel = false;  // the whole terms split t ways too
};
double korthikanti_layer_bytes(const LayerActivationTerms& t, Checkpointing ckpt, bool flash);

}  // namespace napkin::formulas
