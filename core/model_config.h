// A decoder-only transformer's shape: GPT-2 and Llama families and anything between.
// Shape letters used across napkin (docs/SHAPES.md): B micro-batch, T sequence length,
// C = d_model, NH heads, KVH kv-heads, HD = C / NH head dim, F = d_ff, L layers,
// V vocab, Vp padded vocab.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace napkin {

enum class NormKind : std::uint8_t { layernorm, rmsnorm };
inline constexpr std::array kNormNames = {EnumName<NormKind>{NormKind::layernorm, "layernorm"},
                                          EnumName<NormKind>{NormKind::rmsnorm, "rmsnorm"}};

enum class PositionKind : std::uint8_t { learned, rope };
inline constexpr std::array kPositionNames = {
    EnumName<PositionKind>{PositionKind::learned, "learned"},
    EnumName<PositionKind>{PositionKind::rope, "rope"}};

// gelu: fc (C -> F), GELU, proj (F -> C).  swiglu: gate and up (C -> F each), silu(gate)*up,
// down (F -> C).
enum class MlpKind : std::uint8_t { gelu, swiglu };
inline constexpr std::array kMlpNames = {EnumName<MlpKind>{MlpKind::gelu, "gelu"},
                                         EnumName<MlpKind>{MlpKind::swiglu, "swiglu"}};

struct ModelConfig {
    std::string name = "custom";
    std::int64_t vocab_size = 0;         // V: real vocabulary (parameter counts use this)
    std::int64_t padded_vocab_size = 0;  // Vp >= V: rows allocated (multiple of 128 for GEMMs)
    std::int64_t context_length = 0;     // maximum T (rows of the learned position table)
    int n_layers = 0;                    // L
    std::int64_t d_model = 0;            // C
    int n_heads = 0;                     // NH
    int n_kv_heads = 0;                  // KVH: NH for MHA, 1 for MQA, between for GQA
    std::int64_t d_ff = 0;               // F
    NormKind norm = NormKind::layernorm;
    PositionKind positions = PositionKind::learned;
    MlpKind mlp = MlpKind::gelu;
    bool bias = true;             // biases in linear layers (and LayerNorm shift)
    bool qkv_bias = false;        // biases on q, k and v only (Qwen2), with `bias` false
    bool tied_embeddings = true;  // the head reuses the token embedding matrix
    double dropout = 0.0;         // dropout probability; > 0 keeps 1-byte masks for backward
    // HD when it is not C / NH (Mistral Nemo: 128 with C = 5120, NH = 32; Gemma); 0: C / NH.
    // The attention then works at width NH HD, and its output projection maps NH HD -> C.
    std::int64_t explicit_head_dim = 0;

    std::int64_t head_dim() const {
        return explicit_head_dim > 0 ? explicit_head_dim : d_model / n_heads;
    }
    std::int64_t q_dim() const { return head_dim() * n_heads; }  // C unless HD is explicit
    std::int64_t kv_dim() const { return head_dim() * n_kv_heads; }
    std::int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
};

// Throws UsageError naming the field: sizes must be positive, NH must divide C (unless the head
// dim is explicit), KVH must divide NH, Vp >= V, dropout in [0, 1), qkv_bias only without bias.
void validate(const ModelConfig& cfg);

// Rounds V up to a multiple of 128 (as llm.c pads 50257 to 50304).
std::int64_t pad_vocab(std::int64_t vocab_size);

struct ParamCounts {
    std::int64_t total = 0;          // as published (uses V, not Vp)
    std::int64_t token_embedding = 0;
    std::int64_t position_embedding = 0;
    std::int64_t head = 0;           // untied output head (0 when tied)
    std::int64_t per_layer = 0;      // one transformer block
    std::int64_t final_norm = 0;
    std::int64_t non_embedding = 0;  // total - token and position embeddings - untied head
    // Parameters that take part in a matmul for every token: the blocks' linear weights and
    // the head (tied or not). 2 * matmul is the forward FLOPs per token of the linear layers.
    std::int64_t matmul = 0;
    std::int64_t linear_per_layer = 0;  // weights of the block's linear layers (no biases)
    std::int64_t allocated = 0;         // total with the embedding rows padded to Vp
};

ParamCounts count_params(const ModelConfig& cfg);

// One named parameter tensor, as the engine allocates it and checkpoints name it.
struct ParamTensor {
    std::string name;           // "h.3.attn.c_attn.weight" (GPT-2 naming, also for Llama)
    std::vector<std::int64_t> shape;
    int layer = -1;             // block index, -1 outside the blocks
    bool linear_weight = false;  // a matmul weight inside a block (LoRA/QLoRA targets)
    bool adapter = false;        // a LoRA adapter (lora_a or lora_b), trainable when fine-tuning
    std::int64_t numel() const;
};

// Every parameter tensor in order; the embedding matrix has Vp rows. Tests check that the
// sum over this list equals count_params().allocated.
std::vector<ParamTensor> param_tensors(const ModelConfig& cfg);

// The same followed, when lora_rank > 0, by the LoRA adapters of every block linear (the op
// plan's lora ops, kernels/lora.h), block by block: "h.<l>.<linear>.lora_a" (parts*r, in) and
// ".lora_b" (out, r) for attn.qkv (3 parts: q, k, v), attn.proj, mlp.fc (2 under SwiGLU: gate,
// up) and mlp.proj. The base tensors keep their positions, so a LoRA run's base model is the
// full run's.
std::vector<ParamTensor> param_tensors(const ModelConfig& cfg, std::int64_t lora_rank);

// The named presets. find_preset returns nullptr for an unknown name.
const std::vector<ModelConfig>& model_presets();
const ModelConfig* find_preset(const std::string& name);
// Throws UsageError("--model: unknown preset 'x' (expected tiny|gpt2|...)").
const ModelConfig& preset_or_throw(const std::string& name);
// Published parameter counts and their source, for --list-models and tests.
struct PresetSource {
    const char* name;
    std::int64_t published_params;
    const char* source;
};
const std::vector<PresetSource>& preset_sources();

}  // namespace napkin
