// The estimator's temporaries: the buffer plan's sum (core/buffer_plan.h), which the engine
// allocates, line by line, for either engine across the recipes; plus the gathered units and the
// optimizer step's global-norm scratch. GPT-2's by hand, as docs/ESTIMATOR.md section 5 derives
// them.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/buffer_plan.h"
#include "estimator/estimate.h"

namespace napkin {
namespace {

using Engine = EstimateInputs::Engine;

EstimateInputs inputs(const char* preset) {
    EstimateInputs in;
    in.model = preset_or_throw(preset);
    in.seq_len = 512;
    in.micro_batch = 2;
    in.gpu_memory_bytes = 80e9;
    in.peak_flops_per_s = 989.5e12;
    return in;
}

// Tensors the device step's global norm passes at ZeRO 0: every trainable one.
int trainable_tensors(const ModelConfig& c, Finetune finetune, std::int64_t lora_rank) {
    int n = 0;
    const bool adapters = finetune != Finetune::full;
    for (const ParamTensor& t : param_tensors(c, adapters ? lora_rank : 0))
        n += !adapters || t.adapter ? 1 : 0;
    return n;
}

TEST(Temporaries, AreTheBufferPlansSum) {
    for (const char* preset : {"gpt2", "llama3-8b"}) {
        for (auto precision :
             {Precision::fp32, Precision::bf16_amp, Precision::fp16_amp, Precision::fp8_amp}) {
            for (auto attention : {AttentionImpl::naive, AttentionImpl::flash}) {
                for (auto finetune : {Finetune::full, Finetune::lora, Finetune::qlora}) {
                    for (auto engine : {Engine::cpu, Engine::cuda}) {
                        for (auto offload : {Offload::none, Offload::optimizer}) {
                            SCOPED_TRACE(testing::Message()
                                         << preset << " " << enum_name(kPrecisionNames, precision)
                                         << " " << enum_name(kAttentionNames, attention) << " "
                                         << enum_name(kFinetuneNames, finetune) << " "
                                         << (engine == Engine::cpu ? "cpu" : "cuda") << " offload "
                                         << enum_name(kOffloadNames, offload));
                            EstimateInputs in = inputs(preset);
                            in.precision = precision;
                            in.attention = attention;
                            in.finetune = finetune;
                            in.lora_rank = 16;
                            in.engine = engine;
                            in.offload = offload;
                            Estimator est;
                            const Estimate e = est.run(in);
                            const bool cuda = engine == Engine::cuda;
                            const BufferPlan model = build_buffer_plan(
                                est.plan(), cuda ? DeviceKind::cuda : DeviceKind::cpu);
                            const TemporaryBytes& t = e.temporaries;
                            EXPECT_EQ(t.total() - t.grad_norm_workspace,
                                      static_cast<double>(model.bytes(MemCategory::temporaries)));
                            const bool device_step = cuda && offload == Offload::none;
                            EXPECT_EQ(
                                t.grad_norm_workspace,
                                device_step
                                    ? static_cast<double>(
                                          grad_norm_scratch(
                                              trainable_tensors(in.model, finetune, in.lora_rank))
                                              .bytes())
                                    : 0.0);
                            EXPECT_EQ(e.gpu.temporaries, t.total());
                        }
                    }
                }
            }
        }
    }
}

// GPT-2 (C 768, F 3072, Vp 50304, 148 tensors), B T = 1024 rows, bf16-amp on a GPU, line by
// line as docs/ESTIMATOR.md section 5 writes them.
TEST(Temporaries, Gpt2OnAGpuByHand) {
    const Estimate e = Estimator{}.run(inputs("gpt2"));
    const double N = 1024, C = 768, F = 3072, Vp = 50304, p = 2;
    const TemporaryBytes& t = e.temporaries;
    EXPECT_EQ(t.activation_grads, N * (2 * C + F + F) * p);
    // + row losses + the step's scalars
    EXPECT_EQ(t.op_workspace, 1024 * Vp * 4 + 1024 * Vp * 2 + Vp * C * 4 + N * 4 + 256);
    EXPECT_EQ(t.attention_workspace, 0.0);
    EXPECT_EQ(t.gemm_workspace, 32.0 * (1 << 20));
    EXPECT_EQ(t.grad_norm_workspace, 256 + 148 * 256 * 8);
    EXPECT_EQ(t.param_gather, 0.0);
}

// ZeRO-3 over several GPUs gathers two units, the largest (here the embedding, Vp C weights):
// the engine keeps them in `communication`, outside the buffer plan.
TEST(Temporaries, Zero3AddsTwoGatheredUnits) {
    EstimateInputs in = inputs("gpt2");
    in.gpus = 4;
    in.zero = 3;
    Estimator est;
    const Estimate e = est.run(in);
    EXPECT_EQ(e.temporaries.param_gather, 2 * 50304.0 * 768 * 2);
    const TemporaryBytes& t = e.temporaries;
    EXPECT_EQ(t.total() - t.param_gather - t.grad_norm_workspace,
              static_cast<double>(
                  build_buffer_plan(est.plan(), DeviceKind::cuda).bytes(MemCategory::temporaries)));
}

// The token batches (core/engine/trainer.cpp): inputs and targets, int32, B x T each; two
// micro-batches' on CUDA (the copy stream's double buffer), one on the CPU; in the total, and
// none when only the model states are counted.
TEST(BatchData, IsTheEnginesTokenBuffers) {
    EstimateInputs in = inputs("gpt2");
    const double one = 2.0 * 2 * 512 * 4;  // (inputs + targets) x B x T x 4 bytes
    in.engine = Engine::cuda;
    const Estimate cuda = Estimator{}.run(in);
    EXPECT_EQ(cuda.gpu.data, 2 * one);
    EXPECT_EQ(cuda.gpu.total(),
              cuda.gpu.model_states() + cuda.gpu.activations + cuda.gpu.temporaries + 2 * one);
    in.engine = Engine::cpu;
    EXPECT_EQ(Estimator{}.run(in).gpu.data, one);
    in.ignore_activations = true;
    EXPECT_EQ(Estimator{}.run(in).gpu.data, 0);
}

}  // namespace
}  // namespace napkin
