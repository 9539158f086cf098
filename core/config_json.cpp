// Model configs from JSON: napkin's own format and Hugging Face GPT-2 / Llama config.json.
// Every error names the file and the field in one line (docs/CONFIG.md).
#include "core/config_json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace napkin {

namespace {

using nlohmann::json;

class Reader {
public:
    Reader(const json& doc, const std::string& source) : doc_(doc), source_(source) {}

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw UsageError(source_ + ": field '" + field + "': " + what);
    }

    bool has(const char* key) const { return doc_.contains(key) && !doc_.at(key).is_null(); }

    const json& require(const char* key) const {
        if (!has(key)) throw UsageError(source_ + ": missing field '" + key + "'");
        return doc_.at(key);
    }

    std::int64_t positive_int(const char* key) const { return positive_int_value(key, require(key)); }

    std::int64_t positive_int_or(const char* key, std::int64_t fallback) const {
        return has(key) ? positive_int_value(key, doc_.at(key)) : fallback;
    }

    int positive_small_int(const char* key) const { return narrow(key, positive_int(key)); }
    int positive_small_int_or(const char* key, int fallback) const {
        return has(key) ? narrow(key, positive_int(key)) : fallback;
    }

    bool boolean_or(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        const json& v = doc_.at(key);
        if (!v.is_boolean()) fail(key, "expected true or false (got " + v.dump() + ")");
        return v.get<bool>();
    }

    double probability_or(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        const json& v = doc_.at(key);
        if (!v.is_number()) fail(key, "expected a number in [0, 1) (got " + v.dump() + ")");
        const double p = v.get<double>();
        if (!(p >= 0.0 && p < 1.0)) fail(key, "expected a number in [0, 1) (got " + v.dump() + ")");
        return p;
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

private:
    std::int64_t positive_int_value(const char* key, const json& v) const {
        if (!v.is_number_integer()) fail(key, "expected a positive integer (got " + v.dump() + ")");
        const std::int64_t n = v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>())
                                                      : v.get<std::int64_t>();
        if (n <= 0) fail(key, "expected a positive integer (got " + v.dump() + ")");
        return n;
    }

    int narrow(const char* key, std::int64_t n) const {
        if (n > 1'000'000) fail(key, "expected at most 1000000 (got " + std::to_string(n) + ")");
        return static_cast<int>(n);
    }

    const json& doc_;
    const std::string& source_;
};

std::string stem_of(const std::string& source) { return std::filesystem::path(source).stem().string(); }

ModelConfig from_napkin(const Reader& r, const std::string& source) {
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
    c.bias = r.boolean_or("bias", true);
    c.tied_embeddings = r.boolean_or("tied_embeddings", true);
    c.dropout = r.probability_or("dropout", 0.0);
    return c;
}

std::string hf_name(const Reader& r, const std::string& source) {
    if (r.has("_name_or_path")) return r.string("_name_or_path");
    if (r.has("name_or_path")) return r.string("name_or_path");
    return stem_of(source);
}

// Dropout is not read from Hugging Face files: their *_pdrop fields describe pretraining, and
// fine-tuning usually turns it off; napkin takes it from --dropout.
ModelConfig from_hf_gpt2(const Reader& r, const std::string& source) {
    ModelConfig c;
    c.name = hf_name(r, source);
    c.vocab_size = r.positive_int("vocab_size");
    c.padded_vocab_size = pad_vocab(c.vocab_size);
    c.context_length = r.has("n_positions") ? r.positive_int("n_positions") : r.positive_int("n_ctx");
    c.n_layers = r.positive_small_int("n_layer");
    c.d_model = r.positive_int("n_embd");
    c.n_heads = r.positive_small_int("n_head");
    c.n_kv_heads = c.n_heads;
    c.d_ff = r.positive_int_or("n_inner", 4 * c.d_model);
    c.norm = NormKind::layernorm;
    c.positions = PositionKind::learned;
    c.mlp = MlpKind::gelu;
    c.bias = true;
    c.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
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
    const bool attention_bias = r.boolean_or("attention_bias", false);
    const bool mlp_bias = r.boolean_or("mlp_bias", false);
    if (attention_bias != mlp_bias) {
        r.fail(attention_bias ? "attention_bias" : "mlp_bias",
               "napkin has one bias flag for all linear layers; attention_bias and mlp_bias must agree");
    }
    c.bias = attention_bias;
    c.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
    if (r.has("head_dim")) {
        const std::int64_t hd = r.positive_int("head_dim");
        if (hd * c.n_heads != c.d_model) {
            r.fail("head_dim", "napkin needs head_dim * num_attention_heads == hidden_size (got " +
                                   std::to_string(hd) + " * " + std::to_string(c.n_heads) + ")");
        }
    }
    return c;
}

}  // namespace

ModelConfig model_config_from_json(const json& doc, const std::string& source) {
    if (!doc.is_object()) throw UsageError(source + ": expected a JSON object (got " + std::string(doc.type_name()) + ")");
    const Reader r(doc, source);
    ModelConfig c;
    if (r.has("format")) {
        const std::string format = r.string("format");
        if (format != "napkin-model") r.fail("format", "unknown value '" + format + "' (expected napkin-model)");
        c = from_napkin(r, source);
    } else if (r.has("model_type")) {
        const std::string type = r.string("model_type");
        if (type == "gpt2") {
            c = from_hf_gpt2(r, source);
        } else if (type == "llama") {
            c = from_hf_llama(r, source);
        } else {
            r.fail("model_type", "unknown value '" + type + "' (expected gpt2|llama)");
        }
    } else {
        throw UsageError(source + ": neither 'format' (napkin's config) nor 'model_type' (a Hugging Face config.json) is set");
    }
    try {
        validate(c);
    } catch (const UsageError& e) {
        throw UsageError(source + ": " + e.what());
    }
    return c;
}

ModelConfig load_model_config(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UsageError(path + ": cannot open (" + std::strerror(errno) + ")");
    std::stringstream text;
    text << in.rdbuf();
    json doc;
    try {
        doc = json::parse(text.str());
    } catch (const json::parse_error& e) {
        // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
        std::string msg = e.what();
        const auto pos = msg.find("parse error");
        if (pos != std::string::npos) msg = msg.substr(pos);
        for (char& ch : msg) {
            if (ch == '\n') ch = ' ';
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
