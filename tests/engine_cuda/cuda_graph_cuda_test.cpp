// The training step as CUDA graphs (TrainOptions::cuda_graph, napkin train --cuda-graph; docs/
// CUDA.md "CUDA graphs"), label gpu, and emu.* on the emulator, whose capture runs nothing until
// the graph is launched and refuses what a GPU's would (tests/cuda_emu/emu_graph.cpp): losses,
// gradient norms, learning rates and final weights bit for bit those of the same run without
// graphs (fp32 at G = 1 with one batch slot and a warmup that changes the learning rate at every
// step, so a graph that froze it would fail; bf16-amp at G = 3 with two slots, full
// checkpointing and the epilogue fusions; fp8-amp at G = 2; adamw-8bit under bf16-amp); the
// allocator's counts and peaks of every step the same (the capture's tape replayed at each
// launch); on the emulator, one capture per slot plus the optimizer's, and a launch per
// micro-batch and per update after step 1. What the capture cannot hold is refused by name.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

// The emulated driver's graph counts (tests/cuda_emu/emu_state.h GraphStats, field for field).
struct CudaGraphEmuStats {
    std::uint64_t captures = 0, launches = 0, nodes_run = 0;
};

CudaGraphEmuStats cuda_graph_emu_stats() {
    CudaGraphEmuStats s;
    const char* path = std::getenv("NAPKIN_CUDA_PLUGIN");
    if (path == nullptr || !test::cuda_engine_emulated()) return s;
    void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return s;
    using Fn = void (*)(CudaGraphEmuStats*);
    if (auto fn = reinterpret_cast<Fn>(dlsym(lib, "napkin_emu_graph_stats"))) fn(&s);
    return s;
}

struct CudaGraphCase {
    Precision precision;
    int grad_accum;
    Checkpointing checkpointing;
    bool fusion;
    bool copy_stream;  // two batch slots (two graphs), or one
    int steps;
    OptimizerKind optimizer = OptimizerKind::adamw;
    int warmup = 0;  // the schedule's warmup steps: the learning rate changes at each of them
};

// Batch slots captured: step 1 runs without graphs, then micro-batch k takes slot k % 2.
int slots_captured(const CudaGraphCase& c) {
    return c.copy_stream && (c.steps - 1) * c.grad_accum >= 2 ? 2 : 1;
}

TrainOptions cuda_graph_tiny(const CudaGraphCase& c, bool graph) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 1;  // small: the emulator's time goes with tokens and launches
    o.plan.seq_len = 16;
    o.plan.precision = c.precision;
    o.plan.checkpointing = c.checkpointing;
    o.plan.gemm_epilogues = c.fusion;
    o.plan.optimizer = c.optimizer;
    o.optimizer.warmup_steps = c.warmup;
    o.optimizer.total_steps = c.steps;
    o.device = DeviceKind::cuda;
    // Step 1 runs without graphs; step 2 captures the optimizer and launches it, later steps
    // launch it. One slot: step 2 captures, step 3 launches. Two slots at G = 3: step 2 captures
    // both and launches the first again.
    o.steps = c.steps;
    o.grad_accum = c.grad_accum;
    o.copy_stream = c.copy_stream;
    o.cuda_graph = graph;
    return o;
}

struct CudaGraphRun {
    std::vector<StepRecord> steps;
    std::vector<std::vector<float>> weights;
    int captured = 0;
};

CudaGraphRun cuda_graph_train(const TrainOptions& o) {
    Trainer trainer(o);
    CudaGraphRun r;
    for (int s = 0; s < o.steps; ++s)
        r.steps.push_back(trainer.step());
    for (std::size_t i = 0; i < trainer.model().params().size(); ++i) {
        r.weights.emplace_back(static_cast<std::size_t>(trainer.model().params()[i].numel));
        trainer.model().get_param(i, r.weights.back().data());
    }
    r.captured = trainer.cuda_graphs_captured();
    return r;
}

class CudaGraphCuda : public testing::TestWithParam<CudaGraphCase> {};

TEST_P(CudaGraphCuda, TrainsBitForBitAsWithoutGraphs) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const CudaGraphCase c = GetParam();
    const CudaGraphEmuStats before = cuda_graph_emu_stats();
    const CudaGraphRun graphs = cuda_graph_train(cuda_graph_tiny(c, true));
    const CudaGraphEmuStats after = cuda_graph_emu_stats();
    const CudaGraphRun plain = cuda_graph_train(cuda_graph_tiny(c, false));
    ASSERT_EQ(graphs.steps.size(), plain.steps.size());
    for (std::size_t s = 0; s < plain.steps.size(); ++s) {
        SCOPED_TRACE(testing::Message() << "step " << s + 1);
        const StepRecord &g = graphs.steps[s], &p = plain.steps[s];
        EXPECT_TRUE(std::isfinite(g.loss));
        EXPECT_EQ(g.loss, p.loss);
        EXPECT_EQ(g.grad_norm, p.grad_norm);
        EXPECT_EQ(g.lr, p.lr);
        if (c.warmup > 0 && s > 0) {
            EXPECT_NE(p.lr, plain.steps[s - 1].lr);  // a new learning rate at each step
        }
        // The tape replayed at each launch: the allocator saw the step as if it ran.
        EXPECT_EQ(g.peak_bytes, p.peak_bytes);
        EXPECT_EQ(g.current_bytes, p.current_bytes);
        EXPECT_EQ(g.peak_total_bytes, p.peak_total_bytes);
    }
    ASSERT_EQ(graphs.weights.size(), plain.weights.size());
    for (std::size_t i = 0; i < plain.weights.size(); ++i)
        EXPECT_EQ(graphs.weights[i], plain.weights[i]) << "parameter " << i;
    // One per batch slot, and the optimizer's.
    const int captured = slots_captured(c) + 1;
    EXPECT_EQ(graphs.captured, captured);
    EXPECT_EQ(plain.captured, 0);
    if (test::cuda_engine_emulated()) {
        const auto later = static_cast<std::uint64_t>(graphs.steps.size() - 1);
        EXPECT_EQ(after.captures - before.captures, static_cast<std::uint64_t>(captured));
        // Every micro-batch and every update after step 1.
        EXPECT_EQ(after.launches - before.launches,
                  later * static_cast<std::uint64_t>(c.grad_accum) + later);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CudaGraphCuda,
    testing::Values(CudaGraphCase{Precision::fp32, 1, Checkpointing::none, false, false, 4,
                                  OptimizerKind::adamw, 4},
                    CudaGraphCase{Precision::bf16_amp, 3, Checkpointing::full, true, true, 3},
                    // fp8-amp's delayed scaling: step 1 casts with current scaling, the captured
                    // steps with the scale pairs the roll (outside the graphs) left on the device.
                    CudaGraphCase{Precision::fp8_amp, 2, Checkpointing::none, false, false, 3},
                    // 8-bit states: codes and block absmax written by the graph's update.
                    CudaGraphCase{Precision::bf16_amp, 1, Checkpointing::none, false, true, 3,
                                  OptimizerKind::adamw_8bit}),
    [](const testing::TestParamInfo<CudaGraphCase>& c) {  // fp32_G1_warmup, bf16_amp_G3, ...
        std::string name(enum_name(kPrecisionNames, c.param.precision));
        name += "_G" + std::to_string(c.param.grad_accum);
        if (c.param.optimizer != OptimizerKind::adamw)
            name += "_" + std::string(enum_name(kOptimizerNames, c.param.optimizer));
        if (c.param.warmup > 0) name += "_warmup";
        for (char& ch : name)
            if (ch == '-') ch = '_';
        return name;
    });

// What a graph would freeze or cannot hold, refused by name with --cuda-graph on.
TEST(CudaGraphRefusal, NamesWhatTheCaptureCannotHold) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.device = DeviceKind::cuda;
    EXPECT_EQ(cuda_graph_refusal(o, 1), "");  // profiling too: graph nodes map to their ops
    const auto refused = [&](TrainOptions t, int world, const std::string& field) {
        const std::string why = cuda_graph_refusal(t, world);
        EXPECT_EQ(why.rfind("{" + field + "}", 0), 0u) << why;
    };
    TrainOptions t = o;
    t.device = DeviceKind::cpu;
    refused(t, 1, "device");
    refused(o, 2, "zero");
    t = o;
    t.plan.detect_anomaly = true;
    refused(t, 1, "detect_anomaly");
    t = o;
    t.paged_optimizer = true;
    refused(t, 1, "paged_optimizer");
    t = o;
    t.model.dropout = 0.1;
    refused(t, 1, "dropout");
    t = o;
    t.plan.precision = Precision::fp16_amp;
    refused(t, 1, "precision");
}

}  // namespace
}  // namespace napkin
