// The CUDA engine allocates the buffer plan (core/buffer_plan.h): every temporary, by name and
// bytes in the plan's order (the cuBLASLt workspace, the loss chunk's scratch and row losses,
// fp8's casts and transposes, LoRA's and QLoRA's transients), a micro-batch's forward and
// backward no other; and the optimizer step's global norm the plan's scratch for its tensors.
// Label gpu, and slow on the CUDA emulator (emu.*); skips without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer_plan.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/model_config.h"
#include "core/tensor.h"
#include "tests/engine/buffer_plan_check.h"
#include "tests/engine/test_util.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

using test::BufferCase;

class GptBuffersCuda : public testing::TestWithParam<BufferCase> {};

TEST_P(GptBuffersCuda, AllocatesThePlan) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const BufferCase& c = GetParam();
    ModelConfig cfg = test::buffer_case_model(c);
    // Every GEMM dimension a multiple of 16, as cuBLASLt's fp8 kernels need (B T = 2 x 16).
    cfg.d_model = 32;
    cfg.n_heads = 2;
    cfg.n_kv_heads = 2;
    cfg.d_ff = 64;
    const PlanInputs in = test::buffer_case_inputs(c, 2, 16);
    const std::int64_t n = in.micro_batch * in.seq_len;
    const test::Batch batch = test::random_batch(n, cfg.vocab_size, 7);

    auto device = open_engine_device(DeviceKind::cuda);
    AccountingAllocator alloc(device->memory());
    Tensor tokens(alloc, "batch", MemCategory::data, DType::f32, {2 * n});  // int32, same size
    device->copy_to_device(tokens.raw(), batch.inputs.data(),
                           batch.inputs.size() * sizeof(std::int32_t));
    auto* dev_tokens = static_cast<std::int32_t*>(tokens.raw());
    device->copy_to_device(dev_tokens + n, batch.targets.data(),
                           batch.targets.size() * sizeof(std::int32_t));
    const auto gpt = device->create_gpt(cfg, in, alloc, 1234);
    test::expect_buffers_as_planned(alloc, *gpt, DeviceKind::cuda, [&] {
        gpt->zero_grads();
        gpt->forward_backward(dev_tokens, dev_tokens + n, 1.0f);
        device->synchronize();
    });

    // The global norm over every trainable gradient allocates the plan's scratch for that many.
    std::vector<OptimizerTensor> grads;
    for (ParamSlot& p : gpt->params()) {
        if (!p.trainable) continue;
        OptimizerTensor& t = grads.emplace_back();
        t.grad = p.grad.raw();
        t.grad_dtype = p.grad.dtype();
        t.n = p.numel;
    }
    const int count = static_cast<int>(grads.size());
    device->grad_sum_squares(grads.data(), count, alloc);
    const test::NamedBytes temporaries = test::allocations(alloc, MemCategory::temporaries);
    ASSERT_FALSE(temporaries.empty());
    const PlanBuffer want = grad_norm_scratch(count);
    EXPECT_EQ(temporaries.back(),
              test::NamedBytes::value_type(std::string(want.name),
                                           static_cast<std::int64_t>(want.bytes())));
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, GptBuffersCuda,
    testing::Values(
        BufferCase{"fp32_naive_gpt2", Precision::fp32, AttentionImpl::naive, false},
        BufferCase{"bf16amp_flash_llama", Precision::bf16_amp, AttentionImpl::flash, true},
        BufferCase{"fp8amp_flash_gpt2", Precision::fp8_amp, AttentionImpl::flash, false},
        BufferCase{"fp16amp_naive_llama_qlora", Precision::fp16_amp, AttentionImpl::naive, true,
                   Finetune::qlora}),
    [](const testing::TestParamInfo<BufferCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace napkin
