// --detect-anomaly's cases, shared by the CPU engine's tests (tests/engine/anomaly_test.cpp) and
// the CUDA engine's (tests/engine_cuda/anomaly_cuda_test.cpp, on a GPU or the emulator): each
// makes one non-finite value appear where it is known to first appear, and checks that the
// engine names that op, direction and tensor (and the input that explains it).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/anomaly.h"
#include "core/engine/gpt.h"
#include "tests/engine/test_util.h"

namespace napkin::test {

// How a backend's tests build a model and hand it tokens (host memory, or copied to the device).
struct AnomalyRig {
    std::function<std::unique_ptr<Gpt>(const ModelConfig&, const PlanInputs&)> make;
    std::function<const std::int32_t*(const std::vector<std::int32_t>&)> tokens;
};

inline PlanInputs anomaly_inputs(Precision p) {
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 8;
    in.precision = p;
    in.optimizer = OptimizerKind::adamw;
    in.detect_anomaly = true;
    return in;
}

inline ModelConfig anomaly_config() {
    return small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);
}

inline std::size_t param_index(Gpt& m, const std::string& name) {
    for (std::size_t i = 0; i < m.params().size(); ++i) {
        if (m.params()[i].name == name) return i;
    }
    ADD_FAILURE() << "no parameter " << name;
    return 0;
}

// Sets element `at` of a parameter to `v`, or with at < 0 multiplies every element by `v`.
inline void set_values(Gpt& m, const std::string& name, float v, std::int64_t at = -1) {
    const std::size_t i = param_index(m, name);
    std::vector<float> w(static_cast<std::size_t>(m.params()[i].numel));
    m.get_param(i, w.data());
    if (at >= 0)
        w[static_cast<std::size_t>(at)] = v;
    else
        for (float& x : w)
            x *= v;
    m.set_param(i, w.data());
}

// One micro-batch with detection on; the anomaly it throws (a failure when none).
inline Anomaly anomaly_of(AnomalyRig& rig, Gpt& m, float dloss = 1.0f) {
    const std::int64_t n = m.plan().in.micro_batch * m.plan().in.seq_len;
    const Batch b = random_batch(n, 37, 5);
    std::vector<std::int32_t> both = b.inputs;
    both.insert(both.end(), b.targets.begin(), b.targets.end());
    const std::int32_t* t = rig.tokens(both);
    m.zero_grads();
    try {
        m.forward_backward(t, t + n, dloss);
    } catch (const AnomalyFound& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
        return e.anomaly();
    }
    ADD_FAILURE() << "no anomaly found";
    return {};
}

// Where the anomaly was found: the op, its block (-1: outside the blocks), direction, tensor.
inline void expect_site(const Anomaly& a, const char* op, int layer, const char* direction,
                        const char* tensor) {
    EXPECT_EQ(a.op, op);
    EXPECT_EQ(a.layer.value_or(-1), layer);
    EXPECT_EQ(a.direction, direction);
    EXPECT_EQ(a.tensor, tensor);
}

// A corrupted weight: one NaN in block 1's MLP up-projection. The first op to read it is
// mlp.fc's forward, whose output is named, with the weight as the input that explains it.
inline void corrupted_weight_names_its_reader(AnomalyRig& rig, Precision p) {
    auto m = rig.make(anomaly_config(), anomaly_inputs(p));
    set_values(*m, "h.1.mlp.fc.weight", std::numeric_limits<float>::quiet_NaN(), 5);
    const Anomaly a = anomaly_of(rig, *m);
    expect_site(a, "mlp.fc", 1, "forward", "mlp.fc.out");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 8, 24}));
    EXPECT_GT(a.nan, 0u);
    ASSERT_TRUE(a.bad_input.has_value());
    EXPECT_EQ(a.bad_input->tensor, "mlp.fc.weight");
    EXPECT_EQ(a.bad_input->shape, (std::vector<std::int64_t>{24, 16}));
    EXPECT_EQ(a.bad_input->nan, 1u);
}

// A kernel made to produce NaN from finite inputs: block 0's QKV weights (about 0.02) scaled by
// 1e20 give finite q and k (about 1e19) whose dot products overflow fp32, so the softmax takes
// inf - inf. The attention names itself, its output, and inputs that were all finite.
inline void attention_overflow_names_attention(AnomalyRig& rig) {
    auto m = rig.make(anomaly_config(), anomaly_inputs(Precision::fp32));
    set_values(*m, "h.0.attn.qkv.weight", 1e20f);
    const Anomaly a = anomaly_of(rig, *m);
    expect_site(a, "attn.core", 0, "forward", "attn.out");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 8, 16}));
    EXPECT_GT(a.nan + a.inf, 0u);
    EXPECT_FALSE(a.bad_input.has_value());
    ASSERT_TRUE(a.input_max_finite.has_value());
    EXPECT_GT(*a.input_max_finite, 1e18);
}

// A NaN loss gradient (what a loss scale gone bad would pass): the forward is clean, and the
// first tensor the backward writes, the fused head's input gradient, is named.
inline void nan_loss_gradient_names_the_heads_backward(AnomalyRig& rig) {
    auto m = rig.make(anomaly_config(), anomaly_inputs(Precision::fp32));
    const Anomaly a = anomaly_of(rig, *m, std::numeric_limits<float>::quiet_NaN());
    expect_site(a, "lm_head+loss", -1, "backward", "d ln_f.out");
    EXPECT_EQ(a.nan, 2u * 8u * 16u);
}

// fp16-amp: a loss scale so large that the scaled gradients overflow is the loss scaler's to
// handle (it skips the step): no anomaly. The same overflow under fp32 is one.
inline void fp16_amp_leaves_gradient_overflow_to_the_scaler(AnomalyRig& rig) {
    const std::int64_t n = 16;
    const Batch b = random_batch(n, 37, 5);
    std::vector<std::int32_t> both = b.inputs;
    both.insert(both.end(), b.targets.begin(), b.targets.end());
    auto m = rig.make(anomaly_config(), anomaly_inputs(Precision::fp16_amp));
    m->zero_grads();
    const std::int32_t* t = rig.tokens(both);
    float loss = 0;
    EXPECT_NO_THROW(loss = m->forward_backward(t, t + n, 1e30f));
    EXPECT_TRUE(std::isfinite(loss));
    std::vector<float> g(static_cast<std::size_t>(m->params()[0].numel));
    m->get_grad(0, g.data());
    EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float v) { return !std::isfinite(v); }))
        << "the scaled gradients did not overflow: the case tests nothing";

    auto f = rig.make(anomaly_config(), anomaly_inputs(Precision::fp32));
    const Anomaly a = anomaly_of(rig, *f, std::numeric_limits<float>::infinity());
    EXPECT_EQ(a.direction, "backward");
}

}  // namespace napkin::test
