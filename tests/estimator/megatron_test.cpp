// 3D parallelism against the published closed forms: Korthikanti et al. 2022 (activations per
// layer with tensor and sequence parallelism, Table 2; the pipeline's micro-batches in flight,
// section 4.2.3) and Narayanan et al. 2021 (the bubble, section 2.2; the configurations of
// Table 1 that ran on 80 GB A100s), with the traffic of each group counted by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "estimator/parallel.h"
#include "estimator/solver.h"
#include "tests/estimator/gpt3_shapes.h"
#include "tests/estimator/usage_error.h"

namespace napkin {
namespace {

struct MegatronTestShape {
    const char* name;
    int layers;
    std::int64_t h;
    int heads;
    int pp;  // Korthikanti et al.'s Table 3, t = 8
};
constexpr MegatronTestShape kMegatronTestShapes[] = {
    {"175B", 96, 12288, 96, 8}, {"530B", 105, 20480, 128, 35}, {"1T", 128, 25600, 160, 64}};

// The run of Korthikanti et al. 2022, Table 3 and 5: b = 1, s = 2048, t = 8, the paper's p, one
// replica (DP = 1) with a global batch of 8 p sequences, A100 80 GB, fp32 main gradients.
EstimateInputs paper_run(const MegatronTestShape& s) {
    return a100_megatron_run(gpt3(s.layers, s.h, s.heads), 8, s.pp, 8 * s.pp, 8 * s.pp);
}

// Table 2 per layer, s = 2048, b = 1, t = 8: sbh(10 + 24/t + 5as/ht) with tensor parallelism,
// sbh(34/t + 5as/ht) with sequence parallelism, 34 sbh/t with selective recomputation as well,
// 2 sbh/t with full recomputation. The closed form is these exactly; the op plan of one rank
// agrees to 0.1% (it adds the norms' fp32 statistics, 16 s b / t bytes).
TEST(Korthikanti, PerLayerActivationsWithTensorAndSequenceParallelism) {
    Estimator est;
    for (const MegatronTestShape& shape : kMegatronTestShapes) {
        SCOPED_TRACE(shape.name);
        const double s = 2048, b = 1, h = static_cast<double>(shape.h), a = shape.heads, t = 8;
        const double sbh = s * b * h;
        auto layer = [&](bool sp, Checkpointing ck) {
            EstimateInputs in = paper_run(shape);
            in.sequence_parallel = sp;
            in.checkpointing = ck;
            return est.run(in);
        };
        struct Row {
            bool sp;
            Checkpointing ck;
            double bytes;
        };
        const Row rows[] = {
            {false, Checkpointing::none, sbh * (10 + 24 / t + 5 * a * s / (h * t))},
            {true, Checkpointing::none, sbh * (34 / t + 5 * a * s / (h * t))},
            {false, Checkpointing::selective, sbh * (10 + 24 / t)},
            {true, Checkpointing::selective, sbh * 34 / t},
            {true, Checkpointing::full, sbh * 2 / t},
        };
        for (const Row& r : rows) {
            const Estimate e = layer(r.sp, r.ck);
            EXPECT_NEAR(e.act_closed_form_layer_bytes / r.bytes, 1.0, 1e-12)
                << "sp " << r.sp << " ckpt " << static_cast<int>(r.ck);
            EXPECT_NEAR(e.act_detailed_layer_bytes / r.bytes, 1.0, 1e-3)
                << "sp " << r.sp << " ckpt " << static_cast<int>(r.ck);
        }
    }
}

// Section 4.2.3: under 1F1B the first stage holds p micro-batches of its L/p layers, L layers'
// worth; the interleaved schedule multiplies that by 1 + (p - 1) / (p m), m chunks per GPU.
TEST(Korthikanti, FirstStageHoldsTheWholeModelsLayers) {
    Estimator est;
    const MegatronTestShape& shape = kMegatronTestShapes[0];  // 175B, p = 8: 12 layers per stage
    EstimateInputs in = paper_run(shape);
    in.sequence_parallel = true;
    in.checkpointing = Checkpointing::selective;
    const Estimate e = est.run(in);
    ASSERT_EQ(e.parallel.shown, 0);
    EXPECT_EQ(e.parallel.stages[0].in_flight, 8);
    const double sbh = 2048.0 * 12288;
    // L layers of 34 sbh / t, plus 8 micro-batches of the embedding's output and dropout mask,
    // split t ways along s: 3 bytes per element.
    EXPECT_NEAR(e.act_closed_form_bytes, 96 * sbh * 34 / 8 + 8 * sbh * 3 / 8, 1.0);

    ParallelLayout p = parallel_layout(64, 8, 8, 2, true, 64, in.model);
    EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 0), 8 * (1 + 7.0 / (8 * 2)));
    EXPECT_DOUBLE_EQ(in_flight_micro_batches(p, 7), (8 + 1) / 2.0);  // (V - 1) P + 1 chunks
    p.vpp = 1;
    EXPECT_EQ(in_flight_micro_batches(p, 0), 8);
    EXPECT_EQ(in_flight_micro_batches(p, 7), 1);
    p.micro_batches = 3;  // fewer micro-batches than stages: all of them
    EXPECT_EQ(in_flight_micro_batches(p, 0), 3);
}

// The configurations Korthikanti et al. ran (Table 3, sequence parallelism and selective
// recomputation) and Narayanan et al. ran (Table 1, full recomputation: 1T on 3072 GPUs, batch
// 3072; and 175B at t = 8, p = 16) fit 80 GB A100s; each shows its bubble (P - 1) / M and the
// tensor and pipeline groups' traffic; without model parallelism none of them fits.
TEST(Megatron, PublishedConfigurationsFitAndShowBubbleAndTraffic) {
    Estimator est;
    std::vector<EstimateInputs> runs;
    for (const MegatronTestShape& shape : kMegatronTestShapes) {
        EstimateInputs in = paper_run(shape);
        in.sequence_parallel = true;
        in.checkpointing = Checkpointing::selective;
        runs.push_back(in);
    }
    EstimateInputs trillion = paper_run(kMegatronTestShapes[2]);
    trillion.checkpointing = Checkpointing::full;
    trillion.gpus = 3072;       // DP = 6
    trillion.grad_accum = 512;  // 3072 sequences / 6 replicas
    runs.push_back(trillion);
    EstimateInputs gpt3_175b = paper_run(kMegatronTestShapes[0]);
    gpt3_175b.checkpointing = Checkpointing::full;
    gpt3_175b.pp = 16;
    gpt3_175b.gpus = 1024;       // DP = 8
    gpt3_175b.grad_accum = 192;  // a batch of 1536
    runs.push_back(gpt3_175b);

    for (const EstimateInputs& in : runs) {
        SCOPED_TRACE(testing::Message() << in.model.d_model << " t " << in.tp << " p " << in.pp);
        const Estimate e = est.run(in);
        EXPECT_TRUE(e.fits()) << e.gpu.total() / 1e9 << " GB";
        EXPECT_DOUBLE_EQ(e.parallel.bubble_fraction,
                         (in.pp - 1.0) / static_cast<double>(in.grad_accum));
        EXPECT_NEAR(e.step_seconds, e.parallel.compute_seconds * (1 + e.parallel.bubble_fraction),
                    1e-9 * e.step_seconds);
        EXPECT_GT(e.parallel.traffic.tensor.sent_bytes, 0);
        EXPECT_GT(e.parallel.traffic.tensor.seconds, 0);
        EXPECT_EQ(e.parallel.traffic.tensor.link.name, "nvlink3");  // T = 8: inside a node
        EXPECT_GT(e.parallel.traffic.pipeline.sent_bytes, 0);
        EXPECT_EQ(e.parallel.traffic.pipeline.link.name, "ib-hdr");
        EXPECT_EQ(e.tokens_per_step, 2048.0 * in.grad_accum * e.parallel.layout.dp);

        EstimateInputs flat = in;
        flat.tp = flat.pp = 1;
        flat.sequence_parallel = false;
        EXPECT_FALSE(est.run(flat).fits());
    }
}

// One tensor-parallel rank's traffic per layer per micro-batch, by hand: B T C = 2048 x 4096
// elements of bf16 over T = 4 ranks; a ring all-reduce sends 2 (T - 1) / T of it, an all-gather
// or reduce-scatter (T - 1) / T.
TEST(Megatron, TensorAndPipelineTrafficByHand) {
    ModelConfig c = gpt3(8, 4096, 32);
    const ParallelLayout p = parallel_layout(16, 4, 2, 1, false, 6, c);  // DP 2, M 6
    TrafficInputs t;
    t.tokens = 2048;
    t.d_model = 4096;
    t.vocab_shard_rows = tp_padded_vocab(c, 4) / 4;
    t.activations = DType::bf16;
    t.grads = DType::f32;
    const GroupLinks links = group_links(p, 8, {"nvlink4", 450e9}, {"ib-ndr", 50e9});
    EXPECT_EQ(links.tensor.name, "nvlink4");   // 4 consecutive GPUs
    EXPECT_EQ(links.data.name, "nvlink4");     // T DP = 8: one node
    EXPECT_EQ(links.pipeline.name, "ib-ndr");  // T DP P = 16: two nodes
    const double btc_bytes = 2048.0 * 4096 * 2;
    const ModelParallelTraffic first = model_parallel_traffic(p, 0, t, links);
    // 4 all-reduces per layer, 4 layers on the stage, 6 micro-batches; the embedding's one.
    EXPECT_DOUBLE_EQ(first.tensor.sent_bytes, (4.0 * 4 * 6 + 6) * 2 * 3 / 4 * btc_bytes);
    // Sends its outputs forward; the tied embedding's gradient all-reduced with the last stage
    // (2 ranks: a 51200 / 4 = 12800 x 4096 shard of fp32, half of it sent twice).
    EXPECT_DOUBLE_EQ(first.pipeline.sent_bytes, 6 * btc_bytes + 12800.0 * 4096 * 4);

    ParallelLayout sp = p;
    sp.sp = true;
    t.full_recompute = true;
    const ModelParallelTraffic last = model_parallel_traffic(sp, 1, t, links);
    // SP: 6 all-gathers and 4 reduce-scatters per layer, full recomputation 2 more of each; the
    // head's input: 2 all-gathers and a reduce-scatter; cross entropy: 3 all-reduces of fp32 B T.
    const double per_layer = (8 + 6) * 3.0 / 4 * btc_bytes;
    const double head = 3 * 3.0 / 4 * btc_bytes + 3 * 2 * 3.0 / 4 * 2048 * 4;
    EXPECT_DOUBLE_EQ(last.tensor.sent_bytes, 6 * (4 * per_layer + head));
    // The last stage sends gradients backward, B T C / T each under SP.
    EXPECT_DOUBLE_EQ(last.pipeline.sent_bytes, 6 * btc_bytes / 4 + 12800.0 * 4096 * 4);
}

// Each rank of each stage holds its share: the stages' parameters add up to the model's, with a
// tied embedding's copy on the last stage, and T ranks hold the sharded weights once.
TEST(Megatron, StagesHoldTheModelOnce) {
    Estimator est;
    EstimateInputs in;
    in.model = gpt3(8, 1024, 16);
    in.model.vocab_size = 50257;
    in.model.padded_vocab_size = 50304;
    in.seq_len = 1024;
    in.gpu_memory_bytes = 80e9;
    in.pp = 2;
    in.gpus = 2;
    in.grad_accum = 4;
    const ParamCounts n = count_params(in.model);
    const Estimate e = est.run(in);
    ASSERT_EQ(e.parallel.stages.size(), 2u);
    EXPECT_EQ(e.parallel.stages[0].params + e.parallel.stages[1].params,
              static_cast<double>(n.allocated + n.token_embedding + (50304 - 50257) * 1024));
    // T = 4, P = 1: the GEMM weights and the column-parallel biases split four ways; the norms,
    // the row-parallel biases and the position table whole; the vocabulary padded to 512 rows.
    in.pp = 1;
    in.tp = 4;
    in.gpus = 4;
    const Estimate t = est.run(in);
    const double whole = 8 * (2 * 2 * 1024.0 + 2 * 1024) + 2 * 1024.0 + 2048.0 * 1024;
    const double split = 8 * (12.0 * 1024 * 1024 + 3 * 1024 + 4 * 1024) + 50688.0 * 1024;
    EXPECT_EQ(t.parallel.stages[0].params, whole + split / 4);
}

TEST(Megatron, BubbleAndInterleaving) {
    Estimator est;
    EstimateInputs in = paper_run(kMegatronTestShapes[0]);
    in.sequence_parallel = true;
    in.checkpointing = Checkpointing::selective;
    const Estimate one = est.run(in);
    in.vpp = 2;  // 96 layers in 16 chunks of 6
    const Estimate two = est.run(in);
    EXPECT_DOUBLE_EQ(one.parallel.bubble_fraction, 7.0 / 64);
    EXPECT_DOUBLE_EQ(two.parallel.bubble_fraction, 7.0 / 128);
    EXPECT_LT(two.step_seconds, one.step_seconds);
    // Interleaving holds more in flight (the warm-up fills V chunks), and sends V times as often.
    EXPECT_GT(two.gpu.activations, one.gpu.activations);
    EXPECT_GT(two.parallel.traffic.pipeline.sent_bytes, one.parallel.traffic.pipeline.sent_bytes);
}

// T = P = 1 is the data-parallel estimate exactly: the 3D flags at 1 change no number.
TEST(Megatron, OneByOneIsDataParallel) {
    Estimator est;
    EstimateInputs in;
    in.model = preset_or_throw("llama3-8b");
    in.seq_len = 8192;
    in.gpus = 8;
    in.zero = 3;
    in.peak_flops_per_s = 989.5e12;
    in.gpu_memory_bytes = 80e9;
    const Estimate a = est.run(in);
    in.tp = in.pp = in.vpp = 1;
    in.node_link = {"nvlink4", 450e9};
    const Estimate b = est.run(in);
    EXPECT_EQ(a.gpu.total(), b.gpu.total());
    EXPECT_EQ(a.act_detailed_bytes, b.act_detailed_bytes);
    EXPECT_EQ(a.comm.sent_bytes, b.comm.sent_bytes);
    EXPECT_EQ(a.step_seconds, b.step_seconds);
    EXPECT_TRUE(b.parallel.stages.empty());
    EXPECT_EQ(b.parallel.bubble_fraction, 0);
}

TEST(Megatron, RefusesLayoutsTheModelCannotTake) {
    EstimateInputs base;
    base.model = preset_or_throw("llama2-7b");
    base.gpu_memory_bytes = 80e9;
    auto with = [&](int tp, int pp, int gpus) {
        EstimateInputs in = base;
        in.tp = tp;
        in.pp = pp;
        in.gpus = gpus;
        return in;
    };
    expect_usage_error(with(8, 2, 24), "gpus 24: must be a multiple of tp 8 x pp 2 = 16");
    expect_usage_error(with(3, 1, 3), "tp 3: must divide the 32 heads");
    expect_usage_error(with(1, 40, 40), "pp 40: more stages");
    expect_usage_error(with(0, 1, 1), "tp: must be a positive integer");
    EstimateInputs in = with(1, 1, 1);
    in.vpp = 2;
    expect_usage_error(in, "vpp 2: interleaving needs pp > 1");
    in = with(1, 4, 4);
    in.vpp = 3;
    expect_usage_error(in, "vpp 3 x pp 4");
    in = with(1, 1, 1);
    in.sequence_parallel = true;
    expect_usage_error(in, "sequence_parallel");
    in = with(2, 1, 2);
    in.finetune = Finetune::lora;
    expect_usage_error(in, "full training");
    in = with(2, 1, 2);
    in.offload = Offload::optimizer;
    expect_usage_error(in, "offload");
    in = with(2, 1, 2);
    in.params_only = true;
    in.params = 7e9;
    expect_usage_error(in, "need a model shape");
}

// The smallest T P that fits: Llama 3 70B at T = 4096 with sequence parallelism and selective
// recomputation needs more than one node's worth of model parallelism on 80 GB, and the layout
// found fits while every smaller one does not; tensor parallelism comes first.
TEST(Megatron, SolverFindsTheSmallestModelParallelGroup) {
    Estimator est;
    EstimateInputs in;
    in.model = preset_or_throw("llama3-70b");
    in.seq_len = 4096;
    in.grad_accum = 16;
    in.sequence_parallel = true;
    in.checkpointing = Checkpointing::selective;
    in.gpu_memory_bytes = 80e9;
    const SolveResult r = solve_min_tp_pp(in, est);
    ASSERT_GT(r.value, 0);
    EXPECT_TRUE(r.at.fits());
    EXPECT_EQ(r.tp, 8);  // the node is used up before the pipeline grows
    EXPECT_EQ(r.value, r.tp * r.pp);
    for (const auto& [t, p] : {std::pair{8, r.pp - 1}, {4, r.value / 4 - 1}}) {
        if (p < 1) continue;
        EstimateInputs smaller = in;
        smaller.tp = t;
        smaller.pp = p;
        smaller.gpus = t * p;
        EXPECT_FALSE(est.run(smaller).fits()) << "T " << t << " P " << p;
    }
    EXPECT_THROW(solve_min_tp_pp(
                     [] {
                         EstimateInputs n;
                         n.params_only = true;
                         n.params = 1e9;
                         return n;
                     }(),
                     est),
                 UsageError);
}

}  // namespace
}  // namespace napkin
