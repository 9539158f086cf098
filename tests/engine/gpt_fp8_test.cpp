// fp8-amp in the engine (core/engine/gpt_fp8.h): it learns, its losses track bf16-amp's, its
// gradients are bf16-amp's within what fp8's rounding allows, recomputation rebuilds the same
// fp8 copies, and it keeps exactly the plan's fp8 tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/engine/gpt.h"
#include "core/engine/trainer.h"
#include "kernels/quantize.h"
#include "tests/engine/test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

using test::small_config;

TrainOptions tiny_run(Precision precision, int steps) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 4;
    o.plan.seq_len = 64;
    o.plan.precision = precision;
    o.steps = steps;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 4;
    o.optimizer.total_steps = steps;
    return o;
}

// From ln 256 = 5.55 towards the corpus's 1.21 nats: well down within 24 steps, as bf16-amp.
TEST(GptFp8, LearnsOnTheSyntheticCorpus) {
    Trainer t(tiny_run(Precision::fp8_amp, 24));
    std::vector<float> losses;
    for (int s = 0; s < 24; ++s)
        losses.push_back(t.step().loss);
    EXPECT_NEAR(losses.front(), std::log(256.0f), 0.1f);
    const float last = (losses[21] + losses[22] + losses[23]) / 3;
    EXPECT_LT(last, losses.front() - 1.5f) << "fp8-amp did not learn";
}

// Same seed, same batches: each step's loss within 2% of bf16-amp's. The recipes differ only in
// the block GEMMs' operands (3-bit mantissas instead of 8-bit), which perturbs each GEMM by a few
// percent elementwise but the loss, a mean over B T tokens, far less.
TEST(GptFp8, LossTracksBf16Amp) {
    Trainer fp8(tiny_run(Precision::fp8_amp, 12)), bf16(tiny_run(Precision::bf16_amp, 12));
    for (int s = 0; s < 12; ++s) {
        const float a = fp8.step().loss, b = bf16.step().loss;
        EXPECT_NEAR(a / b, 1.0, 0.02)
            << "step " << s + 1 << ": fp8-amp " << a << ", bf16-amp " << b;
    }
}

struct Grads {
    float loss = 0;
    std::vector<std::vector<float>> g;
    std::vector<std::string> names;
};

Grads gradients(const ModelConfig& cfg, Precision p, AttentionImpl att, Checkpointing ck,
                unsigned seed) {
    HostMemory host;
    AccountingAllocator alloc(host);
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 9;
    in.precision = p;
    in.attention = att;
    in.checkpointing = ck;
    auto m = Gpt::create(cfg, in, alloc, seed);
    // Weights larger than GPT-2's init, the same for both recipes: every path carries signal.
    // (Not as large as the fp32 gradient check's 0.3: attention logits that large turn the
    // GEMMs' few-percent errors into different softmax winners, and the comparison into noise.)
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    for (std::size_t i = 0; i < m->params().size(); ++i) {
        std::vector<float> w(static_cast<std::size_t>(m->params()[i].numel));
        m->get_param(i, w.data());
        for (float& v : w)
            v += nd(rng);
        m->set_param(i, w.data());
    }
    std::vector<std::int32_t> inputs, targets;
    for (int i = 0; i < 18; ++i) {
        inputs.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size)));
        targets.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size)));
    }
    Grads r;
    m->zero_grads();
    r.loss = m->forward_backward(inputs.data(), targets.data(), 1.0f);
    for (std::size_t i = 0; i < m->params().size(); ++i) {
        r.g.emplace_back(static_cast<std::size_t>(m->params()[i].numel));
        m->get_grad(i, r.g.back().data());
        r.names.push_back(m->params()[i].name);
    }
    return r;
}

// On the same weights and batch, every parameter's gradient under fp8-amp against bf16-amp's,
// as a relative error of the whole tensor, ||g8 - g16|| / ||g16||, and a cosine. An E4M3
// operand carries a relative rounding error of up to 2^-4 per element (3 mantissa bits), an
// E5M2 gradient up to 2^-3 (2 bits); spread over a binade their rms is about 2.6% and 5.2%, and a
// GEMM's result carries about the rms of its operands' errors (the products' errors are
// independent and the sums have mixed signs): ~6% for each backward GEMM, dY W or dY^T X. A
// layer-0 parameter's gradient has passed through up to four such GEMMs after the bf16 head,
// adding in quadrature to ~12%, on top of the forward's own few percent.
//
// Measured over 10,000 seeds on this 16-wide model the error's median is 4-13% by tensor, but
// its tail is heavy: a 16-element norm gain whose gradient nearly cancels over the 18 tokens,
// or a softmax whose top two logits swap, reaches 50-75% about once in a thousand seeds. One
// seed against a fixed bound is therefore a flaky test. The median over seven fresh seeds is
// not: it exceeds 35% only if four of the seven do (about 35 p^4 < 1e-9 per tensor), while a
// wrong scale or operand is off by 100% or more on every seed, with a cosine near 0.
TEST(GptFp8, GradientsCloseToBf16AmpOnTheSameWeightsAndBatch) {
    constexpr int kSeeds = 7;
    const unsigned base = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seeds " << base << " to " << base + kSeeds - 1);
    const auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + kSeeds / 2, v.end());
        return v[kSeeds / 2];
    };
    for (const ModelConfig& cfg :
         {small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true),
          small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false)}) {
        for (AttentionImpl att : {AttentionImpl::naive, AttentionImpl::flash}) {
            SCOPED_TRACE(testing::Message() << "norm " << static_cast<int>(cfg.norm)
                                            << " attention " << static_cast<int>(att));
            std::vector<double> loss_ratio;
            std::vector<std::vector<double>> rel, cosine;  // [tensor][seed]
            std::vector<std::string> names;
            for (unsigned s = base; s != base + kSeeds; ++s) {
                const Grads a = gradients(cfg, Precision::fp8_amp, att, Checkpointing::none, s);
                const Grads b = gradients(cfg, Precision::bf16_amp, att, Checkpointing::none, s);
                loss_ratio.push_back(a.loss / b.loss);
                rel.resize(a.g.size());
                cosine.resize(a.g.size());
                names = a.names;
                for (std::size_t i = 0; i < a.g.size(); ++i) {
                    double diff = 0, ref = 0, dot = 0, norm_a = 0;
                    for (std::size_t k = 0; k < a.g[i].size(); ++k) {
                        ASSERT_TRUE(std::isfinite(a.g[i][k]))
                            << "seed " << s << " " << a.names[i] << "[" << k << "]";
                        diff += std::pow(a.g[i][k] - b.g[i][k], 2);
                        ref += std::pow(b.g[i][k], 2);
                        dot += static_cast<double>(a.g[i][k]) * b.g[i][k];
                        norm_a += std::pow(a.g[i][k], 2);
                    }
                    // A tensor whose reference gradient is zero (padding rows only) counts as
                    // exact, and must then be zero under fp8-amp too.
                    rel[i].push_back(ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref));
                    cosine[i].push_back(ref == 0 ? 1.0 : dot / std::sqrt(ref * norm_a));
                }
            }
            EXPECT_NEAR(median(loss_ratio), 1.0, 0.02);
            for (std::size_t i = 0; i < names.size(); ++i) {
                EXPECT_LT(median(rel[i]), 0.35) << names[i];
                EXPECT_GT(median(cosine[i]), 0.95) << names[i];
            }
        }
    }
}

// Recomputation casts the same values again: gradients bit for bit equal across checkpointing.
TEST(GptFp8, CheckpointingGivesTheSameGradients) {
    const unsigned seed = test::fresh_seed();
    const ModelConfig cfg =
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
    for (AttentionImpl att : {AttentionImpl::naive, AttentionImpl::flash}) {
        const Grads ref = gradients(cfg, Precision::fp8_amp, att, Checkpointing::none, seed);
        for (Checkpointing ck : {Checkpointing::full, Checkpointing::selective}) {
            SCOPED_TRACE(testing::Message()
                         << "seed " << seed << " attention " << static_cast<int>(att) << " ckpt "
                         << static_cast<int>(ck));
            const Grads g = gradients(cfg, Precision::fp8_amp, att, ck, seed);
            EXPECT_EQ(g.loss, ref.loss);
            for (std::size_t i = 0; i < g.g.size(); ++i)
                EXPECT_EQ(g.g[i], ref.g[i]) << g.names[i];
        }
    }
}

// The plan keeps the blocks' GEMM inputs as E4M3 codes with an fp32 scale pair each, the head's
// input in bf16; the engine allocates exactly those.
TEST(GptFp8, KeepsThePlansFp8Tensors) {
    const ModelConfig cfg =
        small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 9;
    in.precision = Precision::fp8_amp;
    const OpPlan plan = build_op_plan(cfg, in);
    int fp8 = 0, scales = 0;
    for (const PlanOp& op : plan.block) {
        for (int i = 0; i < op.n_saved; ++i) {
            const PlanTensor& t = op.saved[static_cast<std::size_t>(i)];
            if (t.dtype == DType::f8e4m3) ++fp8;
            if (t.name().ends_with(".scale")) {
                ++scales;
                EXPECT_EQ(t.numel, kFp8ScaleFloats);
                EXPECT_EQ(t.dtype, DType::f32);
            }
        }
    }
    EXPECT_EQ(fp8, 4);  // ln_1.out, attn.out, ln_2.out, mlp.act.out
    EXPECT_EQ(scales, 4);
    EXPECT_EQ(plan.epilogue[0].saved[0].id, KeptId::ln_f_out);
    EXPECT_EQ(plan.epilogue[0].saved[0].dtype, DType::bf16);
    EXPECT_EQ(std::get<MatmulShape>(plan.epilogue[1].shape).in, DType::bf16);
    const Fp8CastNumel cast = fp8_cast_numel(plan);
    // The largest block GEMM is the QKV projection (48 x 16; fc is 24 x 16), over M = 18 rows.
    EXPECT_EQ(cast.weight, 48 * 16);
    EXPECT_EQ(cast.grad, 18 * 48);
}

}  // namespace
}  // namespace napkin
