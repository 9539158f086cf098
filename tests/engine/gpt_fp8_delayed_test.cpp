// fp8-amp's delayed scaling in the engine (core/engine/gpt_fp8.h, kernels/quantize.h): the first
// step is current scaling's, later steps differ from it but stay close; checkpointing's recompute
// casts with the same scales; the histories are in the buffer plan and the checkpoint; a
// checkpoint of another history length is refused in one line. Under ZeRO:
// tests/engine/gpt_fp8_ranks_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/buffer_plan.h"
#include "core/engine/checkpoint.h"
#include "core/engine/gpt.h"
#include "core/engine/trainer.h"
#include "kernels/quantize.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

TrainOptions delayed_run(std::int64_t history, int steps, Checkpointing ck = Checkpointing::none) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;  // B T = 64: every GEMM dimension a multiple of 16, as on CUDA
    o.plan.seq_len = 32;
    o.plan.precision = Precision::fp8_amp;
    o.plan.checkpointing = ck;
    o.plan.fp8_amax_history = history;
    o.grad_accum = 2;  // two micro-batches record into the same history entry
    o.steps = steps;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 4;
    o.optimizer.total_steps = steps;
    return o;
}

// Step 1 has no history: both cast with current scaling, the same loss bit for bit. Later steps
// scale from the last steps' amaxes, not the tensor's own: different losses, within 1%.
TEST(GptFp8Delayed, CloseToCurrentScalingButNotEqual) {
    Trainer delayed(delayed_run(16, 6)), current(delayed_run(0, 6));
    int differ = 0;
    for (int s = 0; s < 6; ++s) {
        const float a = delayed.step().loss, b = current.step().loss;
        ASSERT_TRUE(std::isfinite(a)) << "step " << s + 1;
        if (s == 0) {
            EXPECT_EQ(a, b) << "the first step scales from the tensors themselves";
            continue;
        }
        differ += a != b;
        EXPECT_NEAR(a / b, 1.0, 0.01) << "step " << s + 1 << ": delayed " << a << ", current " << b;
    }
    EXPECT_GT(differ, 0) << "delayed scaling never changed a loss: are the histories used?";
}

// Within a step the scales do not move, so full recomputation casts the very same codes.
TEST(GptFp8Delayed, RecomputationCastsWithTheSameScales) {
    Trainer plain(delayed_run(4, 3)), full(delayed_run(4, 3, Checkpointing::full));
    for (int s = 0; s < 3; ++s)
        EXPECT_EQ(plain.step().loss, full.step().loss) << "step " << s + 1;
}

// The buffer plan holds 3 slots per layer and block GEMM (input, weight, gradient) of H + 8
// floats, and the model allocates exactly them; none with H = 0 or outside fp8-amp.
TEST(GptFp8Delayed, HistoriesAreBuffersOfThePlan) {
    const TrainOptions o = delayed_run(16, 1);
    PlanInputs in = o.plan;
    const OpPlan plan = build_op_plan(o.model, in);
    const Fp8Slots slots = fp8_slots(plan);
    EXPECT_EQ(slots.gemms, 4);
    EXPECT_EQ(slots.e4m3, 2 * 4 * o.model.n_layers);
    EXPECT_EQ(slots.e5m2, 4 * o.model.n_layers);
    const BufferPlan buffers = build_buffer_plan(plan, DeviceKind::cpu);
    ASSERT_NE(buffers.find(BufferRole::fp8_amax_history), nullptr);
    EXPECT_EQ(buffers.find(BufferRole::fp8_amax_history)->numel, slots.total() * 16);
    EXPECT_EQ(buffers.find(BufferRole::fp8_scales)->numel, slots.total() * kFp8ScaleFloats);
    Trainer t(o);
    EXPECT_EQ(t.model().fp8_amax_history()->numel(), slots.total() * 16);
    EXPECT_EQ(t.model().fp8_scales()->numel(), slots.total() * kFp8ScaleFloats);

    in.fp8_amax_history = 0;
    EXPECT_EQ(build_buffer_plan(build_op_plan(o.model, in), DeviceKind::cpu)
                  .find(BufferRole::fp8_amax_history),
              nullptr);
    in.fp8_amax_history = 16;
    in.precision = Precision::bf16_amp;
    EXPECT_EQ(
        build_buffer_plan(build_op_plan(o.model, in), DeviceKind::cpu).find(BufferRole::fp8_scales),
        nullptr);
}

// A checkpoint holds the histories and scales; a trainer with another history length refuses it
// in one line naming both lengths.
TEST(GptFp8Delayed, CheckpointOfAnotherHistoryLengthIsRefused) {
    const fs::path dir = test::scratch_dir("fp8_delayed_ckpt");
    const fs::path path = dir / "checkpoint.safetensors";
    Trainer a(delayed_run(16, 2));
    a.step();
    save_checkpoint(path.string(), a);
    Trainer b(delayed_run(8, 2));
    const std::string msg = test::error_of<InputError>([&] { load_checkpoint(path.string(), b); });
    test::expect_contains(msg, "fp8 amax history length differs: 16 (checkpoint) vs 8 (trainer)");
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace napkin
