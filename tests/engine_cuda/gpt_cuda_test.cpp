// The CUDA engine against the CPU engine (label gpu): the whole model's loss and every parameter
// gradient on the same weights, batch and dropout seed, per recipe and architecture (fp32 tight,
// 16-bit looser), and a 50-step run whose loss curve follows the CPU's. The model is the one
// orchestration (core/engine/gpt_impl.h) over each backend's kernels, so a mismatch is a CUDA
// kernel or a backend adapter (core/engine/cuda_kernels.h), never a second copy of the model.
// Without a device every test skips with the reason, except the one checking that reason's
// error; without CUDA in the build the same (the file includes no CUDA header).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/engine/engine_device.h"
#include "core/engine/gpt.h"
#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "core/tensor.h"
#include "tests/engine/test_util.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

using test::cuda_engine_unavailable;
using test::small_config;

struct GptCudaTestCase {
    const char* name;
    Precision precision;
    AttentionImpl attention;
    Checkpointing checkpointing;
    bool llama;  // rmsnorm, rotary, swiglu, GQA, no bias, untied head; else GPT-2's
    // |cuda - cpu| <= atol + rtol * max|cpu| per tensor; the loss within loss_rtol.
    double atol, rtol, loss_rtol;
    // d_model 32 over 2 heads: HD 16, which 16-bit flash attention runs on tensor cores
    // (kernels/cuda/attention_mma.cu); else small_config's HD 4, which takes the SIMT kernels.
    bool tensor_core_heads = false;
    // fp8-amp: every GEMM dimension a multiple of 16, as cuBLASLt's fp8 kernels need: d_model 32
    // over 2 heads, d_ff 64, B T = 2 x 16.
    bool fp8_shapes = false;
    // LoRA / QLoRA (rank 4, alpha 8): the adapters' B moved off zero on both sides, so every
    // adapter gradient and the input gradient through the adapters are compared.
    Finetune finetune = Finetune::full;
    // GPT-2's dropout: both models draw their masks (and flash attention its keep bits, in the
    // kernels) from the same micro-batch seed, so the CUDA kernels' masks must be the CPU's bit
    // for bit.
    double dropout = 0.0;
    // > 0: 2 query heads of this dimension (1 kv head for Llama's GQA): 64 and 128 take the
    // mma.sync flash attention (kernels/cuda/attention_fa2_*.cu) in 16-bit precisions.
    int head_dim = 0;
    // The CUDA engine with cuBLASLt's epilogue fusions (PlanInputs::gemm_epilogues: GELU in the
    // MLP's GEMMs, bias gradients by BGRADB) against the CPU's unfused kernels: they round in
    // other places (core/op_plan.h), within the recipe's tolerance.
    bool epilogues = false;
};

void PrintTo(const GptCudaTestCase& c, std::ostream* os) {
    *os << c.name;
}

class GptCudaVsCpu : public testing::TestWithParam<GptCudaTestCase> {};

// Loss and every gradient of one micro-batch, CUDA against CPU, from the same seed (the weights
// are drawn on the host and set through set_param on both).
TEST_P(GptCudaVsCpu, LossAndEveryGradientMatch) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const GptCudaTestCase& c = GetParam();
    ModelConfig cfg =
        c.llama ? small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false)
                : small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
    if (c.tensor_core_heads || c.fp8_shapes) {
        cfg.d_model = 32;
        cfg.n_heads = 2;
        cfg.n_kv_heads = 2;
    }
    if (c.fp8_shapes) cfg.d_ff = 64;
    if (c.head_dim > 0) {
        cfg.d_model = 2 * c.head_dim;
        cfg.n_heads = 2;
        cfg.n_kv_heads = c.llama ? 1 : 2;
    }
    cfg.dropout = c.dropout;
    PlanInputs in;
    in.micro_batch = c.fp8_shapes ? 2 : 3;
    in.seq_len = c.fp8_shapes ? 16 : 13;  // odd shapes: M = 39 rows (fp8: 32)
    in.precision = c.precision;
    in.attention = c.attention;
    in.checkpointing = c.checkpointing;
    in.loss_chunk_rows = 10;  // several chunks, the last one short
    in.finetune = c.finetune;
    if (c.finetune != Finetune::full) {
        in.lora_rank = 4;
        in.lora_alpha = 8.0f;
    }
    const std::int64_t n = in.micro_batch * in.seq_len;
    std::mt19937 rng(7);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(2 * n));
    for (auto& t : tokens)
        t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
    const float dloss = 0.5f;

    HostMemory host;
    AccountingAllocator host_alloc(host);
    auto cpu = Gpt::create(cfg, in, host_alloc, 1234);

    auto device = open_engine_device(DeviceKind::cuda);
    AccountingAllocator dev_alloc(device->memory());
    {
        PlanInputs gpu_in = in;
        gpu_in.gemm_epilogues = c.epilogues;
        auto gpu = device->create_gpt(cfg, gpu_in, dev_alloc, 1234);
        EXPECT_EQ(gpu->plan().fusions.gelu, c.epilogues) << "the plan did not fuse as asked";
        std::normal_distribution<float> nd(0.0f, 0.2f);
        for (std::size_t i = 0; i < cpu->params().size(); ++i) {
            if (!cpu->params()[i].adapter) continue;
            std::vector<float> w(static_cast<std::size_t>(cpu->params()[i].numel));
            cpu->get_param(i, w.data());
            for (float& v : w)
                v += nd(rng);
            cpu->set_param(i, w.data());
            gpu->set_param(i, w.data());
        }
        // The trainer's per-step seed, set alike on both (no effect without dropout).
        const std::uint64_t dropout_seed = 0x5eed5eedull;
        cpu->set_dropout_seed(dropout_seed);
        gpu->set_dropout_seed(dropout_seed);
        cpu->zero_grads();
        const float cpu_loss = cpu->forward_backward(tokens.data(), tokens.data() + n, dloss);
        Tensor batch(dev_alloc, "batch", MemCategory::data, DType::f32,
                     {2 * n});  // int32, same size
        device->copy_to_device(batch.raw(), tokens.data(), tokens.size() * sizeof(std::int32_t));
        gpu->zero_grads();
        const auto* dev_tokens = static_cast<const std::int32_t*>(batch.raw());
        const float gpu_loss = gpu->forward_backward(dev_tokens, dev_tokens + n, dloss);
        EXPECT_NEAR(gpu_loss, cpu_loss, c.loss_rtol * std::abs(cpu_loss)) << "loss";

        ASSERT_EQ(gpu->params().size(), cpu->params().size());
        for (std::size_t i = 0; i < cpu->params().size(); ++i) {
            const ParamSlot& p = cpu->params()[i];
            SCOPED_TRACE(p.name);
            std::vector<float> w_cpu(static_cast<std::size_t>(p.numel)), w_gpu(w_cpu.size());
            cpu->get_param(i, w_cpu.data());
            gpu->get_param(i, w_gpu.data());
            EXPECT_EQ(w_cpu, w_gpu) << "the initial weights differ";
            std::vector<float> g_cpu(w_cpu.size()), g_gpu(w_cpu.size());
            cpu->get_grad(i, g_cpu.data());
            gpu->get_grad(i, g_gpu.data());
            double scale = 0.0;
            for (float g : g_cpu)
                scale = std::max(scale, static_cast<double>(std::abs(g)));
            const double tol = c.atol + c.rtol * scale;
            int bad = 0;
            for (std::size_t k = 0; k < g_cpu.size(); ++k) {
                const double d = std::abs(static_cast<double>(g_gpu[k]) - g_cpu[k]);
                if (!(d <= tol)) {  // NaN fails
                    if (bad++ < 5)
                        ADD_FAILURE()
                            << "grad[" << k << "] cuda " << g_gpu[k] << " cpu " << g_cpu[k];
                }
            }
            EXPECT_EQ(bad, 0) << bad << " of " << g_cpu.size()
                              << " gradient elements off by more than " << tol;
        }
        // Measured memory compares with the CPU's category by category: the same tensors, plus
        // the CUDA scratch (cuBLASLt workspace, loss rows) among the temporaries.
        for (MemCategory m :
             {MemCategory::parameters, MemCategory::master_weights, MemCategory::gradients}) {
            EXPECT_EQ(dev_alloc.peak_bytes(m), host_alloc.peak_bytes(m))
                << enum_name(kMemCategoryNames, m);
        }
    }
    EXPECT_EQ(dev_alloc.live_blocks(), 0);
}

const GptCudaTestCase kGptCudaTestCases[] = {
    {"fp32_flash_gpt2", Precision::fp32, AttentionImpl::flash, Checkpointing::none, false, 1e-6,
     1e-3, 1e-5},
    {"fp32_naive_gpt2", Precision::fp32, AttentionImpl::naive, Checkpointing::none, false, 1e-6,
     1e-3, 1e-5},
    {"fp32_flash_llama", Precision::fp32, AttentionImpl::flash, Checkpointing::none, true, 1e-6,
     1e-3, 1e-5},
    {"fp32_full_checkpointing", Precision::fp32, AttentionImpl::flash, Checkpointing::full, false,
     1e-6, 1e-3, 1e-5},
    {"bf16amp_flash_gpt2", Precision::bf16_amp, AttentionImpl::flash, Checkpointing::none, false,
     1e-4, 5e-2, 1e-2},
    {"bf16amp_naive_llama", Precision::bf16_amp, AttentionImpl::naive, Checkpointing::none, true,
     1e-4, 5e-2, 1e-2},
    {"bf16_flash_gpt2", Precision::bf16, AttentionImpl::flash, Checkpointing::none, false, 1e-4,
     5e-2, 1e-2},
    {"fp16amp_flash_gpt2", Precision::fp16_amp, AttentionImpl::flash, Checkpointing::none, false,
     1e-5, 2e-2, 5e-3},
    {"bf16amp_flash_gpt2_hd16", Precision::bf16_amp, AttentionImpl::flash, Checkpointing::none,
     false, 1e-4, 5e-2, 1e-2, true},
    {"fp16amp_flash_gpt2_hd16", Precision::fp16_amp, AttentionImpl::flash, Checkpointing::none,
     false, 1e-5, 2e-2, 5e-3, true},
    // fp8-amp: both sides cast the same bf16 values with the same rule, but the bf16 values
    // differ in their last bits (other accumulation orders), which moves the odd element across
    // an fp8 rounding boundary: a 2^-4 (E4M3) or 2^-3 (E5M2) step in one operand element. In a
    // gradient element that a few products dominate (32 rows here), that is up to ~12% of the
    // tensor's largest element (h.0.attn.qkv.weight, one element of 3072, on the emulator); 20%.
    {"fp8amp_flash_gpt2", Precision::fp8_amp, AttentionImpl::flash, Checkpointing::none, false,
     1e-4, 2e-1, 2e-2, false, true},
    {"fp8amp_naive_llama_full_checkpointing", Precision::fp8_amp, AttentionImpl::naive,
     Checkpointing::full, true, 1e-4, 2e-1, 2e-2, false, true},
    {"fp32_flash_llama_lora", Precision::fp32, AttentionImpl::flash, Checkpointing::none, true,
     1e-6, 1e-3, 1e-5, false, false, Finetune::lora},
    {"bf16amp_flash_gpt2_qlora_full_checkpointing", Precision::bf16_amp, AttentionImpl::flash,
     Checkpointing::full, false, 1e-4, 5e-2, 1e-2, false, false, Finetune::qlora},
    {"fp16amp_naive_llama_qlora", Precision::fp16_amp, AttentionImpl::naive, Checkpointing::none,
     true, 1e-5, 2e-2, 5e-3, false, false, Finetune::qlora},
    // Dropout 0.1 on the embedding output, the attention probabilities and both residual
    // branches (kernels/cuda/dropout.cu, the naive attention's mask and Pd).
    {"fp32_naive_gpt2_dropout", Precision::fp32, AttentionImpl::naive, Checkpointing::none, false,
     1e-6, 1e-3, 1e-5, false, false, Finetune::full, 0.1},
    {"bf16amp_naive_gpt2_dropout", Precision::bf16_amp, AttentionImpl::naive, Checkpointing::none,
     false, 1e-4, 5e-2, 1e-2, false, false, Finetune::full, 0.1},
    // Flash attention's dropout, its keep bits drawn in the kernels forward and backward: the
    // SIMT kernels (fp32, HD 4) and the tensor-core ones (bf16-amp, HD 16).
    {"fp32_flash_gpt2_dropout", Precision::fp32, AttentionImpl::flash, Checkpointing::none, false,
     1e-6, 1e-3, 1e-5, false, false, Finetune::full, 0.1},
    {"bf16amp_flash_gpt2_hd16_dropout", Precision::bf16_amp, AttentionImpl::flash,
     Checkpointing::none, false, 1e-4, 5e-2, 1e-2, true, false, Finetune::full, 0.1},
    // The mma.sync flash attention: GPT-2's HD 64, and HD 128 under GQA with dropout.
    {"bf16amp_flash_gpt2_hd64", Precision::bf16_amp, AttentionImpl::flash, Checkpointing::none,
     false, 1e-4, 5e-2, 1e-2, false, false, Finetune::full, 0.0, 64},
    {"fp16amp_flash_llama_hd128_dropout", Precision::fp16_amp, AttentionImpl::flash,
     Checkpointing::none, true, 1e-5, 2e-2, 5e-3, false, false, Finetune::full, 0.1, 128},
    // The epilogue fusions: GELU forward and backward and the bias gradients in the GEMMs, under
    // each 16-bit recipe, with dropout (the branch gradient through its mask into DGELU) and
    // with full checkpointing (the fused fc rebuilt for the backward).
    {"bf16amp_flash_gpt2_epilogues", Precision::bf16_amp, AttentionImpl::flash, Checkpointing::none,
     false, 1e-4, 5e-2, 1e-2, false, false, Finetune::full, 0.0, 0, true},
    {"fp16amp_flash_gpt2_epilogues", Precision::fp16_amp, AttentionImpl::flash, Checkpointing::none,
     false, 1e-5, 2e-2, 5e-3, false, false, Finetune::full, 0.0, 0, true},
    {"bf16_naive_gpt2_dropout_epilogues", Precision::bf16, AttentionImpl::naive,
     Checkpointing::none, false, 1e-4, 5e-2, 1e-2, false, false, Finetune::full, 0.1, 0, true},
    {"bf16amp_flash_gpt2_full_checkpointing_epilogues", Precision::bf16_amp, AttentionImpl::flash,
     Checkpointing::full, false, 1e-4, 5e-2, 1e-2, false, false, Finetune::full, 0.0, 0, true},
};
INSTANTIATE_TEST_SUITE_P(Recipes, GptCudaVsCpu, testing::ValuesIn(kGptCudaTestCases),
                         [](const testing::TestParamInfo<GptCudaTestCase>& i) {
                             return std::string(i.param.name);
                         });

TrainOptions tiny_run(Precision precision, DeviceKind device,
                      OptimizerKind optimizer = OptimizerKind::adamw, bool epilogues = false) {
    TrainOptions o;
    o.plan.gemm_epilogues = epilogues;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 4;
    o.plan.seq_len = 64;
    o.plan.precision = precision;
    o.plan.optimizer = optimizer;
    o.device = device;
    o.steps = 50;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 5;
    o.optimizer.total_steps = 50;
    return o;
}

// `steps` optimizer steps on the synthetic corpus (50 unless said): the CUDA loss curve follows
// the CPU's step by step (the gap may grow as rounding differences compound, within a few
// percent) and, over 50 steps, learns.
void follow_cpu(Precision precision, double rtol, OptimizerKind optimizer = OptimizerKind::adamw,
                int steps = 50, bool epilogues = false) {
    Trainer cpu(tiny_run(precision, DeviceKind::cpu, optimizer));
    Trainer gpu(tiny_run(precision, DeviceKind::cuda, optimizer, epilogues));
    std::vector<float> cpu_loss, gpu_loss;
    for (int s = 0; s < steps; ++s) {
        cpu_loss.push_back(cpu.step().loss);
        gpu_loss.push_back(gpu.step().loss);
        EXPECT_NEAR(gpu_loss.back(), cpu_loss.back(), rtol * cpu_loss.back()) << "step " << s;
    }
    if (steps >= 50) {
        EXPECT_LT(gpu_loss.back(), gpu_loss.front() - 0.5f) << "the CUDA run did not learn";
    }
}

TEST(GptCudaTraining, Fp32FiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (LossAndEveryGradientMatch checks one)");
    follow_cpu(Precision::fp32, 1e-2);
}

TEST(GptCudaTraining, Bf16AmpFiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (LossAndEveryGradientMatch checks one)");
    follow_cpu(Precision::bf16_amp, 5e-2);
}

// The epilogue fusions (napkin train's default on a GPU) against the CPU's unfused kernels.
TEST(GptCudaTraining, Bf16AmpEpiloguesFiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (LossAndEveryGradientMatch checks one)");
    follow_cpu(Precision::bf16_amp, 5e-2, OptimizerKind::adamw, 50, true);
}

// Three steps on the emulator too: the fused run's first updates follow the unfused CPU's.
TEST(GptCudaTraining, Bf16AmpEpiloguesFirstStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    follow_cpu(Precision::bf16_amp, 2e-2, OptimizerKind::adamw, 3, true);
}

TEST(GptCudaTraining, PureBf16FiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (LossAndEveryGradientMatch checks one)");
    follow_cpu(Precision::bf16, 5e-2);
}

// Delayed scaling (the default): from the second step on each cast scales from the amax
// histories both engines recorded and rolled on their own devices.
TEST(GptCudaTraining, Fp8AmpFiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR(
        "50 steps take minutes (Fp8AmpDelayedFirstStepsFollowCpu checks three)");
    follow_cpu(Precision::fp8_amp, 5e-2);
}

// Three steps on the emulator: the last two cast with the rolled histories' scales.
TEST(GptCudaTraining, Fp8AmpDelayedFirstStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    follow_cpu(Precision::fp8_amp, 2e-2, OptimizerKind::adamw, 3);
}

// adamw-8bit: the states are codes and block absmax (kernels/cuda/optimizer.cu), the rest of the
// step as adamw's. A code may differ from the CPU's by one step where the rule's last bit does;
// the curves follow as closely as adamw's.
TEST(GptCudaTraining, AdamW8bitFiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (AdamW8bitFirstStepsFollowCpu checks three)");
    follow_cpu(Precision::fp32, 1e-2, OptimizerKind::adamw_8bit);
}

TEST(GptCudaTraining, AdamW8bitBf16AmpFiftyStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("50 steps take minutes (AdamW8bitFirstStepsFollowCpu checks three)");
    follow_cpu(Precision::bf16_amp, 5e-2, OptimizerKind::adamw_8bit);
}

// Three steps, short enough for the emulator: the second and third losses are the first two
// updates' (8-bit states from zero, then from codes), within fp32's tolerance.
TEST(GptCudaTraining, AdamW8bitFirstStepsFollowCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    follow_cpu(Precision::fp32, 1e-3, OptimizerKind::adamw_8bit, 3);
}

// fp8-amp on CUDA needs fp8 tensor cores (sm_89 or later) and GEMM dimensions that are multiples
// of 16; each refusal is one line naming the GPU or the dimension. On the emulator the device
// reports sm_80 under NAPKIN_EMU_SM=80 (an A100's); on a GPU the refusal is checked where the
// GPU is older than sm_89.
TEST(GptCudaDevice, Fp8AmpNeedsSm89AndDimensionsOfSixteen) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 16;
    in.precision = Precision::fp8_amp;
    ModelConfig cfg =
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 2, true);
    cfg.d_model = 32;
    cfg.n_heads = 2;
    cfg.d_ff = 64;
    const bool emulated = test::cuda_engine_emulated();
    if (emulated || probe_devices().sm_major * 10 + probe_devices().sm_minor < 89) {
        if (emulated) setenv("NAPKIN_EMU_SM", "80", 1);
        auto device = open_engine_device(DeviceKind::cuda);
        AccountingAllocator alloc(device->memory());
        const std::string msg =
            test::error_of<UsageError>([&] { device->create_gpt(cfg, in, alloc, 1); });
        if (emulated) unsetenv("NAPKIN_EMU_SM");
        test::expect_contains(msg, "precision fp8-amp: " + device->name() + " (sm_");
        test::expect_contains(msg, "no fp8 tensor cores");
        if (!emulated) return;
    }
    auto device = open_engine_device(DeviceKind::cuda);
    AccountingAllocator alloc(device->memory());
    cfg.d_ff = 24;
    test::expect_contains(
        test::error_of<UsageError>([&] { device->create_gpt(cfg, in, alloc, 1); }),
        "precision fp8-amp on CUDA: d_ff is 24, and cuBLASLt's fp8 GEMMs need "
        "multiples of 16");
    cfg.d_ff = 64;
    in.seq_len = 13;
    test::expect_contains(
        test::error_of<UsageError>([&] { device->create_gpt(cfg, in, alloc, 1); }),
        "micro-batch x seq-len is 26");
}

// The one test that runs everywhere: without a usable device, asking for one is a one-line
// usage error naming the reason.
TEST(GptCudaDevice, NoDeviceIsAUsageError) {
    const std::string reason = cuda_engine_unavailable();
    if (reason.empty()) GTEST_SKIP() << "a CUDA device is present: nothing to refuse";
    try {
        open_engine_device(DeviceKind::cuda);
        FAIL() << "open_engine_device(cuda) succeeded without a device";
    } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "device cuda: no CUDA device (" + reason + ")");
    }
}

TEST(GptCudaDevice, CpuNeedsNoDevice) {
    EXPECT_EQ(open_engine_device(DeviceKind::cpu), nullptr);
}

}  // namespace
}  // namespace napkin
