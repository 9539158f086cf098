// LoRA and QLoRA fine-tuning in the engine: the adapters' gradients against finite differences
// of the double-precision reference, fresh adapters leaving the base model's loss as it was, a
// QLoRA model computing exactly what a LoRA model on its dequantized weights computes, only the
// adapters moving in training, and memory by category equal to the estimator's to the byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/engine/gpt.h"
#include "core/engine/trainer.h"
#include "estimator/estimate.h"
#include "tests/engine/estimate_util.h"
#include "tests/engine/reference_gpt.h"
#include "tests/engine/test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::Batch;
using test::random_batch;
using test::small_config;

PlanInputs lora_inputs(Finetune ft, Precision p, AttentionImpl att, std::int64_t rank,
                       float alpha) {
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 7;
    in.precision = p;
    in.attention = att;
    in.finetune = ft;
    in.lora_rank = ft == Finetune::full ? 0 : rank;
    in.lora_alpha = alpha;
    in.loss_chunk_rows = 5;
    return in;
}

std::vector<float> param_values(const Gpt& m, std::size_t i) {
    std::vector<float> v(static_cast<std::size_t>(const_cast<Gpt&>(m).params()[i].numel));
    m.get_param(i, v.data());
    return v;
}

std::vector<float> grad_values(const Gpt& m, std::size_t i) {
    std::vector<float> v(static_cast<std::size_t>(const_cast<Gpt&>(m).params()[i].numel));
    m.get_grad(i, v.data());
    return v;
}

// The adapters' gradients against central differences of the reference, with every parameter
// moved off its initialization (B nonzero, so both adapter matrices and the input gradient
// through them matter).
void adapter_gradient_check(const ModelConfig& cfg, AttentionImpl att, unsigned seed) {
    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " mlp " << static_cast<int>(cfg.mlp) << " kv "
                 << cfg.n_kv_heads << " attention " << static_cast<int>(att));
    HostMemory host;
    AccountingAllocator alloc(host);
    const std::int64_t rank = 3;
    const float alpha = 6.0f;  // a scale of 2
    auto m = Gpt::create(cfg, lora_inputs(Finetune::lora, Precision::fp32, att, rank, alpha), alloc,
                         seed);
    std::mt19937 init(seed);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    test::Params ref_params;
    int adapters = 0;
    for (std::size_t i = 0; i < m->params().size(); ++i) {
        const ParamSlot& p = m->params()[i];
        EXPECT_EQ(p.trainable, p.adapter) << p.name;
        EXPECT_EQ(p.grad.empty(), !p.adapter) << p.name;
        adapters += p.adapter ? 1 : 0;
        std::vector<float> w = param_values(*m, i);
        for (auto& v : w)
            v += nd(init);
        m->set_param(i, w.data());
        ref_params[p.name] = std::vector<double>(w.begin(), w.end());
    }
    EXPECT_EQ(adapters, 8 * cfg.n_layers);  // A and B on each of a block's four linears
    const std::int64_t B = 2, T = 7;
    const Batch batch = random_batch(B * T, cfg.vocab_size, seed);
    m->zero_grads();
    const double loss = m->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
    const test::ReferenceGpt ref(cfg, alpha / static_cast<double>(rank));
    const double ref_loss = ref.loss(ref_params, batch.inputs, batch.targets, B, T);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * (1 + std::fabs(ref_loss)));
    std::mt19937 rng(seed);
    const double h = 1e-5;
    for (std::size_t i = 0; i < m->params().size(); ++i) {
        const ParamSlot& p = m->params()[i];
        const std::vector<float> g = grad_values(*m, i);
        if (!p.adapter) {
            for (float v : g)
                ASSERT_EQ(v, 0.0f) << p.name << ": a frozen parameter's gradient";
            continue;
        }
        for (int trial = 0; trial < 4; ++trial) {
            const auto k = static_cast<std::size_t>(rng() % static_cast<unsigned>(p.numel));
            test::Params probe = ref_params;
            double& w = probe[p.name][k];
            const double saved = w;
            w = saved + h;
            const double up = ref.loss(probe, batch.inputs, batch.targets, B, T);
            w = saved - h;
            const double down = ref.loss(probe, batch.inputs, batch.targets, B, T);
            const double fd = (up - down) / (2 * h);
            EXPECT_NEAR(g[k], fd, 2e-5 + 1e-3 * std::fabs(fd)) << p.name << "[" << k << "]";
        }
    }
}

TEST(GptLora, AdapterGradientsMatchFiniteDifferences) {
    const unsigned seed = test::fresh_seed();
    adapter_gradient_check(
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true),
        AttentionImpl::naive, seed);
    adapter_gradient_check(
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true),
        AttentionImpl::flash, seed + 1);
    // GQA (q, k, v adapters of unequal rows) and SwiGLU (gate and up adapters).
    adapter_gradient_check(
        small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false),
        AttentionImpl::flash, seed + 2);
}

// B starts at zero: the adapted model's loss is the base model's, bit for bit (the same seed
// gives the same base weights: the adapters are initialized after them).
TEST(GptLora, FreshAdaptersLeaveTheBaseModelsLoss) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    const ModelConfig cfg =
        small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false);
    const Batch batch = random_batch(14, cfg.vocab_size, seed);
    for (const Precision p : {Precision::fp32, Precision::bf16_amp}) {
        std::vector<float> losses;
        for (const Finetune ft : {Finetune::full, Finetune::lora}) {
            HostMemory host;
            AccountingAllocator alloc(host);
            auto m =
                Gpt::create(cfg, lora_inputs(ft, p, AttentionImpl::flash, 4, 8.0f), alloc, seed);
            m->zero_grads();
            losses.push_back(m->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f));
        }
        EXPECT_EQ(losses[0], losses[1]) << enum_name(kPrecisionNames, p);
    }
}

// QLoRA stores the frozen block linears in NF4 and dequantizes each for its GEMM: the same
// numbers as LoRA over the dequantized weights, bit for bit, loss and adapter gradients.
TEST(GptLora, QloraIsLoraOnTheDequantizedWeights) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    const ModelConfig cfg =
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
    const Batch batch = random_batch(14, cfg.vocab_size, seed);
    for (const Precision p : {Precision::fp32, Precision::bf16_amp, Precision::fp16_amp}) {
        SCOPED_TRACE(enum_name(kPrecisionNames, p));
        HostMemory host;
        AccountingAllocator alloc(host);
        auto q = Gpt::create(cfg, lora_inputs(Finetune::qlora, p, AttentionImpl::flash, 4, 8.0f),
                             alloc, seed);
        auto l = Gpt::create(cfg, lora_inputs(Finetune::lora, p, AttentionImpl::flash, 4, 8.0f),
                             alloc, seed);
        ASSERT_EQ(q->params().size(), l->params().size());
        std::mt19937 init(seed);
        std::normal_distribution<float> nd(0.0f, 0.1f);
        int nf4 = 0;
        for (std::size_t i = 0; i < q->params().size(); ++i) {
            ASSERT_EQ(q->params()[i].name, l->params()[i].name);
            if (q->params()[i].weight.dtype() == DType::nf4) {
                ++nf4;
                const std::vector<float> base = param_values(*q, i);
                l->set_param(i, base.data());
            } else if (q->params()[i].adapter) {  // B off zero, so the adapters matter
                std::vector<float> w = param_values(*q, i);
                for (auto& v : w)
                    v += nd(init);
                q->set_param(i, w.data());
                l->set_param(i, w.data());
            }
        }
        EXPECT_EQ(nf4, 4 * cfg.n_layers);
        q->zero_grads();
        l->zero_grads();
        const float lq = q->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
        const float ll = l->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
        EXPECT_EQ(lq, ll);
        for (std::size_t i = 0; i < q->params().size(); ++i) {
            if (!q->params()[i].adapter) continue;
            EXPECT_EQ(grad_values(*q, i), grad_values(*l, i)) << q->params()[i].name;
        }
    }
}

TrainOptions tiny_lora(Finetune ft, Precision p, Checkpointing ck, AttentionImpl att) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = p;
    o.plan.checkpointing = ck;
    o.plan.attention = att;
    o.plan.finetune = ft;
    o.plan.lora_rank = 4;
    o.plan.lora_alpha = 8.0f;
    o.steps = 3;
    o.optimizer.total_steps = 3;
    return o;
}

// Training changes the adapters and nothing else: every frozen byte (NF4 codes and state
// included) is as it was at the start.
TEST(GptLora, TrainingMovesOnlyTheAdapters) {
    for (const Finetune ft : {Finetune::lora, Finetune::qlora}) {
        SCOPED_TRACE(enum_name(kFinetuneNames, ft));
        const TrainOptions o =
            tiny_lora(ft, Precision::bf16_amp, Checkpointing::none, AttentionImpl::flash);
        Trainer fresh(o), trained(o);
        float first = 0, last = 0;
        for (int s = 0; s < 3; ++s) {
            const StepRecord r = trained.step();
            (s == 0 ? first : last) = r.loss;
        }
        EXPECT_TRUE(std::isfinite(last));
        EXPECT_NE(first, last);
        auto bytes = [](const Tensor& t) {
            return std::string(static_cast<const char*>(t.raw()), t.bytes());
        };
        for (std::size_t i = 0; i < fresh.model().params().size(); ++i) {
            const ParamSlot& a = fresh.model().params()[i];
            const ParamSlot& b = trained.model().params()[i];
            if (a.adapter) {
                EXPECT_NE(bytes(a.weight), bytes(b.weight)) << a.name << " did not train";
                continue;
            }
            EXPECT_EQ(bytes(a.weight), bytes(b.weight)) << a.name << " is frozen but changed";
            if (!a.quant.empty()) {
                EXPECT_EQ(bytes(a.quant), bytes(b.quant)) << a.name;
            }
        }
    }
}

// Every category of the run's memory equals the estimator's prediction to the byte, LoRA and
// QLoRA, over precision x checkpointing x attention.
TEST(GptLora, MemoryMatchesTheEstimateExactly) {
    for (const Finetune ft : {Finetune::lora, Finetune::qlora}) {
        for (const Precision p :
             {Precision::fp32, Precision::bf16_amp, Precision::fp16_amp, Precision::bf16}) {
            for (const Checkpointing ck :
                 {Checkpointing::none, Checkpointing::full, Checkpointing::selective}) {
                for (const AttentionImpl att : {AttentionImpl::naive, AttentionImpl::flash}) {
                    SCOPED_TRACE(testing::Message() << enum_name(kFinetuneNames, ft) << " "
                                                    << enum_name(kPrecisionNames, p) << " "
                                                    << enum_name(kCheckpointingNames, ck) << " "
                                                    << enum_name(kAttentionNames, att));
                    const TrainOptions o = tiny_lora(ft, p, ck, att);
                    Trainer t(o);
                    const StepRecord r = t.step();
                    const Estimate e = test::cpu_estimate(o);
                    auto peak = [&](MemCategory c) { return test::peak_of(r, c); };
                    EXPECT_EQ(peak(MemCategory::parameters), e.gpu.weights);
                    EXPECT_EQ(peak(MemCategory::master_weights), e.gpu.master);
                    EXPECT_EQ(peak(MemCategory::gradients), e.gpu.grads);
                    EXPECT_EQ(peak(MemCategory::optimizer_state), e.gpu.optimizer);
                    EXPECT_EQ(peak(MemCategory::activations), e.gpu.activations);
                    EXPECT_EQ(peak(MemCategory::temporaries), e.gpu.temporaries);
                }
            }
        }
    }
}

TEST(GptLora, WhatTheEngineDoesNotRunIsRefusedInOneLine) {
    TrainOptions o =
        tiny_lora(Finetune::lora, Precision::fp8_amp, Checkpointing::none, AttentionImpl::flash);
    test::expect_contains(test::error_of<UsageError>([&] { Trainer t(o); }), "fp8-amp");
    o = tiny_lora(Finetune::lora, Precision::fp32, Checkpointing::none, AttentionImpl::flash);
    o.plan.lora_rank = 0;
    test::expect_contains(test::error_of<UsageError>([&] { Trainer t(o); }), "lora_rank");
}

}  // namespace
}  // namespace napkin
