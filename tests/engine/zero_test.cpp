// The ZeRO engine in one process (world size 1, no launcher): stages 1-3 shard over one rank,
// so they must train exactly as the plain trainer does (up to the order of the norm's sum),
// hold exactly the bytes the estimator predicts for W = 1, and communicate nothing. The
// multi-rank runs are tests/comm/zero_mpi_test.cpp (mpirun, labelled slow).
#include <gtest/gtest.h>

#include <cmath>

#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "core/engine/zero.h"
#include "estimator/estimate.h"

namespace napkin {
namespace {

TrainOptions zero_options(Precision p, int zero) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 1;
    o.plan.seq_len = 16;
    o.plan.precision = p;
    o.plan.checkpointing = Checkpointing::full;
    o.steps = 2;
    o.grad_accum = 2;
    o.optimizer.total_steps = 2;
    o.optimizer.grad_clip = 0.5f;
    o.zero = zero;
    return o;
}

TEST(ZeroEngine, OneRankTrainsAsThePlainTrainer) {
    // fp32, and bf16-amp (master weights, 16-bit gradients and their MPI sums).
    for (Precision p : {Precision::fp32, Precision::bf16_amp}) {
        Trainer plain(zero_options(p, 0));
        std::vector<float> ref;
        for (int s = 0; s < 2; ++s)
            ref.push_back(plain.step().loss);
        for (int zero = 1; zero <= 3; ++zero) {
            SCOPED_TRACE("ZeRO-" + std::to_string(zero) + " " +
                         std::string(enum_name(kPrecisionNames, p)));
            Trainer t(zero_options(p, zero));
            ASSERT_NE(t.zero(), nullptr);
            EstimateInputs ei;
            ei.model = t.options().model;
            ei.seq_len = 16;
            ei.micro_batch = 1;
            ei.grad_accum = 2;
            ei.precision = p;
            ei.checkpointing = Checkpointing::full;
            ei.gpu_memory_bytes = 1e15;
            ei.zero = zero;
            const Estimate pred = Estimator{}.run(ei);
            for (int s = 0; s < 2; ++s) {
                const StepRecord r = t.step();
                // Stages 2-3 reduce each micro-batch's gradients before adding them up: in bf16
                // that rounds differently from accumulating in place (about 2^-8 relative).
                const double tol = p == Precision::fp32 || zero == 1 ? 1e-5 : 2e-3;
                EXPECT_NEAR(r.loss, ref[static_cast<std::size_t>(s)], tol) << "step " << s;
                EXPECT_EQ(static_cast<double>(
                              r.peak_bytes[static_cast<std::size_t>(MemCategory::parameters)]),
                          pred.gpu.weights);
                EXPECT_EQ(static_cast<double>(
                              r.peak_bytes[static_cast<std::size_t>(MemCategory::master_weights)]),
                          pred.gpu.master);
                EXPECT_EQ(static_cast<double>(
                              r.peak_bytes[static_cast<std::size_t>(MemCategory::gradients)]),
                          pred.gpu.grads);
                EXPECT_EQ(static_cast<double>(
                              r.peak_bytes[static_cast<std::size_t>(MemCategory::optimizer_state)]),
                          pred.gpu.optimizer);
                EXPECT_EQ(r.comm_sent_bytes, 0u);  // one rank sends nothing
                EXPECT_EQ(r.comm_state_received_bytes, 0u);
            }
            // Stage 3 gathered every unit into communication buffers and freed them again.
            if (zero == 3) {
                EXPECT_EQ(t.allocator().current_bytes(MemCategory::communication), 0);
            }
            EXPECT_GT(t.zero()
                          ->state_traffic()
                          .calls[static_cast<std::size_t>(Collective::reduce_scatter)],
                      0u);
        }
    }
}

TEST(ZeroEngine, RejectsAStageOutsideZeroToThree) {
    EXPECT_THROW(Trainer(zero_options(Precision::fp32, 4)), UsageError);
    EXPECT_THROW(Trainer(zero_options(Precision::fp32, -1)), UsageError);
}

TEST(Communicator, SingleProcessIsANoOp) {
    auto comm = make_single_communicator();
    EXPECT_EQ(comm->world_size(), 1);
    EXPECT_EQ(comm->rank(), 0);
    float x[4] = {1, 2, 3, 4};
    comm->all_reduce(x, 4, DType::f32);
    comm->reduce_scatter(x, 4, DType::f32);
    comm->all_gather(x, 4, DType::f32);
    comm->broadcast(x, sizeof x, 0);
    comm->barrier();
    double d = 2.5;
    comm->all_reduce(&d, 1);
    EXPECT_EQ(x[3], 4);
    EXPECT_EQ(d, 2.5);
    EXPECT_EQ(comm->counters().calls[static_cast<std::size_t>(Collective::all_reduce)], 2u);
    EXPECT_EQ(comm->counters().total_sent(), 0u);
    check_same_run(*comm, "anything");  // one rank always agrees with itself
}

TEST(Communicator, NoLauncherMeansOneProcess) {
    // CTest starts tests without a launcher (the MPI tests run mpirun themselves).
    if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr) {
        GTEST_SKIP() << "started under an MPI launcher";
    }
    const LaunchEnv e = launch_env();
    EXPECT_EQ(e.world, 1);
    EXPECT_TRUE(e.launcher.empty());
    EXPECT_EQ(make_communicator()->world_size(), 1);
}

}  // namespace
}  // namespace napkin
