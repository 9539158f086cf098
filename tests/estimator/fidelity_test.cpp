// The fidelity fixes of an outside audit, each against its source: counts that cannot wrap (and a
// random sweep of the numeric inputs for it), selective recomputation's FLOPs, a measured
// throughput's HFU and times, Kaplan's N, QLoRA's own recipe and its 65B-on-48-GB claim, and the
// consistency of the text, --json and the notes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "core/check.h"
#include "estimator/estimate.h"
#include "estimator/report.h"
#include "tests/estimator/usage_error.h"

namespace napkin {
namespace {

EstimateInputs h100(const char* preset) {
    EstimateInputs in;
    in.model = preset_or_throw(preset);
    in.peak_flops_per_s = 989.5e12;
    in.gpu_memory_bytes = 80e9;
    in.cpu_memory_bytes = 256e9;
    return in;
}

// The audit's two cases: a 64-bit count of a micro-batch's FLOPs wrapped, and came out below
// 6N per token (3.25e11 for Llama 3 405B, 7.77e7 for GPT-2). Such micro-batches are counted one
// sequence at a time now (every op's FLOPs are B times one sequence's), so per token they are
// the B = 1 figures exactly; only a sequence whose own FLOPs could pass 2^64 is refused.
TEST(Overflow, LargeMicroBatchesAreCountedPerSequence) {
    Estimator est;
    for (const auto& [preset, T, B] :
         {std::tuple{"llama3-405b", 8192, 1024}, std::tuple{"gpt2", 1024, 100000000}}) {
        EstimateInputs in = h100(preset);
        in.seq_len = T;
        in.gpus = 16384;
        in.zero = 3;
        const Estimate one = est.run(in);
        in.micro_batch = B;
        const Estimate e = est.run(in);
        EXPECT_GE(e.model_flops_per_token, 6.0 * static_cast<double>(e.params.matmul)) << preset;
        EXPECT_EQ(e.model_flops_per_token, one.model_flops_per_token) << preset;
        EXPECT_EQ(e.hardware_flops_per_token, one.hardware_flops_per_token) << preset;
        EXPECT_EQ(e.tokens_per_step, static_cast<double>(B) * T * 16384);
        EXPECT_GT(e.gpu.activations, one.gpu.activations * (B / 2));  // memory still B times
    }
    EstimateInputs in = h100("llama3-405b");  // RoPE: T past the context is allowed, and noted
    in.seq_len = std::int64_t{1} << 24;
    expect_usage_error(in, "seq_len: 16777216 tokens could need");
}

double log_uniform(std::mt19937_64& rng, double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
}

// A deterministic random sweep of every numeric input over its whole range (within 2 seconds):
// each estimate is refused with a UsageError or is finite, non-negative and keeps its invariants
// (no FLOP count below the model's 6 N_matmul, or 4 N_matmul with a frozen base).
TEST(Overflow, RandomSweepOfTheNumericInputs) {
    std::mt19937_64 rng(20261126);
    const char* presets[] = {"tiny", "gpt2", "gpt2-xl", "llama2-70b", "llama3-8b", "llama3-405b"};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    Estimator est;
    int ran = 0, refused = 0;
    for (int i = 0; i < 20000 && std::chrono::steady_clock::now() < deadline; ++i) {
        auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
        EstimateInputs in = h100(presets[pick(6)]);
        if (pick(8) == 0) {
            in.params_only = true;
            in.params = log_uniform(rng, 1, 1e16);
        }
        in.seq_len = pick(4) == 0 ? 0 : static_cast<std::int64_t>(log_uniform(rng, 1, 1 << 22));
        in.micro_batch = static_cast<std::int64_t>(log_uniform(rng, 1, 1e12));
        in.grad_accum = static_cast<std::int64_t>(log_uniform(rng, 1, 1e12));
        in.gpus = static_cast<int>(log_uniform(rng, 1, 1 << 24));
        in.zero = pick(4);
        in.tokens = pick(3) == 0 ? 0 : log_uniform(rng, 1, 1e17);
        in.mfu = std::uniform_real_distribution<double>(1e-6, 1)(rng);
        in.precision = kPrecisionNames[static_cast<std::size_t>(pick(5))].value;
        in.checkpointing = kCheckpointingNames[static_cast<std::size_t>(pick(3))].value;
        in.attention = pick(2) == 0 ? AttentionImpl::naive : AttentionImpl::flash;
        in.finetune = kFinetuneNames[static_cast<std::size_t>(pick(3))].value;
        in.lora_rank = static_cast<std::int64_t>(log_uniform(rng, 1, 1 << 20));
        in.tp = 1 << pick(4);
        in.pp = 1 << pick(4);
        in.gpus *= in.tp * in.pp;
        in.measured_tokens_per_s = pick(4) == 0 ? log_uniform(rng, 1e-3, 1e12) : 0;
        Estimate e;
        try {
            est.run(in, e);
        } catch (const UsageError&) {
            ++refused;
            continue;
        }
        ++ran;
        SCOPED_TRACE(testing::Message()
                     << "B " << in.micro_batch << " T " << e.seq_len << " G " << in.grad_accum
                     << " W " << in.gpus << " N " << e.total_params);
        const double matmul =
            in.params_only ? e.total_params : static_cast<double>(e.params.matmul);
        const double per_param = in.finetune == Finetune::full ? 6.0 : 4.0;
        ASSERT_GE(e.model_flops_per_token, per_param * matmul * (1 - 1e-12));
        ASSERT_GE(e.hardware_flops_per_token, e.model_flops_per_token);
        for (const double v :
             {e.gpu.total(), e.cpu.total(), e.tokens_per_step, e.model_flops_per_step,
              e.step_seconds, e.run_seconds, e.steps, e.comm.sent_bytes, e.other_flops_per_token,
              e.act_closed_form_bytes, e.measured_mfu}) {
            ASSERT_TRUE(std::isfinite(v) && v >= 0) << v;
        }
    }
    EXPECT_GT(ran, 100);
    EXPECT_GT(refused, 100);
}

// GPT-3 175B at s = 2048, b = 1, over all s^2 pairs (the paper's convention): selective
// recomputation reruns the core attention forward, Q K^T and P V, 4 b s^2 h per layer, so
// hardware / model = 1 + 4 b s^2 h L / model FLOPs = 1.009. Korthikanti et al. count it as
// 72 b s L h^2 (1 + s/3h + V/12hL) against 1 + s/6h + V/12hL (Table 5's 52.8 / 51.4 = 1.027):
// 12 b s^2 h per layer, the attention's forward and backward once more, three times what runs.
TEST(SelectiveRecomputation, RerunsTheCoreAttentionForward) {
    EstimateInputs in;
    in.model = preset_or_throw("gpt2");
    in.model.vocab_size = in.model.padded_vocab_size = 51200;
    in.model.context_length = 2048;
    in.model.n_layers = 96;
    in.model.d_model = 12288;
    in.model.n_heads = in.model.n_kv_heads = 96;
    in.model.d_ff = 4 * 12288;
    in.seq_len = 2048;
    in.attention = AttentionImpl::naive;
    in.causal_attention_flops = false;
    in.checkpointing = Checkpointing::selective;
    in.gpu_memory_bytes = 80e9;
    const Estimate e = Estimator{}.run(in);
    const double s = 2048, h = 12288, L = 96, V = 51200;
    EXPECT_DOUBLE_EQ((e.hardware_flops_per_token - e.model_flops_per_token) * s, 4 * s * s * h * L);
    const double korthikanti_model = 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    EXPECT_NEAR(e.model_flops_per_token * s / korthikanti_model, 1.0, 1e-3);  // + biases
    EXPECT_NEAR(e.hardware_flops_per_token / e.model_flops_per_token,
                1 + 4 * s * s * h * L / korthikanti_model, 1e-3);
    const double korthikanti_extra = 72 * s * L * h * h * s / (6 * h);
    EXPECT_DOUBLE_EQ(korthikanti_extra, 3 * 4 * s * s * h * L);
}

// --measured-tokens-per-s: the MFU (PaLM appendix B), the HFU it implies, and the step and run
// at that rate; --json's `time` follows the measurement.
TEST(Measured, HfuAndTimesFollowTheMeasurement) {
    EstimateInputs in = h100("gpt2");
    in.micro_batch = 16;
    in.checkpointing = Checkpointing::full;
    in.measured_tokens_per_s = 180000;
    const Estimate e = Estimator{}.run(in);
    EXPECT_DOUBLE_EQ(e.measured_hfu,
                     e.measured_mfu * e.hardware_flops_per_token / e.model_flops_per_token);
    EXPECT_DOUBLE_EQ(e.measured_run_seconds, e.tokens / 180000);
    EXPECT_DOUBLE_EQ(e.measured_step_seconds, 16 * 1024 / 180000.0);
    const nlohmann::json j = to_json(in, e, ReportContext{});
    EXPECT_EQ(j["time"]["basis"], "measured");
    EXPECT_DOUBLE_EQ(j["time"]["hfu"].get<double>(), e.measured_hfu);
    EXPECT_DOUBLE_EQ(j["time"]["mfu"].get<double>(), e.measured_mfu);
    EXPECT_DOUBLE_EQ(j["time"]["run_seconds"].get<double>(), e.measured_run_seconds);
    EXPECT_DOUBLE_EQ(j["measured"]["hfu"].get<double>(), e.measured_hfu);
    const std::string text = format_text(in, e, ReportContext{});
    EXPECT_NE(text.find("HFU " + std::to_string(e.measured_hfu).substr(0, 5)), std::string::npos)
        << text;
}

// Kaplan et al.'s N leaves out the embeddings: GPT-2's 85,056,000 (their "85M"), printed beside
// the total and labelled.
TEST(Kaplan, NonEmbeddingSixNBesideTheTotal) {
    const EstimateInputs in = h100("gpt2");
    const Estimate e = Estimator{}.run(in);
    EXPECT_EQ(e.params.non_embedding, 85056000);
    EXPECT_DOUBLE_EQ(e.flops_6n_non_embedding_per_token, 6.0 * 85056000);
    EXPECT_DOUBLE_EQ(e.flops_6n_per_token, 6.0 * 124439808);
    const std::string text = format_text(in, e, ReportContext{});
    EXPECT_NE(text.find("6N, N = total"), std::string::npos);
    EXPECT_NE(text.find("6N, N = non-embedding (Kaplan)"), std::string::npos);
    EXPECT_EQ(to_json(in, e, ReportContext{})["flops"]["per_token"]["six_n_non_embedding"],
              6 * 85056000);
}

// QLoRA's recipe (Dettmers et al. 2023, sec. 3 and 4): bf16 adapters and gradients, fp32 paged
// AdamW states, no fp32 master: 12 bytes per adapter parameter. LLaMA 65B, r = 64 on every
// linear layer, sequence 512, micro-batch 1, gradient checkpointing: fits one 48 GB GPU
// (docs/ESTIMATOR.md, "QLoRA on one 48 GB GPU", walks through it line by line).
TEST(Qlora, SixtyFiveBOnOneFortyEightGigabyteGpu) {
    EstimateInputs in = h100("llama1-65b");
    in.finetune = Finetune::qlora;
    in.lora_rank = 64;
    in.precision = Precision::bf16;
    in.optimizer_fp32 = true;
    in.seq_len = 512;
    in.checkpointing = Checkpointing::full;
    in.attention = AttentionImpl::naive;
    in.gpu_memory_bytes = 48e9;
    const Estimate e = Estimator{}.run(in);
    EXPECT_EQ(e.bytes_per_param.total(), 12.0);
    EXPECT_EQ(e.bytes_per_param.master, 0.0);
    EXPECT_EQ(e.gpu.optimizer, 8.0 * e.trainable_params);
    EXPECT_TRUE(e.fits()) << e.gpu.total() / 1e9 << " GB";
    EXPECT_GT(e.gpu.total(), 40e9);  // most of it: the 33.7 GB NF4 base and 9.6 GB of adapters
    in.optimizer_fp32 = false;
    in.precision = Precision::bf16_amp;  // 16 bytes per adapter parameter: 50.1 GB, over
    EXPECT_GT(Estimator{}.run(in).gpu.total(), e.gpu.total());
    in.precision = Precision::fp16_amp;
    in.optimizer_fp32 = true;
    EXPECT_NE(usage_error(in).find("fp32_optimizer_state"), std::string::npos);
}

TEST(Consistency, DetailedLayerFollowsCheckpointing) {
    EstimateInputs in = h100("gpt2");
    in.seq_len = 1024;
    in.checkpointing = Checkpointing::full;
    const Estimate e = Estimator{}.run(in);
    EXPECT_EQ(e.act_detailed_layer_bytes, 1024.0 * 768 * 2);  // the block's output, s b h p
    EXPECT_EQ(e.act_detailed_layer_bytes, e.act_closed_form_layer_bytes);
}

TEST(Consistency, IntegersInJsonAreIntegers) {
    const EstimateInputs in = h100("gpt2");
    const nlohmann::json j = to_json(in, Estimator{}.run(in), ReportContext{});
    for (const auto* key : {"/params/total", "/params/trainable", "/memory/gpu/total",
                            "/memory/gpu/capacity", "/flops/per_step/tokens", "/flops/run/steps",
                            "/inputs/peak_flops_per_s", "/communication/psi"}) {
        EXPECT_TRUE(j.at(nlohmann::json::json_pointer(key)).is_number_integer()) << key;
    }
    EXPECT_TRUE(j["time"]["step_seconds"].is_number_float());
}

TEST(Consistency, OffloadAtZeroZeroOnSeveralGpusIsNoted) {
    EstimateInputs in = h100("llama2-7b");
    in.gpus = 8;
    in.offload = Offload::optimizer_params;
    const Estimate e = Estimator{}.run(in);
    EXPECT_TRUE(e.notes & kNoteOffloadReplicated);
    bool said = false;
    for (const std::string& n : note_texts(in, e))
        said |= n.find("full host copy") != std::string::npos;
    EXPECT_TRUE(said);
    in.zero = 1;
    EXPECT_FALSE(Estimator{}.run(in).notes & kNoteOffloadReplicated);
}

TEST(Consistency, HeaderPrintsTheMfuItUses) {
    EstimateInputs in = h100("gpt2");
    in.mfu = 0.555;
    const std::string text = format_text(in, Estimator{}.run(in), ReportContext{});
    EXPECT_NE(text.find("MFU 0.555\n"), std::string::npos) << text;
    EXPECT_NE(text.find("time at MFU 0.555 "), std::string::npos) << text;
}

// Chinchilla's D = 20 N is a pretraining budget: a fine-tuning run has no default length.
TEST(Consistency, FineTuningHasNoChinchillaDefault) {
    EstimateInputs in = h100("llama2-7b");
    in.finetune = Finetune::lora;
    const Estimate e = Estimator{}.run(in);
    EXPECT_EQ(e.tokens, 0);
    EXPECT_EQ(e.run_seconds, 0);
    EXPECT_TRUE(e.notes & kNoteFinetuneNoTokens);
    EXPECT_FALSE(e.notes & kNoteTokensDefault);
    EXPECT_TRUE(to_json(in, e, ReportContext{})["flops"]["run"]["tokens"].is_null());
    in.tokens = 1e9;
    EXPECT_EQ(Estimator{}.run(in).tokens, 1e9);
    in.finetune = Finetune::full;
    in.tokens = 0;
    EXPECT_EQ(Estimator{}.run(in).tokens, 20.0 * 6738415616);
}

}  // namespace
}  // namespace napkin
