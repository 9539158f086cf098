#include "core/config_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/check.h"

#ifndef NAPKIN_TEST_DATA
#define NAPKIN_TEST_DATA "tests/data"
#endif

namespace napkin {
namespace {

std::string data(const char* name) { return std::string(NAPKIN_TEST_DATA) + "/" + name; }

bool same_shape(const ModelConfig& a, const ModelConfig& b) {
    return a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
           a.context_length == b.context_length && a.n_layers == b.n_layers && a.d_model == b.d_model &&
           a.n_heads == b.n_heads && a.n_kv_heads == b.n_kv_heads && a.d_ff == b.d_ff && a.norm == b.norm &&
           a.positions == b.positions && a.mlp == b.mlp && a.bias == b.bias &&
           a.tied_embeddings == b.tied_embeddings && a.dropout == b.dropout;
}

TEST(ConfigJson, HuggingFaceGpt2) {
    const ModelConfig c = load_model_config(data("hf_gpt2_config.json"));
    EXPECT_EQ(count_params(c).total, 124439808);
    EXPECT_TRUE(same_shape(c, preset_or_throw("gpt2")));
}

TEST(ConfigJson, HuggingFaceLlama) {
    const ModelConfig l2 = load_model_config(data("hf_llama2_7b_config.json"));
    EXPECT_EQ(count_params(l2).total, 6738415616);
    EXPECT_EQ(l2.name, "meta-llama/Llama-2-7b-hf");
    EXPECT_TRUE(same_shape(l2, preset_or_throw("llama2-7b")));
    const ModelConfig l3 = load_model_config(data("hf_llama3_8b_config.json"));
    EXPECT_EQ(count_params(l3).total, 8030261248);
    EXPECT_EQ(l3.n_kv_heads, 8);
    EXPECT_EQ(l3.name, "hf_llama3_8b_config");  // no _name_or_path: the file stem
}

TEST(ConfigJson, NapkinFormatRoundTripsEveryPreset) {
    for (const auto& p : model_presets()) {
        const ModelConfig back = model_config_from_json(model_config_to_json(p), "mem");
        EXPECT_TRUE(same_shape(back, p)) << p.name;
        EXPECT_EQ(back.name, p.name);
    }
    const ModelConfig tiny = load_model_config(data("napkin_tiny.json"));
    EXPECT_TRUE(same_shape(tiny, preset_or_throw("tiny")));
}

// Each error: a UsageError, one line, naming the source and (where there is one) the field.
void expect_error(const std::string& path, const std::string& needle) {
    SCOPED_TRACE(path);
    try {
        load_model_config(path);
        ADD_FAILURE() << "expected UsageError containing " << needle;
    } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
}

TEST(ConfigJson, FileErrorsNameTheFileAndField) {
    expect_error(data("bad_not_json.json"), "not valid JSON");
    expect_error(data("bad_field_type.json"), "field 'n_layer': expected a positive integer (got \"twelve\")");
    expect_error(data("bad_heads.json"), "heads (7) must divide d-model (768)");
    expect_error(data("does_not_exist.json"), "cannot open");
}

TEST(ConfigJson, FieldErrors) {
    using nlohmann::json;
    json base = model_config_to_json(preset_or_throw("gpt2"));
    auto expect_field_error = [&](const char* key, json value, const std::string& needle) {
        json doc = base;
        doc[key] = value;
        try {
            model_config_from_json(doc, "cfg.json");
            ADD_FAILURE() << "expected an error for " << key;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_field_error("n_layers", 12.5, "cfg.json: field 'n_layers': expected a positive integer (got 12.5)");
    expect_field_error("d_model", -768, "field 'd_model': expected a positive integer");
    expect_field_error("norm", "batchnorm", "field 'norm': unknown value 'batchnorm' (expected layernorm|rmsnorm)");
    expect_field_error("bias", "yes", "field 'bias': expected true or false");
    expect_field_error("dropout", 1.5, "field 'dropout'");
    expect_field_error("format", "other", "field 'format'");
    json missing = base;
    missing.erase("d_model");
    EXPECT_THROW(
        {
            try {
                model_config_from_json(missing, "cfg.json");
            } catch (const UsageError& e) {
                EXPECT_STREQ(e.what(), "cfg.json: missing field 'd_model'");
                throw;
            }
        },
        UsageError);
    json hf = {{"model_type", "bert"}};
    EXPECT_THROW(model_config_from_json(hf, "cfg.json"), UsageError);
    EXPECT_THROW(model_config_from_json(json::array(), "cfg.json"), UsageError);
    EXPECT_THROW(model_config_from_json(json::object(), "cfg.json"), UsageError);
}

}  // namespace
}  // namespace napkin
