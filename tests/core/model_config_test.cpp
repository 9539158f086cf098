#include "core/model_config.h"

#include <gtest/gtest.h>

#include "core/check.h"

namespace napkin {
namespace {

TEST(ModelPresets, CountsEqualPublishedCounts) {
    ASSERT_EQ(model_presets().size(), preset_sources().size());
    for (const auto& src : preset_sources()) {
        const ModelConfig* c = find_preset(src.name);
        ASSERT_NE(c, nullptr) << src.name;
        EXPECT_NO_THROW(validate(*c)) << src.name;
        EXPECT_EQ(count_params(*c).total, src.published_params) << src.name;
    }
}

TEST(ModelPresets, Gpt2ByHand) {
    // 124M: wte 50257*768 + wpe 1024*768 + 12 * (12*768^2 + 13*768) + 2*768.
    const ParamCounts p = count_params(preset_or_throw("gpt2"));
    EXPECT_EQ(p.token_embedding, 50257 * 768);
    EXPECT_EQ(p.position_embedding, 1024 * 768);
    EXPECT_EQ(p.per_layer, 12 * 768 * 768 + 13 * 768);
    EXPECT_EQ(p.head, 0);
    EXPECT_EQ(p.non_embedding, 12 * p.per_layer + 2 * 768);
    EXPECT_EQ(p.matmul, 12 * 12 * 768 * 768 + 50257 * 768);
    EXPECT_EQ(p.allocated, p.total + (50304 - 50257) * 768);
}

TEST(ModelPresets, ParamTensorsSumToAllocated) {
    for (const auto& c : model_presets()) {
        if (c.n_layers > 40) continue;  // the list is long for the 70B+ models; same code path
        std::int64_t sum = 0;
        for (const auto& t : param_tensors(c)) sum += t.numel();
        EXPECT_EQ(sum, count_params(c).allocated) << c.name;
    }
}

TEST(ModelPresets, Llama3GqaShapes) {
    const ModelConfig& c = preset_or_throw("llama3-8b");
    EXPECT_EQ(c.head_dim(), 128);
    EXPECT_EQ(c.kv_dim(), 8 * 128);
    EXPECT_EQ(c.qkv_dim(), 4096 + 2 * 1024);
}

TEST(ModelPresets, UnknownPresetListsNames) {
    try {
        preset_or_throw("gpt5");
        FAIL() << "expected UsageError";
    } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'gpt5'"), std::string::npos);
        for (const auto& c : model_presets()) EXPECT_NE(msg.find(c.name), std::string::npos) << c.name;
    }
}

TEST(ModelConfig, ValidateRejectsBadShapes) {
    ModelConfig base = preset_or_throw("gpt2");
    auto expect_error = [&](auto mutate, const char* needle) {
        ModelConfig c = base;
        mutate(c);
        try {
            validate(c);
            ADD_FAILURE() << "expected UsageError containing " << needle;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error([](ModelConfig& c) { c.n_heads = 7; }, "heads (7) must divide d-model");
    expect_error([](ModelConfig& c) { c.n_kv_heads = 5; }, "kv-heads (5) must divide heads");
    expect_error([](ModelConfig& c) { c.n_layers = 0; }, "layers");
    expect_error([](ModelConfig& c) { c.d_model = -768; }, "d-model");
    expect_error([](ModelConfig& c) { c.vocab_size = 0; }, "vocab");
    expect_error([](ModelConfig& c) { c.padded_vocab_size = 100; }, "padded vocab");
    expect_error([](ModelConfig& c) { c.dropout = 1.0; }, "dropout");
    expect_error([](ModelConfig& c) { c.d_model = std::int64_t{1} << 40; }, "d-model: 1099511627776 is beyond");
}

TEST(ModelConfig, PadVocab) {
    EXPECT_EQ(pad_vocab(50257), 50304);
    EXPECT_EQ(pad_vocab(32000), 32000);
    EXPECT_EQ(pad_vocab(128256), 128256);
    EXPECT_EQ(pad_vocab(1), 128);
}

}  // namespace
}  // namespace napkin
