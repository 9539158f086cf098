// The training step as CUDA graphs (TrainOptions::cuda_graph, napkin train --cuda-graph; docs/
// CUDA.md "CUDA graphs"), label gpu, and emu.* on the emulator, whose capture runs nothing until
// the graph is launched and refuses what a GPU's would (tests/cuda_emu/emu_graph.cpp): losses,
// gradient norms and final weights bit for bit those of the same run without graphs (fp32 at
// G = 1 with one batch slot; bf16-amp at G = 3 with two slots, full checkpointing and the
// epilogue fusions); the allocator's counts and peaks of every step the same (the capture's tape
// replayed at each launch); on the emulator, one capture per slot and a launch per micro-batch
// after step 1. What the capture cannot hold is refused by name.
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
};

TrainOptions cuda_graph_tiny(const CudaGraphCase& c, bool graph) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 1;  // small: the emulator's time goes with tokens and launches
    o.plan.seq_len = 16;
    o.plan.precision = c.precision;
    o.plan.checkpointing = c.checkpointing;
    o.plan.gemm_epilogues = c.fusion;
    o.device = DeviceKind::cuda;
    // Step 1 runs without graphs. One slot: step 2 captures, step 3 launches. Two slots at G = 3:
    // step 2 captures both and launches the first again.
    o.steps = c.copy_stream ? 2 : 3;
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
        // The tape replayed at each launch: the allocator saw the step as if it ran.
        EXPECT_EQ(g.peak_bytes, p.peak_bytes);
        EXPECT_EQ(g.current_bytes, p.current_bytes);
        EXPECT_EQ(g.peak_total_bytes, p.peak_total_bytes);
    }
    ASSERT_EQ(graphs.weights.size(), plain.weights.size());
    for (std::size_t i = 0; i < plain.weights.size(); ++i)
        EXPECT_EQ(graphs.weights[i], plain.weights[i]) << "parameter " << i;
    EXPECT_EQ(graphs.captured, c.copy_stream ? 2 : 1);  // one per batch slot
    EXPECT_EQ(plain.captured, 0);
    if (test::cuda_engine_emulated()) {
        const auto micro = static_cast<std::uint64_t>((graphs.steps.size() - 1) * c.grad_accum);
        EXPECT_EQ(after.captures - before.captures, c.copy_stream ? 2u : 1u);
        EXPECT_EQ(after.launches - before.launches, micro);  // every micro-batch after step 1
    }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, CudaGraphCuda,
    testing::Values(CudaGraphCase{Precision::fp32, 1, Checkpointing::none, false, false},
                    CudaGraphCase{Precision::bf16_amp, 3, Checkpointing::full, true, true},
                    // fp8-amp's delayed scaling: step 1 casts with current scaling, the captured
                    // steps with the scale pairs the roll (outside the graph) left on the device.
                    CudaGraphCase{Precision::fp8_amp, 2, Checkpointing::none, false, false}),
    [](const testing::TestParamInfo<CudaGraphCase>& c) {  // fp32_G1, bf16_amp_G3, fp8_amp_G2
        std::string name(enum_name(kPrecisionNames, c.param.precision));
        for (char& ch : name)
            if (ch == '-') ch = '_';
        return name + "_G" + std::to_string(c.param.grad_accum);
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
