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

using test::BufferCase;

class GptBuffers : public testing::TestWithParam<BufferCase> {};

TEST_P(GptBuffers, AllocatesThePlan) {
    const BufferCase& c = GetParam();
    const ModelConfig cfg = test::buffer_case_model(c);
    const PlanInputs in = test::buffer_case_inputs(c, 3, 13);
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
    testing::Values(
        BufferCase{"fp32_naive_gpt2", Precision::fp32, AttentionImpl::naive, false},
        BufferCase{"bf16amp_flash_llama", Precision::bf16_amp, AttentionImpl::flash, true},
        BufferCase{"fp16amp_naive_llama_full_checkpointing", Precision::fp16_amp,
                   AttentionImpl::naive, true, Finetune::full, Checkpointing::full},
        BufferCase{"fp8amp_flash_gpt2", Precision::fp8_amp, AttentionImpl::flash, false},
        BufferCase{"fp32_flash_gpt2_lora", Precision::fp32, AttentionImpl::flash, false,
                   Finetune::lora},
        BufferCase{"bf16amp_naive_llama_qlora", Precision::bf16_amp, AttentionImpl::naive, true,
                   Finetune::qlora}),
    [](const testing::TestParamInfo<BufferCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace napkin
