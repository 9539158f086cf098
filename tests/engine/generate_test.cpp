// The inference engine on the CPU (core/engine/generate.h): decode with a KV cache computes what
// a full forward without one computes, its memory is the estimator's to the byte, napkin train's
// initialization is reproduced, and shapes it cannot run are refused.
#include "core/engine/generate.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/engine/gpt.h"
#include "tests/engine/generate_check.h"

namespace napkin {
namespace {

TEST(Generate, DecodeLogitsEqualAFullForwardWithoutACacheFp32) {
    for (const ModelConfig& cfg : test::generate_configs())
        test::check_decode_matches_full_forward(cfg, DType::f32, 2e-5, 2e-5, nullptr);
}

// bf16 weights, cache and activations against the double forward on the same (rounded) weights
// (each op rounds its output to 8 bits of mantissa) and against the bf16 prefill.
TEST(Generate, DecodeLogitsEqualAFullForwardWithoutACacheBf16) {
    for (const ModelConfig& cfg : test::generate_configs())
        test::check_decode_matches_full_forward(cfg, DType::bf16, test::kBf16ForwardTol,
                                                test::kBf16CacheTol, nullptr);
}

TEST(Generate, MemoryMatchesTheEstimateToTheByte) {
    for (const ModelConfig& cfg : test::generate_configs()) {
        for (DType dt : {DType::f32, DType::bf16}) {
            test::check_memory_matches_estimate(cfg, dt, {1, 3, 2}, nullptr);
            test::check_memory_matches_estimate(cfg, dt, {3, 9, 7}, nullptr);
        }
    }
    test::check_memory_matches_estimate(preset_or_throw("tiny"), DType::bf16, {2, 16, 4}, nullptr);
}

// The random weights are napkin train's for the same seed.
TEST(Generate, RandomWeightsAreTrainsInitialization) {
    const ModelConfig cfg = test::generate_configs()[1];
    HostMemory host;
    AccountingAllocator alloc(host);
    auto gen = Generator::create(cfg, DType::f32, {1, 2, 2}, alloc, 42);
    PlanInputs in;
    in.micro_batch = 1;
    in.seq_len = 2;
    in.precision = Precision::fp32;
    auto gpt = Gpt::create(cfg, in, alloc, 42);
    ASSERT_EQ(gen->params().size(), gpt->params().size());
    for (std::size_t i = 0; i < gen->params().size(); ++i) {
        std::vector<float> a(static_cast<std::size_t>(gen->params()[i].numel)), b(a.size());
        gen->get_param(i, a.data());
        gpt->get_param(i, b.data());
        EXPECT_EQ(a, b) << gen->params()[i].name;
    }
}

TEST(Generate, RefusesWhatTheModelCannotRun) {
    const ModelConfig cfg = test::generate_configs()[0];  // context 16
    HostMemory host;
    AccountingAllocator alloc(host);
    const auto refused = [&](GenerateShape s, const std::string& flag) {
        try {
            Generator::create(cfg, DType::f32, s, alloc, 1);
            ADD_FAILURE() << "accepted " << flag;
        } catch (const UsageError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(flag, 0), 0u) << e.what();
        }
    };
    // The library names the field; napkin generate prints its flag (cli/flag_names.cpp).
    refused({0, 4, 4}, "batch: ");
    refused({1, 4, 0}, "max_new_tokens: ");
    refused({1, 10, 7}, "max_new_tokens: a prompt of 10 tokens plus 7 new ones passes");
    EXPECT_NO_THROW(Generator::create(cfg, DType::f32, {1, 10, 6}, alloc, 1));
    EXPECT_EQ(alloc.current_total_bytes(), 0);
}

}  // namespace
}  // namespace napkin
