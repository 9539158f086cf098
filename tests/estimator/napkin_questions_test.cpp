// The seeds' napkin questions, answered as the lectures reason them (docs/ESTIMATOR.md,
// "Worked examples" shows the same numbers).
#include <gtest/gtest.h>

#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "estimator/solver.h"

namespace napkin {
namespace {

EstimateInputs on_gpu(const char* gpu_name, Precision p) {
    const GpuSpec& g = gpu_or_throw(gpu_name);
    EstimateInputs in;
    in.precision = p;
    in.peak_flops_per_s = g.peak_tflops(precision_dtypes(p, in.optimizer, false).gemm_compute) * 1e12;
    in.gpu_memory_bytes = g.memory_gb * 1e9;
    in.cpu_memory_bytes = 256e9;
    return in;
}

// Lecture 2, question 1: 70B parameters, 15T tokens, 1024 H100s at MFU 0.5:
// 6 * 70e9 * 15e12 / (1024 * 989.5e12 * 0.5) s = 143.9 days.
TEST(NapkinQuestions, SeventyBOnFifteenTrillionTokensTakes144Days) {
    EstimateInputs in = on_gpu("h100-sxm", Precision::bf16_amp);
    in.params_only = true;
    in.params = 70e9;
    in.tokens = 15e12;
    in.gpus = 1024;
    in.mfu = 0.5;
    const Estimate e = Estimator{}.run(in);
    EXPECT_DOUBLE_EQ(e.run_flops_6nd, 6.3e24);
    EXPECT_NEAR(e.run_seconds / 86400, 143.9, 0.05);
}

// Lecture 2, question 2: the largest model trainable with fp32 AdamW on 8 x 80 GB, model
// states only: 8 * 80e9 / 16 = 40B parameters (the 16 bytes spread over all 8 GPUs).
TEST(NapkinQuestions, LargestModelOnEightH100sIsFortyBillion) {
    EstimateInputs in = on_gpu("h100-sxm", Precision::fp32);
    in.optimizer = OptimizerKind::adamw;
    in.gpus = 8;
    in.zero = 3;
    in.ignore_activations = true;
    Estimator est;
    const SolveResult r = solve_max_params(in, est);
    EXPECT_EQ(r.value, 40e9);
    EXPECT_EQ(r.at.bytes_per_param.total(), 16.0);
    // Without sharding each GPU holds all 16 bytes per parameter: 80e9 / 16 = 5B.
    in.zero = 0;
    EXPECT_EQ(solve_max_params(in, est).value, 5e9);
}

// Seed: Answer.AI trained a 70B model on two 24 GB GPUs with FSDP + QLoRA + gradient
// checkpointing + CPU offloading + flash attention. Full fine-tuning of the same does not fit.
TEST(NapkinQuestions, QloraSeventyBOnTwentyFourGigabyteGpus) {
    EstimateInputs in = on_gpu("rtx3090", Precision::bf16_amp);
    in.model = preset_or_throw("llama2-70b");
    in.seq_len = 2048;
    in.gpus = 2;
    in.zero = 3;
    in.finetune = Finetune::qlora;
    in.lora_rank = 64;
    in.checkpointing = Checkpointing::full;
    in.offload = Offload::optimizer_params;
    in.attention = AttentionImpl::flash;
    Estimator est;
    const Estimate q = est.run(in);
    EXPECT_TRUE(q.fits()) << "GPU " << q.gpu.total() / 1e9 << " GB, host " << q.cpu_node_bytes / 1e9 << " GB";
    // Without offloading, the NF4 base sharded over 2 GPUs is 69B * 4.127 bits / 2 = 17.8 GB, plus
    // the bf16 embeddings and head: it fits the weights, not the rest at this T.
    in.offload = Offload::none;
    const Estimate no_offload = est.run(in);
    EXPECT_GT(no_offload.gpu.weights, 17.8e9);
    EXPECT_LT(no_offload.gpu.weights, 19.5e9);

    in.finetune = Finetune::full;
    EXPECT_FALSE(est.run(in).fits());  // 16 B/param over 2 GPUs: 552 GB each
    in.offload = Offload::optimizer_params;
    const Estimate full = est.run(in);
    EXPECT_FALSE(full.fits());  // the states alone need over a terabyte of host memory
    EXPECT_FALSE(full.fits_cpu);
    // docs/ESTIMATOR.md: 18 bytes per parameter on the host (2 + 4 + 4 + 8), 1.24 TB for the node's
    // 2 GPUs, each holding its half (ZeRO-3 shards, units padded to a multiple of 2).
    EXPECT_NEAR(full.cpu_node_bytes, 18.0 * static_cast<double>(count_params(in.model).allocated),
                1e3);
}

// Seed: fine-tuning a 7B model on one 16 GB T4 with QLoRA (Ludwig). The T4 has no bf16, so
// the recipe is fp16 mixed precision. Full fine-tuning needs 16 B/param = 108 GB.
TEST(NapkinQuestions, QloraSevenBOnT4) {
    EstimateInputs in = on_gpu("t4", Precision::fp16_amp);
    in.model = preset_or_throw("llama2-7b");
    in.seq_len = 1024;
    in.finetune = Finetune::qlora;
    in.lora_rank = 64;
    in.checkpointing = Checkpointing::full;
    Estimator est;
    const Estimate q = est.run(in);
    EXPECT_TRUE(q.fits()) << q.gpu.total() / 1e9 << " GB";
    EXPECT_GT(q.peak_flops_per_s, 0);  // fp16 tensor cores: 65 TFLOP/s
    in.finetune = Finetune::full;
    const Estimate full = est.run(in);
    EXPECT_FALSE(full.fits());
    EXPECT_NEAR(full.gpu.model_states(), 16.0 * count_params(in.model).allocated, 1.0);
}

}  // namespace
}  // namespace napkin
