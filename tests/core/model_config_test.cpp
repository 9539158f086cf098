#include "core/model_config.h"

#include <gtest/gtest.h>

#include <limits>

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
    expect_error([](ModelConfig& c) { c.qkv_bias = true; }, "qkv-bias: only with bias off");
    expect_error([](ModelConfig& c) { c.explicit_head_dim = -64; }, "head-dim");
}

// Biases on q, k and v only (Qwen2) and a head dim other than C / NH (Mistral Nemo, Gemma): the
// counts, the parameter list and the op plan's GEMMs all follow them.
TEST(ModelConfig, QkvBiasAndExplicitHeadDim) {
    ModelConfig c = preset_or_throw("llama2-7b");
    const ParamCounts base = count_params(c);
    c.qkv_bias = true;
    EXPECT_EQ(count_params(c).per_layer, base.per_layer + 3 * 4096);
    c.qkv_bias = false;
    c.n_heads = 16;
    c.n_kv_heads = 8;
    c.explicit_head_dim = 128;  // q: 16 * 128 = 2048 wide; k, v: 8 * 128 = 1024 each
    EXPECT_EQ(c.q_dim(), 2048);
    EXPECT_EQ(c.qkv_dim(), 4096);
    EXPECT_EQ(count_params(c).linear_per_layer, 4096LL * 4096 + 2048LL * 4096 + 3LL * 4096 * 11008);
    std::int64_t sum = 0;
    for (const ParamTensor& t : param_tensors(c, 8)) {
        if (t.name == "h.0.attn.proj.weight") {
            EXPECT_EQ(t.shape, (std::vector<std::int64_t>{4096, 2048}));
        }
        if (t.name == "h.0.attn.proj.lora_a") {
            EXPECT_EQ(t.shape, (std::vector<std::int64_t>{8, 2048}));
        }
        if (!t.adapter) sum += t.numel();
    }
    EXPECT_EQ(sum, count_params(c).allocated);
    c.explicit_head_dim = 0;
    EXPECT_EQ(c.head_dim(), 256);  // C / NH again
    c.n_heads = 32;
    c.n_kv_heads = 32;
    c.explicit_head_dim = 128;  // = C / NH: the same as none
    EXPECT_EQ(count_params(c).total, base.total);
}

TEST(ModelConfig, PadVocab) {
    EXPECT_EQ(pad_vocab(50257), 50304);
    EXPECT_EQ(pad_vocab(32000), 32000);
    // No overflow at int64's end (--vocab 2^63 - 1 reached it under UBSan): returned as it is,
    // for validate() to refuse.
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    EXPECT_EQ(pad_vocab(kMax), kMax);
    EXPECT_EQ(pad_vocab(kMax - 127), kMax - 127);  // int64's last multiple of 128
    EXPECT_EQ(pad_vocab(128256), 128256);
    EXPECT_EQ(pad_vocab(1), 128);
}

}  // namespace
}  // namespace napkin
