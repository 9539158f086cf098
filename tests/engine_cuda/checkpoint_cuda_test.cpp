// Checkpoints of CUDA runs (label gpu; docs/CHECKPOINTS.md, docs/CUDA.md): a CUDA run resumed
// from its own checkpoint repeats the uninterrupted CUDA run bit for bit, a checkpoint moves
// between the CPU and the GPU (the same file, byte for byte, and training continues within the
// two backends' rounding). The command line's side: train_cuda_cli_test.cpp.
// Without a device every test skips with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "tests/engine/test_util.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

TrainOptions tiny_options(Precision precision, OptimizerKind optimizer, DeviceKind device) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = precision;
    o.plan.optimizer = optimizer;
    o.device = device;
    o.steps = 6;
    o.grad_accum = 2;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 2;
    o.optimizer.total_steps = 6;
    o.loss_scale_window = 2;  // fp16: the loss scale changes within the run
    return o;
}

fs::path scratch_dir() {
    return test::scratch_dir("napkin_ckpt_cuda_");
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Recipe {
    Precision precision;
    OptimizerKind optimizer;
};

class CheckpointCudaResume : public testing::TestWithParam<Recipe> {};

constexpr int kStepsASide = 2;  // before the save, and after it

// Steps 3 and 4 after a reload on the GPU equal those of the uninterrupted GPU run (past the
// warm-up, with fp16's loss scale raised once before the save and once after), and the resumed
// trainer's state saves back to the very file it was loaded from. Two steps a side: on the CUDA
// emulator each of the eight recipes costs about 20 s a step.
TEST_P(CheckpointCudaResume, RepeatsTheUninterruptedRunBitForBit) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const TrainOptions o =
        tiny_options(GetParam().precision, GetParam().optimizer, DeviceKind::cuda);
    const fs::path dir = scratch_dir();
    const fs::path path = dir / "ckpt.safetensors";
    Trainer a(o);
    for (int s = 0; s < kStepsASide; ++s)
        a.step();
    save_checkpoint(path.string(), a);
    std::vector<StepRecord> ref;
    for (int s = 0; s < kStepsASide; ++s)
        ref.push_back(a.step());

    // As napkin train --resume builds it: the checkpoint's options, on this device.
    TrainOptions ob = read_checkpoint_info(path.string()).options;
    ob.device = DeviceKind::cuda;
    Trainer b(ob);
    load_checkpoint(path.string(), b);
    ASSERT_EQ(b.steps_done(), kStepsASide);
    const fs::path again = dir / "again.safetensors";
    save_checkpoint(again.string(), b);
    EXPECT_TRUE(read_bytes(path) == read_bytes(again))
        << "the state loaded onto the GPU does not save back to the same bytes";
    for (int s = 0; s < kStepsASide; ++s) {
        const StepRecord r = b.step();
        const StepRecord& want = ref[static_cast<std::size_t>(s)];
        EXPECT_EQ(r.step, want.step);
        EXPECT_EQ(r.loss, want.loss) << "step " << r.step;
        EXPECT_EQ(r.lr, want.lr);
        EXPECT_EQ(r.grad_norm, want.grad_norm);
        EXPECT_EQ(r.loss_scale, want.loss_scale);
    }
    const fs::path end_a = dir / "end_a.safetensors", end_b = dir / "end_b.safetensors";
    save_checkpoint(end_a.string(), a);
    save_checkpoint(end_b.string(), b);
    EXPECT_TRUE(read_bytes(end_a) == read_bytes(end_b))
        << "weights, masters or moments differ after " << 2 * kStepsASide << " steps";
}

INSTANTIATE_TEST_SUITE_P(Recipes, CheckpointCudaResume,
                         testing::Values(Recipe{Precision::fp32, OptimizerKind::adamw},
                                         Recipe{Precision::bf16_amp, OptimizerKind::adamw},
                                         Recipe{Precision::fp16_amp, OptimizerKind::adam},
                                         Recipe{Precision::bf16_amp, OptimizerKind::momentum},
                                         Recipe{Precision::fp32, OptimizerKind::sgd},
                                         Recipe{Precision::bf16, OptimizerKind::adamw},
                                         Recipe{Precision::fp8_amp, OptimizerKind::adamw},
                                         Recipe{Precision::bf16_amp, OptimizerKind::adamw_8bit}),
                         [](const testing::TestParamInfo<Recipe>& p) {
                             std::string n =
                                 std::string(enum_name(kPrecisionNames, p.param.precision)) + "_" +
                                 std::string(enum_name(kOptimizerNames, p.param.optimizer));
                             for (char& c : n) {
                                 if (c == '-') c = '_';
                             }
                             return n;
                         });

// A checkpoint written on `from` is resumed on `to`: the file `to` writes right after loading
// is the same file, byte for byte (one format on both devices), and the next steps' losses
// follow those of the run that stays on `from`, within the backends' rounding.
void move_between(DeviceKind from, DeviceKind to, Precision precision, double loss_rtol,
                  OptimizerKind optimizer = OptimizerKind::adamw) {
    const TrainOptions o = tiny_options(precision, optimizer, from);
    const fs::path dir = scratch_dir();
    const fs::path path = dir / "ckpt.safetensors";
    Trainer a(o);
    for (int s = 0; s < 3; ++s)
        a.step();
    save_checkpoint(path.string(), a);

    TrainOptions ob = read_checkpoint_info(path.string()).options;
    ob.device = to;
    Trainer b(ob);
    load_checkpoint(path.string(), b);
    const fs::path again = dir / "again.safetensors";
    save_checkpoint(again.string(), b);
    EXPECT_TRUE(read_bytes(path) == read_bytes(again))
        << "a checkpoint loaded on the other device does not save back to the same bytes";
    for (int s = 0; s < 3; ++s) {
        const StepRecord ra = a.step(), rb = b.step();
        EXPECT_EQ(rb.step, ra.step);
        EXPECT_EQ(rb.lr, ra.lr);
        EXPECT_NEAR(rb.loss, ra.loss, loss_rtol * ra.loss) << "step " << ra.step;
    }
}

TEST(CheckpointCudaMove, CpuCheckpointContinuesOnCuda) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    move_between(DeviceKind::cpu, DeviceKind::cuda, Precision::fp32, 1e-3);
    move_between(DeviceKind::cpu, DeviceKind::cuda, Precision::bf16_amp, 2e-2);
}

TEST(CheckpointCudaMove, CudaCheckpointContinuesOnCpu) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    move_between(DeviceKind::cuda, DeviceKind::cpu, Precision::fp32, 1e-3);
}

// adamw-8bit's states (codes as I8, block absmax as F32) move in both directions.
TEST(CheckpointCudaMove, EightBitStatesMoveBothWays) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    move_between(DeviceKind::cpu, DeviceKind::cuda, Precision::fp32, 1e-3,
                 OptimizerKind::adamw_8bit);
    move_between(DeviceKind::cuda, DeviceKind::cpu, Precision::bf16_amp, 2e-2,
                 OptimizerKind::adamw_8bit);
}

}  // namespace
}  // namespace napkin
