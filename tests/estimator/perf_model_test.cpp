// The performance model (estimator/perf_model.h) and the estimator's time over it: each op's time
// is its FLOPs or bytes over the profile's rate, a step sums its ops, gradient accumulation
// repeats the micro-batch and not the optimizer, overlap hides collectives, --mfu overrides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>

#include "core/check.h"
#include "core/op_plan.h"
#include "estimator/estimate.h"
#include "estimator/hardware.h"
#include "estimator/perf_model.h"
#include "estimator/profile_catalog.h"

namespace napkin {
namespace {

constexpr double kSgemm = 1e11, kStream = 1e10;

DeviceProfile flat_cpu(double sgemm = kSgemm) {
    DeviceIdentity cpu;
    cpu.name = "Test CPU";
    cpu.logical_cpus = 2;
    cpu.memory_bytes = 8e9;
    return cpu_roofline_profile(cpu, sgemm, kStream, 2);
}

double bucket(const StepTime& t, TimeBucket b) {
    return t.seconds[static_cast<std::size_t>(b)];
}

struct Fixture {
    ModelConfig cfg = preset_or_throw("tiny");
    PlanInputs pin;
    StepShape shape;
    Fixture() {
        pin.micro_batch = 4;
        pin.seq_len = 64;
        pin.precision = Precision::fp32;
        shape.threads = 2;
        shape.optimizer_elements = 1e6;
        shape.grad_elements = 1e6;
    }
    StepTime run(const DeviceProfile& p) const {
        return predict_step_time(build_op_plan(cfg, pin), shape, p);
    }
};

// napkin's CPU fallback is flat: every fp32 GEMM at 80% of the sgemm rate, so each GEMM op's
// predicted seconds are its FLOPs over that rate exactly.
TEST(PerfModel, EachGemmIsItsFlopsOverTheProfilesRate) {
    const Fixture f;
    const StepTime t = f.run(flat_cpu());
    int gemms = 0;
    for (const OpTime& op : t.ops) {
        if (op.bucket != TimeBucket::gemm) continue;
        ++gemms;
        EXPECT_NEAR(op.seconds_per_step, op.flops_per_step / (0.8 * kSgemm),
                    1e-12 * op.flops_per_step)
            << op.name;
    }
    EXPECT_GT(gemms, 4);
    double sum = 0;
    for (double s : t.seconds)
        sum += s;
    EXPECT_DOUBLE_EQ(t.step_seconds, sum);
    EXPECT_GT(bucket(t, TimeBucket::attention), 0);
    EXPECT_GT(bucket(t, TimeBucket::memory_bound), 0);
    EXPECT_GT(bucket(t, TimeBucket::optimizer), 0);
    // Twice the GEMM rate: half the GEMMs' time, the rest unchanged.
    const StepTime fast = f.run(flat_cpu(2 * kSgemm));
    EXPECT_NEAR(bucket(fast, TimeBucket::gemm), bucket(t, TimeBucket::gemm) / 2, 1e-12);
    EXPECT_DOUBLE_EQ(bucket(fast, TimeBucket::optimizer), bucket(t, TimeBucket::optimizer));
}

TEST(PerfModel, GradientAccumulationRepeatsTheMicroBatchNotTheOptimizer) {
    Fixture f;
    const StepTime one = f.run(flat_cpu());
    f.shape.grad_accum = 3;
    const StepTime three = f.run(flat_cpu());
    EXPECT_NEAR(bucket(three, TimeBucket::gemm), 3 * bucket(one, TimeBucket::gemm), 1e-12);
    EXPECT_NEAR(bucket(three, TimeBucket::attention), 3 * bucket(one, TimeBucket::attention),
                1e-12);
    EXPECT_DOUBLE_EQ(bucket(three, TimeBucket::optimizer), bucket(one, TimeBucket::optimizer));
}

TEST(PerfModel, RecomputationAddsForwardTime) {
    Fixture f;
    const StepTime none = f.run(flat_cpu());
    f.pin.checkpointing = Checkpointing::full;
    const StepTime full = f.run(flat_cpu());
    EXPECT_GT(full.step_seconds, none.step_seconds);
    bool recompute = false;
    for (const OpTime& op : full.ops)
        recompute |= op.name.find("(recompute)") != std::string::npos;
    EXPECT_TRUE(recompute);
}

// A profile with empty tables (a GPU's, forced onto an fp32 run): every op at the stated default
// share of the one peak it has, and notes saying so; never a division by zero.
TEST(PerfModel, EmptyTablesFallBackToTheProfilesPeak) {
    const Fixture f;
    DeviceProfile p = flat_cpu();
    p.peak_flops_per_s = {{DType::bf16, 1e12}};
    p.compute[0].gemm.clear();
    p.compute[0].attention.clear();
    p.compute[0].streaming.clear();
    const StepTime t = f.run(p);
    EXPECT_TRUE(std::isfinite(t.step_seconds));
    EXPECT_GT(t.step_seconds, 0);
    for (const OpTime& op : t.ops) {
        if (op.bucket != TimeBucket::gemm) continue;
        EXPECT_NEAR(op.seconds_per_step, op.flops_per_step / (0.5 * 1e12),
                    1e-12 * op.flops_per_step);
    }
    EXPECT_FALSE(t.notes.empty());
}

TEST(PerfModel, AProfileWithoutComputeIsAUsageError) {
    const Fixture f;
    DeviceProfile p = flat_cpu();
    p.compute.clear();
    EXPECT_THROW(f.run(p), UsageError);
}

EstimateInputs gpt2_on(const DeviceProfile& p) {
    EstimateInputs in;
    in.model = preset_or_throw("gpt2");
    in.seq_len = 1024;
    in.micro_batch = 8;
    in.gpus = 8;
    in.zero = 3;
    in.gpu_memory_bytes = 141e9;
    in.peak_flops_per_s = find_gpu("h200")->peak_tflops(DType::bf16) * 1e12;
    in.link_bytes_per_s = 50e9;
    in.mfu = 0;
    in.profile = &p;
    return in;
}

// The estimate's MFU is what the predicted step means; overlap only hides communication; --mfu
// (in.mfu > 0) is the override: the time at that MFU, the profile unused.
TEST(PerfModel, TheEstimatePredictsTimeAndMfuUnlessOverridden) {
    const DeviceProfile p = datasheet_profile(*find_gpu("h200"));
    EstimateInputs in = gpt2_on(p);
    const Estimate off = Estimator{}.run(in);
    ASSERT_TRUE(off.time_predicted);
    EXPECT_GT(off.step_seconds, 0);
    EXPECT_NEAR(off.mfu, off.model_flops_per_step / (8 * in.peak_flops_per_s * off.step_seconds),
                1e-12);
    EXPECT_GT(off.mfu, 0.05);
    EXPECT_LT(off.mfu, 0.8);
    EXPECT_NEAR(off.tokens_per_s, off.tokens_per_step / off.step_seconds, 1e-6 * off.tokens_per_s);
    EXPECT_GT(off.step_time.comm_seconds, 0);
    EXPECT_DOUBLE_EQ(off.step_time.comm_exposed_seconds, off.step_time.comm_seconds);
    in.overlap = Overlap::on;
    const Estimate on = Estimator{}.run(in);
    EXPECT_LT(on.step_time.comm_exposed_seconds, off.step_time.comm_exposed_seconds);
    EXPECT_DOUBLE_EQ(on.step_time.comm_seconds, off.step_time.comm_seconds);
    EXPECT_LT(on.step_seconds, off.step_seconds);
    in.mfu = 0.4;
    const Estimate assumed = Estimator{}.run(in);
    EXPECT_FALSE(assumed.time_predicted);
    EXPECT_DOUBLE_EQ(assumed.mfu, 0.4);
}

// The forward and backward of a step's micro-batches: every row but the data reads, the
// gradients' memset, the optimizer and the collectives.
double compute_seconds(const StepTime& t) {
    double sum = 0;
    for (const OpTime& op : t.ops) {
        const bool compute = op.bucket == TimeBucket::gemm || op.bucket == TimeBucket::attention ||
                             op.bucket == TimeBucket::memory_bound;
        if (compute && op.name != "zero_grads") sum += op.seconds_per_step;
    }
    return sum;
}

bool has_row(const StepTime& t, const std::string& name) {
    for (const OpTime& op : t.ops) {
        if (op.name == name) return true;
    }
    return false;
}

// ZeRO-3's gathers and its gradients' reduce-scatters share the rank's one link: with more
// traffic than compute, overlap hides at most the passes' time once, not once for each.
TEST(PerfModel, OverlapHidesTheLinksTrafficBehindThePassesOnce) {
    const DeviceProfile p = datasheet_profile(*find_gpu("h200"));
    EstimateInputs in = gpt2_on(p);
    in.overlap = Overlap::on;
    in.link_bytes_per_s = 1e9;  // a slow link: the traffic outlasts the compute
    const Estimate e = Estimator{}.run(in);
    const double compute = compute_seconds(e.step_time);
    ASSERT_GT(e.step_time.comm_seconds, compute);
    EXPECT_GE(e.step_time.comm_exposed_seconds, e.step_time.comm_seconds - compute * (1 + 1e-12));
    in.link_bytes_per_s = 450e9;  // a fast one: all but the first gather and last reduction hidden
    const Estimate fast = Estimator{}.run(in);
    EXPECT_LT(fast.step_time.comm_exposed_seconds, 0.2 * fast.step_time.comm_seconds);
}

// A pipeline stage runs its blocks only (the embedding on the first, the head on the last), its
// tensor-parallel traffic is bytes over the group's link and exposed, and the bubble is
// (P - 1) / (V M) of its forward and backward.
TEST(PerfModel, PipelineStageRunsItsBlocksWithTheBubbleAndTensorTraffic) {
    Fixture f;
    const StepTime whole = f.run(flat_cpu());
    f.shape.layers = 1;  // of tiny's 2
    f.shape.last_stage = false;
    const StepTime first = f.run(flat_cpu());
    EXPECT_TRUE(has_row(first, "embedding"));
    EXPECT_FALSE(has_row(first, "lm_head+loss (fused forward and backward)"));
    EXPECT_LT(compute_seconds(first), compute_seconds(whole) / 2);
    EXPECT_EQ(bucket(first, TimeBucket::pipeline_bubble), 0);

    f.shape.bubble_fraction = 0.25;
    ModelParallelTraffic traffic;
    traffic.tensor.group = "tensor";
    traffic.tensor.link = {"test link", 1e9};
    traffic.tensor.lines.push_back({"block outputs", "all_reduce", DType::f32, 4, 1e5, 2e6, 2e6});
    traffic.tensor.sent_bytes = 2e6;
    f.shape.model_parallel = &traffic;
    const StepTime t = f.run(flat_cpu());
    EXPECT_DOUBLE_EQ(bucket(t, TimeBucket::pipeline_bubble), 0.25 * compute_seconds(first));
    EXPECT_DOUBLE_EQ(t.comm_exposed_seconds, 2e-3);
    EXPECT_DOUBLE_EQ(bucket(t, TimeBucket::communication), 2e-3);
    EXPECT_TRUE(has_row(t, "tensor all_reduce block outputs"));
    EXPECT_NEAR(t.step_seconds, first.step_seconds + 2e-3 + 0.25 * compute_seconds(first), 1e-12);
}

// Under --tp/--pp the estimate predicts the slower stage of a tensor-parallel rank: the bubble in
// its own bucket at (P - 1) / M of that stage's compute, the tensor group's lines among its rows.
TEST(PerfModel, TheEstimatePredictsAPipelineOfTensorParallelRanks) {
    const DeviceProfile p = datasheet_profile(*find_gpu("h200"));
    EstimateInputs in = gpt2_on(p);
    in.zero = 1;
    in.link_bytes_per_s = 0;  // the groups' links by placement: all inside one node
    in.node_link = {"nvlink4", 450e9};
    in.tp = 2;
    in.pp = 2;
    in.grad_accum = 8;
    const Estimate e = Estimator{}.run(in);
    ASSERT_TRUE(e.time_predicted);
    EXPECT_DOUBLE_EQ(e.parallel.bubble_fraction, 1.0 / 8);
    EXPECT_GT(e.parallel.bubble_seconds, 0);
    EXPECT_NEAR(e.parallel.bubble_seconds, compute_seconds(e.step_time) / 8,
                1e-12 * e.step_seconds);
    EXPECT_DOUBLE_EQ(e.parallel.compute_seconds + e.parallel.bubble_seconds, e.step_seconds);
    EXPECT_TRUE(has_row(e.step_time, "tensor all_reduce blocks"));
    EXPECT_TRUE(e.step_time.notes.empty());  // every group has a link: all of it timed
    EXPECT_NEAR(e.mfu, e.model_flops_per_step / (8 * in.peak_flops_per_s * e.step_seconds), 1e-12);
    // One rank of T = 2 runs about half the GEMM FLOPs of the whole model's stage.
    in.tp = 1;
    const Estimate pipeline_only = Estimator{}.run(in);
    EXPECT_LT(bucket(e.step_time, TimeBucket::gemm),
              0.6 * bucket(pipeline_only.step_time, TimeBucket::gemm));
}

}  // namespace
}  // namespace napkin
