#include "estimator/estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/check.h"
#include "estimator/hardware.h"
#include "estimator/solver.h"

namespace napkin {
namespace {

EstimateInputs napkin_inputs(double n) {
    EstimateInputs in;
    in.params_only = true;
    in.params = n;
    in.peak_flops_per_s = 989.5e12;
    in.gpu_memory_bytes = 80e9;
    in.cpu_memory_bytes = 256e9;
    return in;
}

EstimateInputs preset_inputs(const char* name) {
    EstimateInputs in = napkin_inputs(0);
    in.params_only = false;
    in.model = preset_or_throw(name);
    return in;
}

TEST(BytesPerParam, RecipesAsTheSeedsTeach) {
    using formulas::bytes_per_param;
    EXPECT_EQ(bytes_per_param(Precision::fp32, OptimizerKind::adamw, false).total(), 16.0);  // 4+4+8
    EXPECT_EQ(bytes_per_param(Precision::bf16_amp, OptimizerKind::adamw, false).total(), 16.0);  // 2+2+12
    EXPECT_EQ(bytes_per_param(Precision::bf16_amp, OptimizerKind::adamw, true).total(), 18.0);
    EXPECT_EQ(bytes_per_param(Precision::bf16, OptimizerKind::adamw, false).total(), 8.0);  // all bf16
    EXPECT_EQ(bytes_per_param(Precision::fp32, OptimizerKind::sgd, false).total(), 8.0);
    EXPECT_EQ(bytes_per_param(Precision::fp32, OptimizerKind::adagrad, false).total(), 12.0);
    const auto eight = bytes_per_param(Precision::bf16_amp, OptimizerKind::adamw_8bit, false);
    EXPECT_DOUBLE_EQ(eight.optimizer, 2.0 + 8.0 / 2048);
    EXPECT_DOUBLE_EQ(eight.total(), 2 + 4 + 2 + 2.0 + 8.0 / 2048);
}

// ZeRO paper, figure 1: Psi = 7.5B, Nd = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
TEST(Zero, PaperFigureOne) {
    const double expected[] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
    Estimator est;
    for (int stage = 0; stage <= 3; ++stage) {
        EstimateInputs in = napkin_inputs(7.5e9);
        in.gpus = 64;
        in.zero = stage;
        in.ignore_activations = true;
        const Estimate e = est.run(in);
        EXPECT_NEAR(e.gpu.total(), expected[stage], 1e3) << "stage " << stage;
        const auto b = formulas::bytes_per_param(in.precision, in.optimizer, false);
        EXPECT_NEAR(formulas::zero_model_state_bytes(b, 7.5e9, stage, 64), expected[stage], 1e3);
    }
}

TEST(Offload, MovesStatesToHost) {
    Estimator est;
    EstimateInputs in = preset_inputs("llama2-7b");
    in.ignore_activations = true;
    const Estimate base = est.run(in);
    in.offload = Offload::optimizer;
    const Estimate opt = est.run(in);
    EXPECT_EQ(opt.gpu.master, 0);
    EXPECT_EQ(opt.gpu.optimizer, 0);
    EXPECT_EQ(opt.cpu.master + opt.cpu.optimizer, base.gpu.master + base.gpu.optimizer);
    EXPECT_EQ(opt.gpu.weights, base.gpu.weights);
    in.offload = Offload::optimizer_params;
    const Estimate all = est.run(in);
    EXPECT_EQ(all.gpu.weights, 0);
    EXPECT_EQ(all.cpu.weights, base.gpu.weights);
    EXPECT_LT(all.gpu.total(), opt.gpu.total());
}

TEST(Lora, TrainableAndFrozen) {
    Estimator est;
    EstimateInputs in = preset_inputs("llama2-7b");
    in.finetune = Finetune::lora;
    in.lora_rank = 64;
    const Estimate e = est.run(in);
    EXPECT_EQ(e.trainable_params, 159907840);
    EXPECT_EQ(e.frozen_params, 6738415616);
    // QLoRA stores the block linears in NF4: 4.127 bits each.
    in.finetune = Finetune::qlora;
    const Estimate q = est.run(in);
    const double linear = 32.0 * count_params(in.model).linear_per_layer;
    const double other = count_params(in.model).allocated - linear;
    EXPECT_NEAR(q.gpu.weights, linear * formulas::kNf4BitsPerParam / 8 + (other + 159907840) * 2, 1.0);
    // One linear weight at a time is dequantized for its GEMM, to the working dtype: Llama 2
    // 7B's widest is the fused gate and up projection, 2 x 11008 rows of 4096, 2 bytes each under
    // bf16, 4 under fp32,
    // and only fp32 and fp8 recipes are named as departing from the paper.
    EXPECT_EQ(q.temporaries.dequant, 2 * 11008.0 * 4096 * 2);
    EXPECT_FALSE(q.notes & kNoteQloraPrecision);
    in.precision = Precision::fp32;
    const Estimate q32 = est.run(in);
    EXPECT_EQ(q32.temporaries.dequant, 2 * 11008.0 * 4096 * 4);
    EXPECT_TRUE(q32.notes & kNoteQloraPrecision);
    in.precision = Precision::fp8_amp;
    EXPECT_TRUE(est.run(in).notes & kNoteQloraPrecision);
}

// QLoRA's recipe on Llama 2 7B (bf16 adapters and gradients, fp32 AdamW states, r = 64 on every
// linear: 159,907,840 adapter parameters) with the paged optimizer, by hand: S = 2 moments x 4
// bytes x 159,907,840 = 1,279,262,720 bytes leave the GPU's optimizer row for managed memory;
// the traffic is 2 S per step, at the assumed 25 GB/s each way 2 S / 25e9 s; the device peak is
// the larger of the total without S and the update's resident set (model states + S + the norm's
// workspace).
TEST(EstimatorPaged, QloraLlama2SevenBByHand) {
    Estimator est;
    EstimateInputs in = preset_inputs("llama2-7b");
    in.finetune = Finetune::qlora;
    in.lora_rank = 64;
    in.precision = Precision::bf16;
    in.optimizer_fp32 = true;
    in.seq_len = 512;
    const Estimate plain = est.run(in);
    in.paged_optimizer = true;
    const Estimate e = est.run(in);
    ASSERT_TRUE(e.paged.has_value());
    ASSERT_FALSE(plain.paged.has_value());
    const double S = 2 * 4 * 159907840.0;
    EXPECT_EQ(plain.gpu.optimizer, S);
    EXPECT_EQ(e.paged->state_bytes, S);
    EXPECT_EQ(e.gpu.optimizer, 0.0);
    EXPECT_EQ(e.gpu.total(), plain.gpu.total() - S);
    EXPECT_EQ(e.paged->traffic_bytes_per_step, 2 * S);
    EXPECT_TRUE(e.paged->link_assumed);
    EXPECT_DOUBLE_EQ(e.paged->traffic_seconds_per_step, 2 * S / 25e9);
    EXPECT_EQ(e.paged->step_peak_bytes, e.gpu.weights + e.gpu.master + e.gpu.grads + S +
                                            e.temporaries.grad_norm_workspace + e.gpu.data);
    EXPECT_EQ(e.paged->device_peak_bytes, std::max(e.gpu.total(), e.paged->step_peak_bytes));
    // A device profile's measured copy rates replace the assumption.
    DeviceProfile profile;
    profile.host_device =
        HostDeviceCopy{.to_device_bytes_per_s = 50e9, .to_host_bytes_per_s = 40e9};
    in.profile = &profile;
    const Estimate m = est.run(in);
    EXPECT_FALSE(m.paged->link_assumed);
    EXPECT_DOUBLE_EQ(m.paged->traffic_seconds_per_step, S / 50e9 + S / 40e9);
    // The state is paged or offloaded, not both.
    in.offload = Offload::optimizer;
    EXPECT_THROW(est.run(in), UsageError);
}

TEST(Flops, Gpt2PerTokenIsSixNPlusAttention) {
    Estimator est;
    EstimateInputs in = preset_inputs("gpt2");
    in.seq_len = 1024;
    const Estimate e = est.run(in);
    EXPECT_DOUBLE_EQ(e.flops_attention_per_token, 6.0 * 12 * 1024 * 768);
    EXPECT_NEAR(e.model_flops_per_token / (e.flops_matmul_per_token + e.flops_attention_per_token), 1.0, 0.01);
    in.causal_attention_flops = false;
    const Estimate full = est.run(in);
    EXPECT_DOUBLE_EQ(full.flops_attention_per_token, 12.0 * 12 * 1024 * 768);
    EXPECT_GT(full.model_flops_per_token, e.model_flops_per_token);
    in.causal_attention_flops = true;
    in.checkpointing = Checkpointing::full;
    const Estimate ck = est.run(in);
    EXPECT_EQ(ck.model_flops_per_token, e.model_flops_per_token);
    // Full recomputation runs each block's forward once more (2 N_block per token plus the
    // attention forward 2 L C T), and flash recomputes S in its backward (L C T); the head is
    // not recomputed. Elementwise work adds under 2%.
    const double n_block = 12.0 * count_params(in.model).linear_per_layer;
    const double expected = 2 * n_block + 3.0 * 12 * 768 * 1024;
    EXPECT_NEAR((ck.hardware_flops_per_token - ck.model_flops_per_token) / expected, 1.0, 0.02);
}

TEST(Measured, MfuFromThroughput) {
    Estimator est;
    EstimateInputs in = napkin_inputs(1e9);
    in.gpus = 8;
    in.measured_tokens_per_s = 8 * 989.5e12 * 0.4 / 6e9;  // exactly 40% of peak
    EXPECT_NEAR(est.run(in).measured_mfu, 0.4, 1e-12);
}

TEST(Solver, MaxMicroBatchIsTight) {
    Estimator est;
    EstimateInputs in = preset_inputs("gpt2");
    in.seq_len = 1024;
    const SolveResult r = solve_max_micro_batch(in, est);
    ASSERT_GT(r.value, 1);
    EXPECT_TRUE(r.at.fits());
    in.micro_batch = static_cast<std::int64_t>(r.value) + 1;
    EXPECT_FALSE(est.run(in).fits());
}

// Model states alone do not depend on B: the micro-batch solver would return its search limit
// as the answer. And an answer that is the limit says so.
TEST(Solver, LimitsAreNotAnswers) {
    Estimator est;
    EstimateInputs in = preset_inputs("gpt2");
    in.ignore_activations = true;
    EXPECT_THROW(solve_max_micro_batch(in, est), UsageError);
    in.ignore_activations = false;
    EXPECT_FALSE(solve_max_micro_batch(in, est).at_limit);
    in.gpu_memory_bytes = 1e18;  // an exabyte: every micro-batch up to the limit fits
    in.seq_len = 8;
    const SolveResult b = solve_max_micro_batch(in, est);
    EXPECT_EQ(b.value, 1 << 24);
    EXPECT_TRUE(b.at_limit);
    EstimateInputs p = napkin_inputs(0);
    p.ignore_activations = true;
    p.gpu_memory_bytes = 1e18;
    const SolveResult n = solve_max_params(p, est);
    EXPECT_EQ(n.value, kMaxParams);
    EXPECT_TRUE(n.at_limit);
}

TEST(Solver, NothingFits) {
    Estimator est;
    EstimateInputs in = preset_inputs("llama3-405b");
    in.seq_len = 4096;
    const SolveResult r = solve_max_micro_batch(in, est);
    EXPECT_EQ(r.value, 0);
    EXPECT_FALSE(r.at.fits());
}

TEST(Validate, RejectsBadFlags) {
    Estimator est;
    auto expect_error = [&](auto mutate, const char* flag) {
        EstimateInputs in = preset_inputs("gpt2");
        mutate(in);
        try {
            est.run(in);
            ADD_FAILURE() << "expected UsageError naming " << flag;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
        }
    };
    expect_error([](EstimateInputs& in) { in.gpus = 0; }, "gpus:");
    expect_error([](EstimateInputs& in) { in.zero = 4; }, "zero:");
    expect_error([](EstimateInputs& in) { in.mfu = 1.5; }, "mfu:");
    expect_error([](EstimateInputs& in) { in.micro_batch = -1; }, "micro_batch:");
    expect_error([](EstimateInputs& in) { in.grad_accum = 0; }, "grad_accum:");
    expect_error(
        [](EstimateInputs& in) {
            in.finetune = Finetune::lora;
            in.lora_rank = 0;
        },
        "lora_rank:");
    expect_error([](EstimateInputs& in) { in.model.n_heads = 5; }, "heads (5) must divide d-model");
}

// Infinite, NaN and absurdly large numbers are refused, not turned into "inf days", a negative
// parameter count or a silently dropped measurement.
TEST(Validate, RejectsNumbersThatAreNotFiniteOrTooLarge) {
    Estimator est;
    const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
    auto expect_error = [&](auto mutate, const char* needle) {
        EstimateInputs in = preset_inputs("gpt2");
        mutate(in);
        try {
            est.run(in);
            ADD_FAILURE() << "expected UsageError containing " << needle;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error([&](EstimateInputs& in) { in = napkin_inputs(inf); }, "params:");
    expect_error([&](EstimateInputs& in) { in = napkin_inputs(1e30); }, "params: 1e+30 is beyond");
    expect_error([&](EstimateInputs& in) { in.tokens = inf; }, "tokens:");
    expect_error([&](EstimateInputs& in) { in.tokens = nan; }, "tokens:");
    expect_error([&](EstimateInputs& in) { in.tokens = 1e308; }, "tokens: 1e+308 is beyond");
    expect_error([&](EstimateInputs& in) { in.peak_flops_per_s = inf; }, "peak_flops_per_s:");
    expect_error([&](EstimateInputs& in) { in.gpu_memory_bytes = inf; }, "gpu_memory_bytes:");
    expect_error([&](EstimateInputs& in) { in.cpu_memory_bytes = nan; }, "cpu_memory_bytes:");
    expect_error([&](EstimateInputs& in) { in.measured_tokens_per_s = nan; },
                 "measured_tokens_per_s:");
    expect_error([&](EstimateInputs& in) { in.measured_tokens_per_s = inf; },
                 "measured_tokens_per_s:");
    expect_error([&](EstimateInputs& in) { in.link_bytes_per_s = inf; }, "link_bytes_per_s:");
    expect_error([&](EstimateInputs& in) { in.gpus = -1; }, "gpus: must be positive (got -1)");
    expect_error(
        [](EstimateInputs& in) {
            in.finetune = Finetune::lora;
            in.lora_rank = std::numeric_limits<std::int64_t>::max();
        },
        "lora_rank:");
    // The largest accepted values still give finite figures.
    EstimateInputs big = napkin_inputs(kMaxParams);
    big.tokens = kMaxTokens;
    const Estimate e = est.run(big);
    EXPECT_TRUE(std::isfinite(e.run_seconds));
    EXPECT_TRUE(std::isfinite(e.gpu.total()));
}

TEST(Notes, NoPeakMeansNoTime) {
    Estimator est;
    EstimateInputs in = preset_inputs("gpt2");
    in.peak_flops_per_s = 0;
    const Estimate e = est.run(in);
    EXPECT_EQ(e.run_seconds, 0);
    EXPECT_TRUE(e.notes & kNoteNoPeak);
}

}  // namespace
}  // namespace napkin
