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

namespace napkin {

namespace {

using nlohmann::json;

// Keys model_config_to_json does not write but napkin-model files may carry: those
// `estimate --list-models --json` adds beside each preset, so one entry of that list loads.
constexpr std::array<std::string_view, 3> kInformationalKeys = {"params", "published_params",
                                                                "source"};

// Layers and heads are `int` in ModelConfig; no real model comes near this.
constexpr std::int64_t kMaxSmallInt = 1'000'000;

class Reader {
public:
    Reader(const json& doc, const std::string& source) : doc_(doc), source_(source) {}

    [[noreturn]] void fail(std::string_view field, const std::string& what) const {
        throw UsageError(source_ + ": field '" + std::string(field) + "': " + what);
    }

    // A null value counts as absent, as Hugging Face writes "n_inner": null for the default.
    bool has(const char* key) const { return doc_.contains(key) && !doc_.at(key).is_null(); }

    const json& require(const char* key) const {
        if (!has(key)) throw UsageError(source_ + ": missing field '" + key + "'");
        return doc_.at(key);
    }

    std::int64_t positive_int(const char* key) const {
        return positive_int_value(key, require(key));
    }

    std::int64_t positive_int_or(const char* key, std::int64_t fallback) const {
        return has(key) ? positive_int_value(key, doc_.at(key)) : fallback;
    }

    int positive_small_int(const char* key) const { return narrow(key, positive_int(key)); }
    int positive_small_int_or(const char* key, int fallback) const {
        return has(key) ? positive_small_int(key) : fallback;
    }

    bool boolean(const char* key) const { return boolean_value(key, require(key)); }
    bool boolean_or(const char* key, bool fallback) const {
        return has(key) ? boolean_value(key, doc_.at(key)) : fallback;
    }

    double probability_or(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        const json& v = doc_.at(key);
        // JSON has no NaN or infinity, so the range test catches every bad number.
        if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() < 1.0)) {
            fail(key, "expected a number in [0, 1) (got " + v.dump() + ")");
        }
        return v.get<double>();
    }

    std::string string(const char* key) const {
        const json& v = require(key);
        if (!v.is_string()) fail(key, "expected a string (got " + v.dump() + ")");
        return v.get<std::string>();
    }

    template <class E, std::size_t N>
    E enumeration(const char* key, const std::array<EnumName<E>, N>& names) const {
        const std::string text = string(key);
        if (auto v = find_enum(names, text)) return *v;
        fail(key, "unknown value '" + text + "' (expected " + enum_choices(names) + ")");
    }

    // napkin's format is strict: a misspelt optional key ("n_kv_head") would otherwise be
    // ignored and silently change the shape. `known` is an object whose keys are allowed.
    template <std::size_t N>
    void reject_unknown_keys(const json& known,
                             const std::array<std::string_view, N>& ignored) const {
        for (const auto& item : doc_.items()) {
            if (known.contains(item.key())) continue;
            if (std::ranges::find(ignored, item.key()) != ignored.end()) continue;
            std::string expected;
            for (const auto& k : known.items()) {
                expected += (expected.empty() ? "" : "|") + k.key();
            }
            throw UsageError(source_ + ": unknown field '" + item.key() + "' (expected " +
                             expected + ")");
        }
    }

private:
    std::int64_t positive_int_value(const char* key, const json& v) const {
        // is_number_integer is false for 12.0 and 12.5: a size written as a float is a mistake.
        if (!v.is_number_integer()) fail(key, "expected a positive integer (got " + v.dump() + ")");
        constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
        if (v.is_number_unsigned() && v.get<std::uint64_t>() > kMax) {
            fail(key, "expected a positive integer below 2^63 (got " + v.dump() + ")");
        }
        const std::int64_t n = v.get<std::int64_t>();
        if (n <= 0) fail(key, "expected a positive integer (got " + v.dump() + ")");
        return n;
    }

    bool boolean_value(const char* key, const json& v) const {
        if (!v.is_boolean()) fail(key, "expected true or false (got " + v.dump() + ")");
        return v.get<bool>();
    }

    int narrow(const char* key, std::int64_t n) const {
        if (n > kMaxSmallInt) {
            fail(key, "expected at most " + std::to_string(kMaxSmallInt) + " (got " +
                          std::to_string(n) + ")");
        }
        return static_cast<int>(n);
    }

    const json& doc_;
    const std::string& source_;
};

std::string stem_of(const std::string& source) {
    return std::filesystem::path(source).stem().string();
}

// "head_dim": explicit only when it is not d_model / heads (Mistral Nemo, Gemma); napkin writes
// it for every config, Hugging Face files for some.
void set_head_dim(const Reader& r, ModelConfig& c) {
    if (!r.has("head_dim")) return;
    const std::int64_t hd = r.positive_int("head_dim");
    if (c.n_heads > 0 && hd * c.n_heads == c.d_model) return;
    c.explicit_head_dim = hd;
}

ModelConfig from_napkin(const Reader& r, const std::string& source) {
    // The keys written, with the two that are written only when set.
    json known = model_config_to_json(ModelConfig{});
    known["qkv_bias"] = true;
    known["head_dim"] = 0;
    r.reject_unknown_keys(known, kInformationalKeys);
    ModelConfig c;
    c.name = r.has("name") ? r.string("name") : stem_of(source);
    c.vocab_size = r.positive_int("vocab_size");
    c.padded_vocab_size = r.positive_int_or("padded_vocab_size", pad_vocab(c.vocab_size));
    c.context_length = r.positive_int("context_length");
    c.n_layers = r.positive_small_int("n_layers");
    c.d_model = r.positive_int("d_model");
    c.n_heads = r.positive_small_int("n_heads");
    c.n_kv_heads = r.positive_small_int_or("n_kv_heads", c.n_heads);
    c.d_ff = r.positive_int("d_ff");
    c.norm = r.enumeration("norm", kNormNames);
    c.positions = r.enumeration("positions", kPositionNames);
    c.mlp = r.enumeration("mlp", kMlpNames);
    // Required: either default would be wrong for one of the two families and change the
    // parameter count without a word.
    c.bias = r.boolean("bias");
    c.tied_embeddings = r.boolean("tied_embeddings");
    c.dropout = r.probability_or("dropout", 0.0);
    c.qkv_bias = r.boolean_or("qkv_bias", false);
    set_head_dim(r, c);
    return c;
}

// transformers writes "_name_or_path" on save_pretrained; it is "" for a model built from a
// bare config, and then the file stem is the better label.
std::string hf_name(const Reader& r, const std::string& source) {
    for (const char* key : {"_name_or_path", "name_or_path"}) {
        if (r.has(key)) {
            std::string name = r.string(key);
            if (!name.empty()) return name;
        }
    }
    return stem_of(source);
}

// Dropout is not read from Hugging Face files: their *_pdrop fields describe pretraining, and
// fine-tuning usually turns it off; napkin takes it from --dropout.
ModelConfig from_hf_gpt2(const Reader& r, const std::string& source) {
    ModelConfig c;
    c.name = hf_name(r, source);
    c.vocab_size = r.positive_int("vocab_size");
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.context_length =
        r.has("n_positions") ? r.positive_int("n_positions") : r.positive_int("n_ctx");
    c.n_layers = r.positive_small_int("n_layer");
    c.d_model = r.positive_int("n_embd");
    c.n_heads = r.positive_small_int("n_head");
    c.n_kv_heads = c.n_heads;
    c.d_ff = r.positive_int_or("n_inner", 4 * c.d_model);  // null means 4 * n_embd
    c.norm = NormKind::layernorm;
    c.positions = PositionKind::learned;
    c.mlp = MlpKind::gelu;
    c.bias = true;
    c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);  // PretrainedConfig default
    return c;
}

// The Llama family as Hugging Face writes it: RMSNorm, RoPE, SwiGLU, no biases unless said,
// untied unless said (LlamaConfig's defaults, also Mistral's, Qwen2's and Phi-3's). Their
// differences: Llama's attention_bias (q, k, v and o) and mlp_bias, which napkin models only
// together; Qwen2's biases on q, k and v; an explicit head_dim (Llama, Mistral Nemo). Phi-3
// fuses qkv and gate/up in its files, which changes no count. Sliding windows (Mistral 7B
// v0.1, Qwen2, Phi-3) are not modelled: attention is counted over the whole sequence.
ModelConfig from_hf_llama_family(const Reader& r, const std::string& source,
                                 const std::string& type) {
    ModelConfig c;
    c.name = hf_name(r, source);
    c.vocab_size = r.positive_int("vocab_size");
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.context_length = r.positive_int("max_position_embeddings");
    c.n_layers = r.positive_small_int("num_hidden_layers");
    c.d_model = r.positive_int("hidden_size");
    c.n_heads = r.positive_small_int("num_attention_heads");
    c.n_kv_heads = r.positive_small_int_or("num_key_value_heads", c.n_heads);
    c.d_ff = r.positive_int("intermediate_size");
    c.norm = NormKind::rmsnorm;
    c.positions = PositionKind::rope;
    c.mlp = MlpKind::swiglu;
    c.bias = false;
    if (type == "qwen2") {
        c.qkv_bias = true;
    } else if (type == "llama") {
        // attention_bias covers q, k, v and o; mlp_bias gate, up and down. napkin has one flag.
        const bool attention_bias = r.boolean_or("attention_bias", false);
        const bool mlp_bias = r.boolean_or("mlp_bias", false);
        if (attention_bias != mlp_bias) {
            r.fail(attention_bias ? "attention_bias" : "mlp_bias",
                   std::string("is true but ") + (attention_bias ? "mlp_bias" : "attention_bias") +
                       " is not; napkin has one bias flag for all linear layers");
        }
        c.bias = attention_bias;
    }
    c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);  // the family's default
    set_head_dim(r, c);
    return c;
}

// The Hugging Face model types napkin reads, and the architecture they name.
constexpr std::array<std::string_view, 5> kHfModelTypes = {"gpt2", "llama", "mistral", "phi3",
                                                           "qwen2"};

ModelConfig parse_any(const Reader& r, const std::string& source) {
    if (r.has("format")) {
        const std::string format = r.string("format");
        if (format != "napkin-model") {
            r.fail("format", "unknown value '" + format + "' (expected napkin-model)");
        }
        return from_napkin(r, source);
    }
    if (r.has("model_type")) {
        const std::string type = r.string("model_type");
        if (type == "gpt2") return from_hf_gpt2(r, source);
        if (std::ranges::find(kHfModelTypes, type) != kHfModelTypes.end())
            return from_hf_llama_family(r, source, type);
        std::string known;
        for (const std::string_view t : kHfModelTypes) {
            if (!known.empty()) known += '|';
            known.append(t);
        }
        r.fail("model_type", "unknown architecture '" + type + "' (napkin reads " + known + ")");
    }
    throw UsageError(source +
                     ": expected a key 'format' (\"napkin-model\") or 'model_type' (a Hugging Face "
                     "config.json), found neither");
}

}  // namespace

ModelConfig model_config_from_json(const json& doc, const std::string& source) {
    if (!doc.is_object()) {
        throw UsageError(source + ": expected a JSON object (got " + std::string(doc.type_name()) +
                         ")");
    }
    const ModelConfig c = parse_any(Reader(doc, source), source);
    try {
        validate(c);
    } catch (const UsageError& e) {
        throw UsageError(source + ": " + e.what());
    }
    return c;
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
