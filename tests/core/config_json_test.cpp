// Config files: the published Hugging Face configs load to the published parameter counts,
// napkin's format round-trips every preset, and every error is one line naming file and field.
#include "core/config_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/check.h"

#ifndef NAPKIN_TEST_DATA
#define NAPKIN_TEST_DATA "tests/data"
#endif

namespace napkin {
namespace {

using nlohmann::json;

std::string data(const char* name) {
    return std::string(NAPKIN_TEST_DATA) + "/" + name;
}

// Every field but the name.
bool same_shape(const ModelConfig& a, const ModelConfig& b) {
    return a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
           a.context_length == b.context_length && a.n_layers == b.n_layers &&
           a.d_model == b.d_model && a.n_heads == b.n_heads && a.n_kv_heads == b.n_kv_heads &&
           a.d_ff == b.d_ff && a.norm == b.norm && a.positions == b.positions && a.mlp == b.mlp &&
           a.bias == b.bias && a.tied_embeddings == b.tied_embeddings && a.dropout == b.dropout &&
           a.qkv_bias == b.qkv_bias && a.explicit_head_dim == b.explicit_head_dim;
}

// The message of the UsageError that `fn` throws, or a test failure.
template <class Fn>
std::string usage_error(Fn&& fn) {
    try {
        fn();
    } catch (const UsageError& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a UsageError";
    return {};
}

std::string from_json_error(const json& doc) {
    return usage_error([&] { model_config_from_json(doc, "cfg.json"); });
}

// ---------------------------------------------------------------------------------------------
// Hugging Face config.json

TEST(ConfigJson, HuggingFaceGpt2) {
    const ModelConfig c = load_model_config(data("hf_gpt2_config.json"));
    EXPECT_EQ(count_params(c).total, 124439808);
    EXPECT_TRUE(same_shape(c, preset_or_throw("gpt2")));
    EXPECT_EQ(c.name, "hf_gpt2_config");  // no _name_or_path in the published file
    EXPECT_EQ(c.dropout, 0.0);            // resid_pdrop 0.1 is not read
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
    EXPECT_TRUE(same_shape(l3, preset_or_throw("llama3-8b")));
}

json hf_gpt2() {
    return {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 1024},
            {"n_layer", 12},        {"n_embd", 768},       {"n_head", 12}};
}

json hf_llama() {
    return {{"model_type", "llama"},     {"vocab_size", 32000}, {"max_position_embeddings", 4096},
            {"num_hidden_layers", 32},   {"hidden_size", 4096}, {"num_attention_heads", 32},
            {"intermediate_size", 11008}};
}

TEST(ConfigJson, HuggingFaceGpt2Defaults) {
    json doc = hf_gpt2();
    doc["n_inner"] = nullptr;  // as transformers writes the default
    ModelConfig c = model_config_from_json(doc, "dir/my-gpt2.json");
    EXPECT_EQ(c.d_ff, 4 * 768);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_EQ(c.name, "my-gpt2");

    doc["n_inner"] = 2048;
    doc["tie_word_embeddings"] = false;
    doc.erase("n_positions");
    doc["n_ctx"] = 512;
    doc["_name_or_path"] = "";  // a model built from a bare config: fall back to the stem
    c = model_config_from_json(doc, "my-gpt2.json");
    EXPECT_EQ(c.d_ff, 2048);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_EQ(c.context_length, 512);
    EXPECT_EQ(c.name, "my-gpt2");

    doc["name_or_path"] = "someone/gpt2-small";
    EXPECT_EQ(model_config_from_json(doc, "x.json").name, "someone/gpt2-small");
}

TEST(ConfigJson, HuggingFaceLlamaDefaultsAndBias) {
    json doc = hf_llama();
    ModelConfig c = model_config_from_json(doc, "l.json");
    EXPECT_EQ(c.n_kv_heads, 32);
    EXPECT_FALSE(c.tied_embeddings);
    EXPECT_FALSE(c.bias);
    EXPECT_EQ(c.norm, NormKind::rmsnorm);
    EXPECT_EQ(c.positions, PositionKind::rope);
    EXPECT_EQ(c.mlp, MlpKind::swiglu);

    doc["attention_bias"] = true;
    doc["mlp_bias"] = true;
    doc["head_dim"] = 128;
    EXPECT_TRUE(model_config_from_json(doc, "l.json").bias);

    doc["mlp_bias"] = false;
    std::string msg = from_json_error(doc);
    EXPECT_NE(msg.find("cfg.json: attention_bias: is true but mlp_bias is not"), std::string::npos)
        << msg;
    doc["attention_bias"] = false;
    doc["mlp_bias"] = true;
    msg = from_json_error(doc);
    EXPECT_NE(msg.find("cfg.json: mlp_bias: is true but attention_bias is not"), std::string::npos)
        << msg;

    // A head dim other than hidden_size / heads is the model's (Gemma, Mistral Nemo): the
    // attention runs at NH HD = 32 * 256 = 8192 wide, its projections sized to match.
    doc["mlp_bias"] = false;
    doc["head_dim"] = 256;
    c = model_config_from_json(doc, "l.json");
    EXPECT_EQ(c.head_dim(), 256);
    EXPECT_EQ(c.q_dim(), 8192);
    EXPECT_EQ(count_params(c).linear_per_layer,
              4096LL * (8192 + 2 * 32 * 256) + 8192LL * 4096 + 3LL * 4096 * 11008);
}

// Every Llama-family model_type napkin models loads to its published parameter count: biases on
// q, k and v only (Qwen2), an explicit head dim (Mistral Nemo), tied (Qwen2-0.5B) and untied heads.
TEST(ConfigJson, HuggingFaceLlamaFamily) {
    // Qwen/Qwen2-0.5B: 494,032,768 (PreTrainedModel.num_parameters(); the model card's 0.49B,
    // 0.36B without embeddings).
    const ModelConfig qwen = load_model_config(data("hf_qwen2_0_5b_config.json"));
    EXPECT_EQ(count_params(qwen).total, 494032768);
    EXPECT_EQ(count_params(qwen).non_embedding, 494032768 - 151936LL * 896);
    EXPECT_TRUE(qwen.qkv_bias);
    EXPECT_FALSE(qwen.bias);
    EXPECT_TRUE(qwen.tied_embeddings);
    // mistralai/Mistral-Nemo-Base-2407 (12.2B): 128-wide heads with hidden_size 5120, so q is
    // 32 * 128 = 4096 wide: 40 layers of (5120 * (4096 + 2 * 1024) + 4096 * 5120 + 3 * 5120 *
    // 14336 + 2 * 5120) plus two 131072 x 5120 embeddings and the final norm.
    const ModelConfig nemo = load_model_config(data("hf_mistral_nemo_config.json"));
    EXPECT_EQ(nemo.head_dim(), 128);
    EXPECT_EQ(nemo.q_dim(), 4096);
    EXPECT_FALSE(nemo.tied_embeddings);
    EXPECT_EQ(count_params(nemo).total, 12247782400);
    // microsoft/Phi-3-mini-4k-instruct: 3,821,079,552 (its fused qkv and gate_up change no count).
    const ModelConfig phi = load_model_config(data("hf_phi3_mini_config.json"));
    EXPECT_EQ(count_params(phi).total, 3821079552);
    EXPECT_EQ(phi.name, "Phi-3-mini-4k-instruct");

    // Every parameter tensor is listed, the q/k/v biases and the narrower projection included.
    for (const ModelConfig* c : {&qwen, &nemo, &phi}) {
        std::int64_t sum = 0;
        for (const ParamTensor& t : param_tensors(*c))
            sum += t.numel();
        EXPECT_EQ(sum, count_params(*c).allocated) << c->name;
        const ModelConfig back = model_config_from_json(model_config_to_json(*c), "m");
        EXPECT_TRUE(same_shape(back, *c)) << c->name;
    }

    // An architecture napkin does not model is refused with the list of those it reads.
    json moe = hf_llama();
    moe["model_type"] = "mixtral";
    const std::string msg = from_json_error(moe);
    EXPECT_EQ(msg,
              "cfg.json: model_type: expected an architecture napkin reads "
              "(gpt2|llama|mistral|phi3|qwen2), got \"mixtral\"");
}

// ---------------------------------------------------------------------------------------------
// napkin's format

TEST(ConfigJson, NapkinFormatRoundTripsEveryPreset) {
    for (const auto& p : model_presets()) {
        const json doc = model_config_to_json(p);
        EXPECT_EQ(doc.at("format"), "napkin-model");
        const ModelConfig back = model_config_from_json(doc, "mem");
        EXPECT_TRUE(same_shape(back, p)) << p.name;
        EXPECT_EQ(back.name, p.name);
        // And through text, as a file would carry it.
        const ModelConfig reparsed = model_config_from_json(json::parse(doc.dump()), "mem");
        EXPECT_TRUE(same_shape(reparsed, p)) << p.name;
    }
    ModelConfig odd = preset_or_throw("llama3-8b");
    odd.name = "odd";
    odd.dropout = 0.1;
    odd.padded_vocab_size = 131072;
    odd.tied_embeddings = true;
    const ModelConfig back =
        model_config_from_json(json::parse(model_config_to_json(odd).dump()), "m");
    EXPECT_TRUE(same_shape(back, odd));

    const ModelConfig tiny = load_model_config(data("napkin_tiny.json"));
    EXPECT_TRUE(same_shape(tiny, preset_or_throw("tiny")));
    EXPECT_EQ(tiny.name, "tiny");
}

TEST(ConfigJson, NapkinFormatOptionalKeys) {
    json doc = model_config_to_json(preset_or_throw("llama3-8b"));
    for (const char* key : {"name", "padded_vocab_size", "n_kv_heads", "dropout"})
        doc.erase(key);
    const ModelConfig c = model_config_from_json(doc, "configs/mine.json");
    EXPECT_EQ(c.name, "mine");
    EXPECT_EQ(c.padded_vocab_size, pad_vocab(128256));
    EXPECT_EQ(c.n_kv_heads, c.n_heads);
    EXPECT_EQ(c.dropout, 0.0);

    // bias and tied_embeddings have no default: either would be wrong for one family.
    for (const char* key : {"bias", "tied_embeddings", "norm", "d_ff"}) {
        json missing = model_config_to_json(preset_or_throw("gpt2"));
        missing.erase(key);
        const std::string msg = from_json_error(missing);
        EXPECT_EQ(msg.rfind(std::string("cfg.json: ") + key + ": expected ", 0), 0u) << msg;
        EXPECT_TRUE(msg.ends_with(", got nothing")) << msg;
    }
}

TEST(ConfigJson, NapkinFormatRejectsUnknownKeys) {
    json doc = model_config_to_json(preset_or_throw("llama3-8b"));
    doc.erase("n_kv_heads");
    doc["n_kv_head"] = 8;  // a typo would otherwise silently mean MHA
    const std::string msg = from_json_error(doc);
    EXPECT_NE(msg.find("cfg.json: n_kv_head: unknown key (expected "), std::string::npos) << msg;
    EXPECT_NE(msg.find("n_kv_heads"), std::string::npos) << msg;

    // One entry of `estimate --list-models --json` loads as it is.
    json listed = model_config_to_json(preset_or_throw("gpt2"));
    listed["params"] = 124439808;
    listed["published_params"] = 124439808;
    listed["source"] = "openai-community/gpt2";
    EXPECT_TRUE(same_shape(model_config_from_json(listed, "m"), preset_or_throw("gpt2")));
}

// ---------------------------------------------------------------------------------------------
// Errors

// A UsageError, one line, naming the file and containing `needle`.
void expect_file_error(const std::string& path, const std::string& needle) {
    SCOPED_TRACE(path);
    const std::string msg = usage_error([&] { load_model_config(path); });
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(ConfigJson, FileErrorsNameTheFileAndField) {
    expect_file_error(data("bad_not_json.json"),
                      ": not valid JSON: parse error at line 5, column 1");
    expect_file_error(data("bad_number_overflow.json"), ": not valid JSON: ");
    expect_file_error(data("bad_field_type.json"),
                      ": n_layer: expected an integer in [1, 1000000], got \"twelve\"");
    expect_file_error(data("bad_heads.json"), "heads (7) must divide d-model (768)");
    expect_file_error(data("does_not_exist.json"), ": cannot open (No such file or directory)");
    expect_file_error(std::string(NAPKIN_TEST_DATA), ": cannot open (Is a directory)");
}

TEST(ConfigJson, FieldErrors) {
    const json base = model_config_to_json(preset_or_throw("gpt2"));
    auto expect_field_error = [&](const char* key, const json& value, const std::string& needle) {
        SCOPED_TRACE(std::string(key) + " = " + value.dump());
        json doc = base;
        doc[key] = value;
        const std::string msg = from_json_error(doc);
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    };
    // Layers and heads are ints up to 10^6; sizes positive int64s. 12.0 is refused: a size
    // written as a float is a mistake in a hand-written config.
    const std::string layers = "cfg.json: n_layers: expected an integer in [1, 1000000], got ";
    expect_field_error("n_layers", 12.5, layers + "12.5");
    expect_field_error("n_layers", 12.0, layers + "12.0");
    expect_field_error("n_layers", "12", layers + "\"12\"");
    expect_field_error("n_layers", true, layers + "true");
    expect_field_error("n_layers", 2000000, layers + "2000000");
    const std::string positive = "expected a positive integer, got ";
    expect_field_error("d_model", -768, "cfg.json: d_model: " + positive + "-768");
    expect_field_error("d_model", 0, "cfg.json: d_model: " + positive + "0");
    expect_field_error("d_model", 768.0, "cfg.json: d_model: " + positive + "768.0");
    expect_field_error("vocab_size", 18446744073709551615ull,
                       "cfg.json: vocab_size: expected a positive integer, got "
                       "18446744073709551615");
    expect_field_error("norm", "batchnorm",
                       "cfg.json: norm: expected one of layernorm|rmsnorm, got \"batchnorm\"");
    expect_field_error("positions", "alibi", "positions: expected one of ");
    expect_field_error("mlp", 1, "cfg.json: mlp: expected a string, got 1");
    expect_field_error("bias", "yes", "cfg.json: bias: expected true or false, got \"yes\"");
    expect_field_error("tied_embeddings", 1, "tied_embeddings: expected true or false, got 1");
    expect_field_error("dropout", 1.5, "cfg.json: dropout: expected a number in [0, 1), got 1.5");
    expect_field_error("dropout", "0.1", "dropout: expected a number in [0, 1), got \"0.1\"");
    expect_field_error("format", "other",
                       "cfg.json: format: expected \"napkin-model\", got \"other\"");
    expect_field_error("name", 3, "cfg.json: name: expected a string, got 3");

    // validate()'s errors come back prefixed with the source.
    json kv = base;
    kv["n_kv_heads"] = 5;
    EXPECT_EQ(from_json_error(kv), "cfg.json: kv-heads (5) must divide heads (12)");
    json padded = base;
    padded["padded_vocab_size"] = 50000;
    EXPECT_EQ(from_json_error(padded).rfind("cfg.json: padded vocab (50000)", 0), 0u);

    json hf = hf_gpt2();
    hf["n_head"] = 12.0;
    EXPECT_EQ(from_json_error(hf),
              "cfg.json: n_head: expected an integer in [1, 1000000], got 12.0");
    hf = hf_gpt2();
    hf.erase("n_embd");
    EXPECT_EQ(from_json_error(hf), "cfg.json: n_embd: " + positive + "nothing");
    hf = hf_gpt2();
    hf.erase("n_positions");
    EXPECT_EQ(from_json_error(hf), "cfg.json: n_ctx: " + positive + "nothing");

    EXPECT_EQ(from_json_error({{"model_type", "bert"}}),
              "cfg.json: model_type: expected an architecture napkin reads "
              "(gpt2|llama|mistral|phi3|qwen2), got \"bert\"");
    const std::string neither = from_json_error(json::object());
    EXPECT_NE(neither.find("'format'"), std::string::npos) << neither;
    EXPECT_NE(neither.find("'model_type'"), std::string::npos) << neither;
    EXPECT_EQ(from_json_error(json::array()), "cfg.json: expected an object, got an array");
}

}  // namespace
}  // namespace napkin
