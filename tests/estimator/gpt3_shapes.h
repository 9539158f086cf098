// The GPT-3-like shapes of the Megatron-LM papers (Narayanan et al. 2021, Table 1; Korthikanti
// et al. 2022, Table 3), for the tests that hold the 3D estimate against them.
#pragma once

#include <cstdint>

#include "core/model_config.h"

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

}  // namespace napkin
