// --detect-anomaly on the CPU engine (core/engine/anomaly.h): a corrupted weight, an attention
// made to overflow, a NaN loss gradient and fp16-amp's overflow (tests/engine/anomaly_cases.h);
// an exploding learning rate through the trainer; and a clean run whose losses and gradients are
// bitwise the ones without the checks.
#include <gtest/gtest.h>

#include <vector>

#include "core/engine/trainer.h"
#include "tests/engine/anomaly_cases.h"

namespace napkin {
namespace {

using namespace test;

struct CpuRig {
    HostMemory host;
    AccountingAllocator alloc{host};
    AnomalyRig rig{[this](const ModelConfig& c, const PlanInputs& in) {
                       return Gpt::create(c, in, alloc, 1234);
                   },
                   [](const std::vector<std::int32_t>& t) { return t.data(); }};
};

TEST(Anomaly, CorruptedWeightNamesTheOpThatReadsIt) {
    for (Precision p : {Precision::fp32, Precision::bf16_amp, Precision::fp16_amp}) {
        SCOPED_TRACE(std::string(enum_name(kPrecisionNames, p)));
        CpuRig r;
        corrupted_weight_names_its_reader(r.rig, p);
    }
}

TEST(Anomaly, AttentionOverflowNamesAttention) {
    CpuRig r;
    attention_overflow_names_attention(r.rig);
}

TEST(Anomaly, NanLossGradientNamesTheHeadsBackward) {
    CpuRig r;
    nan_loss_gradient_names_the_heads_backward(r.rig);
}

TEST(Anomaly, Fp16AmpLeavesGradientOverflowToTheScaler) {
    CpuRig r;
    fp16_amp_leaves_gradient_overflow_to_the_scaler(r.rig);
}

TrainOptions tiny_run(float lr, bool detect) {
    TrainOptions o;
    o.model = anomaly_config();
    o.model.vocab_size = o.model.padded_vocab_size = 256;  // the synthetic corpus's bytes
    o.plan = anomaly_inputs(Precision::fp32);
    o.optimizer.lr = lr;
    o.optimizer.warmup_steps = 0;
    o.optimizer.total_steps = 4;
    o.optimizer.grad_clip = 0;
    o.steps = 4;
    o.plan.detect_anomaly = detect;
    return o;
}

// An exploding learning rate: step 0 is clean, its update makes the weights huge, and step 1's
// forward overflows in the first GEMM that reads them; the trainer adds the step.
TEST(Anomaly, ExplodingLearningRateStopsInTheNextStepsForward) {
    Trainer t(tiny_run(1e30f, true));
    EXPECT_NO_THROW(t.step());
    try {
        t.step();
        FAIL() << "no anomaly found";
    } catch (const AnomalyFound& e) {
        const Anomaly& a = e.anomaly();
        EXPECT_EQ(a.step, 1);
        EXPECT_EQ(a.micro_batch, 0);
        expect_site(a, "attn.qkv", 0, "forward", "attn.qkv.out");
        ASSERT_TRUE(a.input_max_finite.has_value());
        EXPECT_GT(*a.input_max_finite, 1e20);  // the weights the update made
        EXPECT_EQ(std::string(e.what()).rfind(
                      "step 2, forward of attn.qkv (block 0): attn.qkv.out (2, 8, 48) has ", 0),
                  0u)
            << e.what();
    }
}

// The checks read and never write what the model computes: losses, gradient norms and
// parameters equal bit for bit with and without them.
TEST(Anomaly, CheckingChangesNothing) {
    Trainer on(tiny_run(3e-3f, true)), off(tiny_run(3e-3f, false));
    for (int s = 0; s < 4; ++s) {
        const StepRecord a = on.step(), b = off.step();
        EXPECT_EQ(a.loss, b.loss);
        EXPECT_EQ(a.grad_norm, b.grad_norm);
    }
    for (std::size_t i = 0; i < on.model().params().size(); ++i) {
        std::vector<float> x(static_cast<std::size_t>(on.model().params()[i].numel)), y(x.size());
        on.model().get_param(i, x.data());
        off.model().get_param(i, y.data());
        EXPECT_EQ(x, y) << on.model().params()[i].name;
    }
}

}  // namespace
}  // namespace napkin
