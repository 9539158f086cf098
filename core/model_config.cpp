#include "core/model_config.h"

#include <limits>
#include <string>

#include "core/check.h"

namespace napkin {

namespace {

void require_positive(std::int64_t value, const char* field) {
    if (value <= 0) {
        throw UsageError(std::string(field) + ": must be a positive integer (got " +
                         std::to_string(value) + ")");
    }
}

std::int64_t norm_params(const ModelConfig& c) {
    return c.norm == NormKind::layernorm && c.bias ? 2 * c.d_model : c.d_model;
}

std::int64_t mlp_in_rows(const ModelConfig& c) { return c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff; }

}  // namespace

void validate(const ModelConfig& c) {
    require_positive(c.vocab_size, "vocab");
    require_positive(c.context_length, "context length");
    require_positive(c.n_layers, "layers");
    require_positive(c.d_model, "d-model");
    require_positive(c.n_heads, "heads");
    require_positive(c.n_kv_heads, "kv-heads");
    require_positive(c.d_ff, "d-ff");
    // Upper bounds keep every parameter and activation count far inside int64 (the largest
    // presets are L = 126, C = 16384, V = 128256, context 131072).
    auto require_at_most = [](std::int64_t value, std::int64_t limit, const char* field) {
        if (value > limit) {
            throw UsageError(std::string(field) + ": " + std::to_string(value) + " is beyond napkin's limit of " +
                             std::to_string(limit));
        }
    };
    require_at_most(c.vocab_size, 1 << 24, "vocab");
    require_at_most(c.padded_vocab_size, (1 << 24) + 128, "padded vocab");
    require_at_most(c.context_length, 1 << 24, "context length");
    require_at_most(c.n_layers, 1 << 12, "layers");
    require_at_most(c.d_model, 1 << 18, "d-model");
    require_at_most(c.d_ff, 1 << 20, "d-ff");
    if (c.padded_vocab_size < c.vocab_size) {
        throw UsageError("padded vocab (" + std::to_string(c.padded_vocab_size) +
                         ") must be at least vocab (" + std::to_string(c.vocab_size) + ")");
    }
    if (c.explicit_head_dim < 0) require_positive(c.explicit_head_dim, "head-dim");
    require_at_most(c.explicit_head_dim, 1 << 14, "head-dim");
    if (c.explicit_head_dim == 0 && c.d_model % c.n_heads != 0) {
        throw UsageError("heads (" + std::to_string(c.n_heads) + ") must divide d-model (" +
                         std::to_string(c.d_model) + ")");
    }
    if (c.qkv_bias && c.bias) {
        throw UsageError("qkv-bias: only with bias off (bias already covers q, k and v)");
    }
    if (c.n_heads % c.n_kv_heads != 0) {
        throw UsageError("kv-heads (" + std::to_string(c.n_kv_heads) + ") must divide heads (" +
                         std::to_string(c.n_heads) + ")");
    }
    if (!(c.dropout >= 0.0 && c.dropout < 1.0)) {
        throw UsageError("dropout: must be in [0, 1) (got " + std::to_string(c.dropout) + ")");
    }
}

std::int64_t pad_vocab(std::int64_t vocab_size) {
    // Past int64's last multiple of 128 the size is returned as it is: rounding it up would
    // overflow, and validate() refuses it anyway (its limit is 2^24).
    if (vocab_size > std::numeric_limits<std::int64_t>::max() - 127) return vocab_size;
    return (vocab_size + 127) / 128 * 128;
}

ParamCounts count_params(const ModelConfig& c) {
    const std::int64_t C = c.d_model;
    const std::int64_t norm = norm_params(c);
    const std::int64_t qkv = c.qkv_dim();
    const std::int64_t fc_rows = mlp_in_rows(c);

    ParamCounts p;
    p.token_embedding = c.vocab_size * C;
    p.position_embedding = c.positions == PositionKind::learned ? c.context_length * C : 0;
    p.head = c.tied_embeddings ? 0 : c.vocab_size * C;
    p.final_norm = norm;
    p.linear_per_layer = C * qkv + c.q_dim() * C + C * fc_rows + c.d_ff * C;
    const std::int64_t biases = c.bias ? qkv + C + fc_rows + C : c.qkv_bias ? qkv : 0;
    p.per_layer = 2 * norm + p.linear_per_layer + biases;
    p.total = p.token_embedding + p.position_embedding + p.head + p.final_norm +
              c.n_layers * p.per_layer;
    p.non_embedding = p.total - p.token_embedding - p.position_embedding - p.head;
    p.matmul = c.n_layers * p.linear_per_layer + c.vocab_size * C;
    const std::int64_t padding_rows = c.padded_vocab_size - c.vocab_size;
    p.allocated = p.total + padding_rows * C * (c.tied_embeddings ? 1 : 2);
    return p;
}

std::int64_t ParamTensor::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::vector<ParamTensor> param_tensors(const ModelConfig& c) {
    const std::int64_t C = c.d_model;
    std::vector<ParamTensor> out;
    auto add = [&](std::string name, std::vector<std::int64_t> shape, int layer, bool linear) {
        out.push_back(ParamTensor{std::move(name), std::move(shape), layer, linear});
    };
    auto add_norm = [&](const std::string& prefix, int layer) {
        add(prefix + ".weight", {C}, layer, false);
        if (c.norm == NormKind::layernorm && c.bias) add(prefix + ".bias", {C}, layer, false);
    };
    auto add_linear = [&](const std::string& prefix, std::int64_t out_f, std::int64_t in_f,
                          int layer, bool bias) {
        add(prefix + ".weight", {out_f, in_f}, layer, true);  // (out, in) as nn.Linear
        if (bias) add(prefix + ".bias", {out_f}, layer, false);
    };

    add("wte", {c.padded_vocab_size, C}, -1, false);
    if (c.positions == PositionKind::learned) add("wpe", {c.context_length, C}, -1, false);
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string h = "h." + std::to_string(l);
        add_norm(h + ".ln_1", l);
        add_linear(h + ".attn.qkv", c.qkv_dim(), C, l, c.bias || c.qkv_bias);
        add_linear(h + ".attn.proj", C, c.q_dim(), l, c.bias);
        add_norm(h + ".ln_2", l);
        add_linear(h + ".mlp.fc", mlp_in_rows(c), C, l, c.bias);  // swiglu: gate rows then up rows
        add_linear(h + ".mlp.proj", C, c.d_ff, l, c.bias);
    }
    add_norm("ln_f", -1);
    if (!c.tied_embeddings) add("lm_head", {c.padded_vocab_size, C}, -1, false);
    return out;
}

std::vector<ParamTensor> param_tensors(const ModelConfig& c, std::int64_t r) {
    std::vector<ParamTensor> out = param_tensors(c);
    if (r <= 0) return out;
    const std::int64_t C = c.d_model;
    auto add = [&](const std::string& prefix, std::int64_t out_f, std::int64_t in_f, int parts,
                   int layer) {
        out.push_back(ParamTensor{prefix + ".lora_a", {parts * r, in_f}, layer, false, true});
        out.push_back(ParamTensor{prefix + ".lora_b", {out_f, r}, layer, false, true});
    };
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string h = "h." + std::to_string(l);
        add(h + ".attn.qkv", c.qkv_dim(), C, 3, l);
        add(h + ".attn.proj", C, c.q_dim(), 1, l);
        add(h + ".mlp.fc", mlp_in_rows(c), C, c.mlp == MlpKind::swiglu ? 2 : 1, l);
        add(h + ".mlp.proj", C, c.d_ff, 1, l);
    }
    return out;
}

}  // namespace napkin
