// The GPT-3-like shapes of the Megatron-LM papers (Narayanan et al. 2021, Table 1; Korthikanti
// et al. 2022, Table 3), for the tests that hold the 3D estimate against them.
#pragma once

#include <cstdint>

#include "core/model_config.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"

namespace napkin {

// GELU MLP of 4h, LayerNorm with biases, learned positions, tied embeddings, Megatron-LM's GPT-2
// vocabulary padded to 51200, s = 2048, dropout on (the paper counts its masks).
inline ModelConfig gpt3(int layers, std::int64_t h, int heads) {
    ModelConfig c = preset_or_throw("gpt2");
    c.name = "gpt3-like";
    c.vocab_size = 51200;
    c.padded_vocab_size = 51200;
    c.context_length = 2048;
    c.n_layers = layers;
    c.d_model = h;
    c.n_heads = heads;
    c.n_kv_heads = heads;
    c.d_ff = 4 * h;
    c.dropout = 0.1;
    return c;
}

// A Megatron-LM run of the papers: s = 2048, b = 1, T x P x DP GPUs with M micro-batches per
// replica, fp32 main gradients, naive attention, on DGX A100 80 GB nodes (NVLink 3 inside, one
// HDR InfiniBand HCA per GPU across).
inline EstimateInputs a100_megatron_run(const ModelConfig& model, int tp, int pp, int gpus,
                                        std::int64_t micro_batches) {
    const GpuSpec& a100 = gpu_or_throw("a100-80gb");
    EstimateInputs in;
    in.model = model;
    in.seq_len = 2048;
    in.grads_fp32 = true;
    in.attention = AttentionImpl::naive;
    in.tp = tp;
    in.pp = pp;
    in.gpus = gpus;
    in.grad_accum = micro_batches;
    in.peak_flops_per_s = a100.tflops_bf16 * 1e12;
    in.gpu_memory_bytes = a100.memory_gb * 1e9;
    in.node_link = {"nvlink3", 300e9};
    in.network_link = {"ib-hdr", 25e9};
    return in;
}

}  // namespace napkin
