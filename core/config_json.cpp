// Model configs from JSON: napkin's own format and Hugging Face config.json files of GPT-2 and the
// Llama family (llama, mistral, phi3, qwen2).
// Every error names the file and the field in one line (docs/CONFIG.md).
#include "core/config_json.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bounded_read.h"
#include "core/check.h"
#include "core/json_reader.h"

namespace napkin {

namespace {

using nlohmann::json;

// Keys model_config_to_json does not write but napkin-model files may carry: those
// `estimate --list-models --json` adds beside each preset, so one entry of that list loads.
constexpr std::array<std::string_view, 3> kInformationalKeys = {"params", "published_params",
                                                                "source"};

// Layers and heads are `int` in ModelConfig; no real model comes near this.
constexpr int kMaxSmallInt = 1'000'000;

std::int64_t positive(const JsonField& f) {
    return f.integer<std::int64_t>(1);
}
int positive_small(const JsonField& f) {
    return f.integer<int>(1, kMaxSmallInt);
}

std::string stem_of(const std::string& source) {
    return std::filesystem::path(source).stem().string();
}

// "head_dim": explicit only when it is not d_model / heads (Mistral Nemo, Gemma); napkin writes
// it for every config, Hugging Face files for some.
void set_head_dim(const JsonField& doc, ModelConfig& c) {
    if (!doc.has("head_dim")) return;
    const std::int64_t hd = positive(doc["head_dim"]);
    if (c.n_heads > 0 && hd * c.n_heads == c.d_model) return;
    c.explicit_head_dim = hd;
}

// The keys of the shape's fields in one format; GPT-2's differ in more than names (n_ctx when
// n_positions is absent, no KV heads, d_ff's default) and are read by from_hf_gpt2 alone.
struct ShapeKeys {
    const char* vocab;
    const char* context;
    const char* layers;
    const char* d_model;
    const char* heads;
    const char* kv_heads;  // optional: as many as heads
    const char* d_ff;
};
constexpr ShapeKeys kNapkinKeys{"vocab_size", "context_length", "n_layers", "d_model",
                                "n_heads",    "n_kv_heads",     "d_ff"};
constexpr ShapeKeys kLlamaKeys{"vocab_size",       "max_position_embeddings", "num_hidden_layers",
                               "hidden_size",      "num_attention_heads",     "num_key_value_heads",
                               "intermediate_size"};

void read_shape(const JsonField& doc, const ShapeKeys& k, ModelConfig& c) {
    c.vocab_size = positive(doc[k.vocab]);
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.context_length = positive(doc[k.context]);
    c.n_layers = positive_small(doc[k.layers]);
    c.d_model = positive(doc[k.d_model]);
    c.n_heads = positive_small(doc[k.heads]);
    c.n_kv_heads = doc[k.kv_heads].optional(positive_small).value_or(c.n_heads);
    c.d_ff = positive(doc[k.d_ff]);
}

// napkin's format is strict: a misspelt optional key ("n_kv_head") would otherwise be ignored
// and silently change the shape. The keys allowed are those written, with the two written only
// when set, listed as nlohmann orders an object's keys (alphabetically).
std::vector<std::string> napkin_keys() {
    json known = model_config_to_json(ModelConfig{});
    known["qkv_bias"] = true;
    known["head_dim"] = 0;
    std::vector<std::string> keys;
    for (const auto& item : known.items())
        keys.push_back(item.key());
    return keys;
}

ModelConfig from_napkin(const JsonField& doc, const std::string& default_name) {
    doc.refuse_unknown_keys(napkin_keys(), kInformationalKeys);
    ModelConfig c;
    c.name = doc["name"].optional(&JsonField::string).value_or(default_name);
    read_shape(doc, kNapkinKeys, c);
    c.padded_vocab_size = doc["padded_vocab_size"].optional(positive).value_or(c.padded_vocab_size);
    c.norm = doc["norm"].enumeration(kNormNames);
    c.positions = doc["positions"].enumeration(kPositionNames);
    c.mlp = doc["mlp"].enumeration(kMlpNames);
    // Required: either default would be wrong for one of the two families and change the
    // parameter count without a word.
    c.bias = doc["bias"].boolean();
    c.tied_embeddings = doc["tied_embeddings"].boolean();
    c.dropout = doc["dropout"].optional(&JsonField::fraction).value_or(0.0);
    c.qkv_bias = doc["qkv_bias"].optional(&JsonField::boolean).value_or(false);
    set_head_dim(doc, c);
    return c;
}

// transformers writes "_name_or_path" on save_pretrained; it is "" for a model built from a
// bare config, and then the default (the file stem) is the better label.
std::string hf_name(const JsonField& doc, const std::string& default_name) {
    for (const char* key : {"_name_or_path", "name_or_path"}) {
        if (doc.has(key)) {
            std::string name = doc[key].string();
            if (!name.empty()) return name;
        }
    }
    return default_name;
}

// Dropout is not read from Hugging Face files: their *_pdrop fields describe pretraining, and
// fine-tuning usually turns it off; napkin takes it from --dropout.
ModelConfig from_hf_gpt2(const JsonField& doc, const std::string& default_name) {
    ModelConfig c;
    c.name = hf_name(doc, default_name);
    c.vocab_size = positive(doc["vocab_size"]);
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.context_length =
        doc.has("n_positions") ? positive(doc["n_positions"]) : positive(doc["n_ctx"]);
    c.n_layers = positive_small(doc["n_layer"]);
    c.d_model = positive(doc["n_embd"]);
    c.n_heads = positive_small(doc["n_head"]);
    c.n_kv_heads = c.n_heads;
    c.d_ff = doc["n_inner"].optional(positive).value_or(4 * c.d_model);  // null: 4 * n_embd
    c.norm = NormKind::layernorm;
    c.positions = PositionKind::learned;
    c.mlp = MlpKind::gelu;
    c.bias = true;
    // PretrainedConfig's default
    c.tied_embeddings = doc["tie_word_embeddings"].optional(&JsonField::boolean).value_or(true);
    return c;
}

// The Llama family as Hugging Face writes it: RMSNorm, RoPE, SwiGLU, no biases unless said,
// untied unless said (LlamaConfig's defaults, also Mistral's, Qwen2's and Phi-3's). Their
// differences: Llama's attention_bias (q, k, v and o) and mlp_bias, which napkin models only
// together; Qwen2's biases on q, k and v; an explicit head_dim (Llama, Mistral Nemo). Phi-3
// fuses qkv and gate/up in its files, which changes no count. Sliding windows (Mistral 7B
// v0.1, Qwen2, Phi-3) are not modelled: attention is counted over the whole sequence.
ModelConfig from_hf_llama_family(const JsonField& doc, const std::string& default_name,
                                 const std::string& type) {
    ModelConfig c;
    c.name = hf_name(doc, default_name);
    read_shape(doc, kLlamaKeys, c);
    c.norm = NormKind::rmsnorm;
    c.positions = PositionKind::rope;
    c.mlp = MlpKind::swiglu;
    c.bias = false;
    if (type == "qwen2") {
        c.qkv_bias = true;
    } else if (type == "llama") {
        // attention_bias covers q, k, v and o; mlp_bias gate, up and down. napkin has one flag.
        const auto flag = [&](const char* key) {
            return doc[key].optional(&JsonField::boolean).value_or(false);
        };
        const bool attention_bias = flag("attention_bias");
        const bool mlp_bias = flag("mlp_bias");
        if (attention_bias != mlp_bias) {
            doc[attention_bias ? "attention_bias" : "mlp_bias"].fail(
                std::string("is true but ") + (attention_bias ? "mlp_bias" : "attention_bias") +
                " is not; napkin has one bias flag for all linear layers");
        }
        c.bias = attention_bias;
    }
    // The family's default
    c.tied_embeddings = doc["tie_word_embeddings"].optional(&JsonField::boolean).value_or(false);
    set_head_dim(doc, c);
    return c;
}

// The Hugging Face model types napkin reads, and the architecture they name.
constexpr std::array<std::string_view, 5> kHfModelTypes = {"gpt2", "llama", "mistral", "phi3",
                                                           "qwen2"};

ModelConfig parse_any(const JsonField& doc, const std::string& default_name) {
    if (doc.has("format")) {
        const JsonField format = doc["format"];
        if (format.string() != "napkin-model") format.expected("\"napkin-model\"");
        return from_napkin(doc, default_name);
    }
    if (doc.has("model_type")) {
        const JsonField type = doc["model_type"];
        const std::string name = type.string();
        if (name == "gpt2") return from_hf_gpt2(doc, default_name);
        if (std::ranges::find(kHfModelTypes, name) != kHfModelTypes.end())
            return from_hf_llama_family(doc, default_name, name);
        std::string known;
        for (const std::string_view t : kHfModelTypes) {
            if (!known.empty()) known += '|';
            known.append(t);
        }
        type.expected("an architecture napkin reads (" + known + ")");
    }
    doc.fail(
        "expected a key 'format' (\"napkin-model\") or 'model_type' (a Hugging Face "
        "config.json), got neither");
}

}  // namespace

ModelConfig read_model_config(const JsonField& field, const std::string& default_name) {
    // A config's sizes are integers as written (12, not 12.0) wherever it is embedded.
    const JsonSource strict = field.source().with_integers(JsonSource::Integers::tokens);
    const JsonField doc = field.read_as(strict);
    const ModelConfig c = parse_any(doc.object(), default_name);
    try {
        validate(c);
    } catch (const UsageError& e) {
        doc.fail(e.what());
    }
    return c;
}

ModelConfig model_config_from_json(const json& doc, const std::string& source) {
    const JsonSource file = JsonSource::raising<UsageError>(source);
    return read_model_config(JsonField(doc, file), stem_of(source));
}

ModelConfig load_model_config(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        throw UsageError(path + ": cannot open (" + std::strerror(EISDIR) + ")");
    }
    // Bounded and never blocking: `--config /dev/zero` or a FIFO is refused at once.
    std::string text;
    if (std::string err = read_bounded_file(path, kMaxConfigBytes, text); !err.empty())
        throw UsageError(path + ": " + err);
    // A key given twice in one object: nlohmann keeps the last silently; refused, naming it.
    std::vector<std::set<std::string>> keys;  // of each object open at this point
    const json::parser_callback_t once = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        if (event == json::parse_event_t::object_end) keys.pop_back();
        if (event == json::parse_event_t::key &&
            !keys.back().insert(parsed.get<std::string>()).second)
            throw UsageError(path + ": key \"" + parsed.get<std::string>() + "\" is given twice");
        return true;
    };
    json doc;
    try {
        doc = json::parse(text, once);
    } catch (const json::exception& e) {  // parse_error, or out_of_range for a number overflow
        // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column
        // 5: syntax error while parsing ..."; keep it from "parse error" on, on one line.
        std::string msg = e.what();
        const auto pos = msg.find("parse error");
        if (pos != std::string::npos) msg = msg.substr(pos);
        for (char& ch : msg) {
            if (ch == '\n' || ch == '\r') ch = ' ';
        }
        throw UsageError(path + ": not valid JSON: " + msg);
    }
    return model_config_from_json(doc, path);
}

json model_config_to_json(const ModelConfig& c) {
    json j{
        {"format", "napkin-model"},
        {"name", c.name},
        {"vocab_size", c.vocab_size},
        {"padded_vocab_size", c.padded_vocab_size},
        {"context_length", c.context_length},
        {"n_layers", c.n_layers},
        {"d_model", c.d_model},
        {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads},
        {"d_ff", c.d_ff},
        {"norm", enum_name(kNormNames, c.norm)},
        {"positions", enum_name(kPositionNames, c.positions)},
        {"mlp", enum_name(kMlpNames, c.mlp)},
        {"bias", c.bias},
        {"tied_embeddings", c.tied_embeddings},
        {"dropout", c.dropout},
    };
    // Written only where they differ from GPT's defaults, so that a report or checkpoint of a
    // model without them reads back to the same text as it was written.
    if (c.qkv_bias) j["qkv_bias"] = true;
    if (c.explicit_head_dim > 0) j["head_dim"] = c.explicit_head_dim;
    return j;
}

}  // namespace napkin
