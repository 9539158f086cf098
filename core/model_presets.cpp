// Named model shapes. Each preset's parameter count equals the published count (tests pin it);
// the shapes are those of the models' own config.json files.
#include <string>
#include <vector>

#include "core/check.h"
#include "core/model_config.h"

namespace napkin {

namespace {

ModelConfig gpt2_shape(const char* name, int layers, std::int64_t d_model, int heads) {
    ModelConfig c;
    c.name = name;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    c.context_length = 1024;
    c.n_layers = layers;
    c.d_model = d_model;
    c.n_heads = heads;
    c.n_kv_heads = heads;
    c.d_ff = 4 * d_model;
    c.norm = NormKind::layernorm;
    c.positions = PositionKind::learned;
    c.mlp = MlpKind::gelu;
    c.bias = true;
    c.tied_embeddings = true;
    return c;
}

ModelConfig llama_shape(const char* name, std::int64_t vocab, std::int64_t context, int layers,
                        std::int64_t d_model, int heads, int kv_heads, std::int64_t d_ff) {
    ModelConfig c;
    c.name = name;
    c.vocab_size = vocab;
    c.padded_vocab_size = pad_vocab(vocab);
    c.context_length = context;
    c.n_layers = layers;
    c.d_model = d_model;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.d_ff = d_ff;
    c.norm = NormKind::rmsnorm;
    c.positions = PositionKind::rope;
    c.mlp = MlpKind::swiglu;
    c.bias = false;
    c.tied_embeddings = false;
    return c;
}

ModelConfig tiny_shape() {
    // Byte-level vocabulary; small enough that `napkin train` runs a few hundred steps in
    // seconds on 2 CPU cores.
    ModelConfig c = gpt2_shape("tiny", 2, 128, 4);
    c.vocab_size = 256;
    c.padded_vocab_size = 256;
    c.context_length = 128;
    return c;
}

}  // namespace

const std::vector<ModelConfig>& model_presets() {
    static const std::vector<ModelConfig> presets = {
        tiny_shape(),
        gpt2_shape("gpt2", 12, 768, 12),
        gpt2_shape("gpt2-medium", 24, 1024, 16),
        gpt2_shape("gpt2-large", 36, 1280, 20),
        gpt2_shape("gpt2-xl", 48, 1600, 25),
        // LLaMA (1) 65B, the QLoRA paper's largest model (Dettmers et al. 2023).
        llama_shape("llama1-65b", 32000, 2048, 80, 8192, 64, 64, 22016),
        llama_shape("llama2-7b", 32000, 4096, 32, 4096, 32, 32, 11008),
        llama_shape("llama2-13b", 32000, 4096, 40, 5120, 40, 40, 13824),
        llama_shape("llama2-70b", 32000, 4096, 80, 8192, 64, 8, 28672),
        llama_shape("llama3-8b", 128256, 8192, 32, 4096, 32, 8, 14336),
        llama_shape("llama3-70b", 128256, 8192, 80, 8192, 64, 8, 28672),
        llama_shape("llama3-405b", 128256, 131072, 126, 16384, 128, 8, 53248),
    };
    return presets;
}

const std::vector<PresetSource>& preset_sources() {
    static const std::vector<PresetSource> sources = {
        {"tiny", 445952, "napkin's demo model (no published count)"},
        {"gpt2", 124439808, "openai-community/gpt2: GPT2LMHeadModel.num_parameters()"},
        {"gpt2-medium", 354823168, "openai-community/gpt2-medium: num_parameters()"},
        {"gpt2-large", 774030080, "openai-community/gpt2-large: num_parameters()"},
        {"gpt2-xl", 1557611200, "openai-community/gpt2-xl: num_parameters()"},
        {"llama1-65b", 65285660672, "huggyllama/llama-65b: num_parameters()"},
        {"llama2-7b", 6738415616, "meta-llama/Llama-2-7b-hf: num_parameters()"},
        {"llama2-13b", 13015864320, "meta-llama/Llama-2-13b-hf: num_parameters()"},
        {"llama2-70b", 68976648192, "meta-llama/Llama-2-70b-hf: num_parameters()"},
        {"llama3-8b", 8030261248, "meta-llama/Meta-Llama-3-8B: num_parameters()"},
        {"llama3-70b", 70553706496, "meta-llama/Meta-Llama-3-70B: num_parameters()"},
        {"llama3-405b", 405853388800, "meta-llama/Llama-3.1-405B: num_parameters()"},
    };
    return sources;
}

const ModelConfig* find_preset(const std::string& name) {
    for (const auto& p : model_presets()) {
        if (p.name == name) return &p;
    }
    return nullptr;
}

const ModelConfig& preset_or_throw(const std::string& name) {
    if (const ModelConfig* p = find_preset(name)) return *p;
    std::string names;
    for (const auto& p : model_presets()) names += (names.empty() ? "" : "|") + p.name;
    throw UsageError("{model}: unknown preset '" + name + "' (expected " + names + ")");
}

}  // namespace napkin
