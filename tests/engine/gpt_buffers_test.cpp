// The CPU engine allocates the buffer plan (core/buffer_plan.h): every temporary, by name and
// bytes in the plan's order, for each recipe that adds buffers of its own; and a micro-batch's
// forward and backward allocate no other.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/engine/gpt.h"
#include "core/model_config.h"
#include "tests/engine/buffer_plan_check.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

struct Case {
    const char* name;
    Precision precision;
    AttentionImpl attention;
    bool llama;  // rmsnorm, rotary, SwiGLU, GQA, untied head; else GPT-2's
    Finetune finetune = Finetune::full;
    Checkpointing checkpointing = Checkpointing::none;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

class GptBuffers : public testing::TestWithParam<Case> {};

TEST_P(GptBuffers, AllocatesThePlan) {
    const Case& c = GetParam();
    const ModelConfig cfg = c.llama ? test::small_config(NormKind::rmsnorm, PositionKind::rope,
                                                         MlpKind::swiglu, 2, false)
                                    : test::small_config(NormKind::layernorm, PositionKind::learned,
                                                         MlpKind::gelu, 4, true);
    PlanInputs in;
    in.micro_batch = 3;
    in.seq_len = 13;
    in.precision = c.precision;
    in.attention = c.attention;
    in.checkpointing = c.checkpointing;
    in.loss_chunk_rows = 10;
    in.finetune = c.finetune;
    if (c.finetune != Finetune::full) in.lora_rank = 4;
    HostMemory host;
    AccountingAllocator alloc(host);
    const auto gpt = Gpt::create(cfg, in, alloc, 1234);
    const test::Batch batch = test::random_batch(in.micro_batch * in.seq_len, cfg.vocab_size, 7);
    test::expect_buffers_as_planned(alloc, *gpt, DeviceKind::cpu, [&] {
        gpt->zero_grads();
        gpt->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
    });
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, GptBuffers,
    testing::Values(Case{"fp32_naive_gpt2", Precision::fp32, AttentionImpl::naive, false},
                    Case{"bf16amp_flash_llama", Precision::bf16_amp, AttentionImpl::flash, true},
                    Case{"fp16amp_naive_llama_full_checkpointing", Precision::fp16_amp,
                         AttentionImpl::naive, true, Finetune::full, Checkpointing::full},
                    Case{"fp8amp_flash_gpt2", Precision::fp8_amp, AttentionImpl::flash, false},
                    Case{"fp32_flash_gpt2_lora", Precision::fp32, AttentionImpl::flash, false,
                         Finetune::lora},
                    Case{"bf16amp_naive_llama_qlora", Precision::bf16_amp, AttentionImpl::naive,
                         true, Finetune::qlora}),
    [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace napkin
