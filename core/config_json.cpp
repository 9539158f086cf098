// Model configs from JSON: napkin's own format and Hugging Face GPT-2 / Llama config.json.
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
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

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

ModelConfig from_napkin(const Reader& r, const std::string& source) {
    r.reject_unknown_keys(model_config_to_json(ModelConfig{}), kInformationalKeys);
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

ModelConfig from_hf_llama(const Reader& r, const std::string& source) {
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
    // attention_bias covers q, k, v and o; mlp_bias gate, up and down. napkin has one flag.
    const bool attention_bias = r.boolean_or("attention_bias", false);
    const bool mlp_bias = r.boolean_or("mlp_bias", false);
    if (attention_bias != mlp_bias) {
        r.fail(attention_bias ? "attention_bias" : "mlp_bias",
               std::string("is true but ") + (attention_bias ? "mlp_bias" : "attention_bias") +
                   " is not; napkin has one bias flag for all linear layers");
    }
    c.bias = attention_bias;
    c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);  // LlamaConfig default
    if (r.has("head_dim")) {
        const std::int64_t hd = r.positive_int("head_dim");
        if (hd * c.n_heads != c.d_model) {
            r.fail("head_dim", "napkin needs head_dim * num_attention_heads == hidden_size (got " +
                                   std::to_string(hd) + " * " + std::to_string(c.n_heads) +
                                   " != " + std::to_string(c.d_model) + ")");
        }
    }
    return c;
}

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
        if (type == "llama") return from_hf_llama(r, source);
        r.fail("model_type", "unknown value '" + type + "' (expected gpt2|llama)");
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
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        throw UsageError(path + ": cannot open (" +
                         (err != 0 ? std::strerror(err) : "unknown error") + ")");
    }
    std::ostringstream text;
    text << in.rdbuf();
    json doc;
    try {
        doc = json::parse(text.str());
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
    return json{
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
}

}  // namespace napkin
