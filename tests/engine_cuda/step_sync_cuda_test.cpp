// A CUDA training step waits for the device once (docs/ENGINE.md, "One host synchronization per
// step"): the loss, the clip factor and the fp16 skip stay on the device, the batches are
// queued, and the step's scalars are read back together at its end. Counted from the device's
// own activity records (CUPTI through the plugin's table; on the emulator, its CUPTI), so the
// count cannot pass by accident: every stream, event or device synchronization is a
// synchronization record, and a blocking copy to the host (cudaMemcpy) a runtime record.
// Before (c516f31) a step of G micro-batches waited 2 G + G + 2 times: each batch's two copies,
// each micro-batch's loss rows, the gradient norm and the step timer.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine_device.h"
#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

struct StepWaits {
    int synchronizations = 0;  // stream, event and device synchronizations
    int stream_waits = 0;      // cudaStreamWaitEvent calls
    int blocking_copies = 0;   // synchronous cudaMemcpy calls (they wait without a record)
    int copies_to_host = 0;    // device-to-host copies of any kind
    bool skipped = false;      // the step's (fp16-amp)
};

StepWaits count_waits(const std::vector<profiler::GpuActivity>& records) {
    StepWaits w;
    for (const profiler::GpuActivity& a : records) {
        // Host waits; a stream waiting for another's event (the batches' copy stream) is not.
        if (a.kind == profiler::GpuActivityKind::synchronization && a.name == "synchronize")
            ++w.synchronizations;
        if (a.kind == profiler::GpuActivityKind::synchronization && a.name == "stream wait event")
            ++w.stream_waits;
        if (a.kind == profiler::GpuActivityKind::runtime && a.name.rfind("cudaMemcpy_", 0) == 0)
            ++w.blocking_copies;
        if (a.kind == profiler::GpuActivityKind::memcpy && a.name == "memcpy DtoH")
            ++w.copies_to_host;
    }
    return w;
}

TrainOptions tiny(Precision precision, int grad_accum) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = precision;
    o.device = DeviceKind::cuda;
    o.steps = 3;
    o.grad_accum = grad_accum;
    return o;
}

// The waits of step `counted` (the steps before warm the caching allocator and libraries up).
StepWaits waits_of_a_step(const TrainOptions& o, int counted = 1) {
    std::unique_ptr<EngineDevice> device = open_engine_device(DeviceKind::cuda);
    std::unique_ptr<profiler::GpuActivitySource> activity = device->activity_source();
    EXPECT_NE(activity, nullptr);
    if (activity == nullptr) return {};
    Trainer trainer(o, nullptr, "", {}, std::move(device));
    for (int s = 0; s < counted; ++s)
        trainer.step();
    std::string error;
    EXPECT_TRUE(activity->enable(&error)) << error;
    std::vector<profiler::GpuActivity> records;
    profiler::GpuActivityStats stats;
    activity->flush(true, &records, &stats);
    records.clear();
    const StepRecord r = trainer.step();
    activity->flush(true, &records, &stats);
    activity->disable();
    EXPECT_EQ(stats.dropped_records, 0u);
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_TRUE(r.skipped || r.grad_norm > 0.0f) << r.grad_norm;
    StepWaits w = count_waits(records);
    w.skipped = r.skipped;
    return w;
}

struct StepSyncCudaTestCase {
    Precision precision;
    int grad_accum;
};

class StepSyncCuda : public testing::TestWithParam<StepSyncCudaTestCase> {};

TEST_P(StepSyncCuda, OneReadAtTheEndOfTheStep) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const StepWaits w = waits_of_a_step(tiny(GetParam().precision, GetParam().grad_accum));
    EXPECT_EQ(w.synchronizations, 1);
    EXPECT_EQ(w.blocking_copies, 0);
    EXPECT_EQ(w.copies_to_host, 1);
    // Each batch reaches the engine's stream from the copy stream by an event, not a host wait.
    EXPECT_GE(w.stream_waits, GetParam().grad_accum);
}

INSTANTIATE_TEST_SUITE_P(Recipes, StepSyncCuda,
                         testing::Values(StepSyncCudaTestCase{Precision::fp32, 1},
                                         StepSyncCudaTestCase{Precision::bf16_amp, 2},
                                         StepSyncCudaTestCase{Precision::fp16_amp, 2}));

// fp16-amp from a loss scale that overflows: the skip is decided on the device and read at the
// step's end, and the loss scaler follows it as the CPU engine's does (the same skipped steps,
// the same scale sequence), and a skipped step still waits once.
TEST(StepSyncCuda, Fp16SkipsTheCpuEnginesSteps) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    TrainOptions o = tiny(Precision::fp16_amp, 1);
    o.loss_scale_init = 0x1p18f;  // the fp16 gradients overflow at 2^17 and more
    o.loss_scale_window = 2;
    o.steps = 6;
    TrainOptions c = o;
    c.device = DeviceKind::cpu;
    Trainer gpu(o), cpu(c);
    int skipped = 0;
    for (int s = 0; s < o.steps; ++s) {
        const StepRecord g = gpu.step(), h = cpu.step();
        SCOPED_TRACE(testing::Message() << "step " << s);
        EXPECT_EQ(g.skipped, h.skipped);
        EXPECT_EQ(g.loss_scale, h.loss_scale);
        EXPECT_NEAR(g.loss, h.loss, 2e-2 * std::fabs(h.loss));
        skipped += g.skipped ? 1 : 0;
    }
    EXPECT_GT(skipped, 0);
    EXPECT_LT(skipped, o.steps);
    EXPECT_EQ(gpu.optimizer().update_count(), o.steps - skipped);
    const StepWaits w = waits_of_a_step(o, 3);
    EXPECT_TRUE(w.skipped);
    EXPECT_EQ(w.synchronizations, 1);
}

// --detect-anomaly keeps its reads: every micro-batch's loss and slots (docs/ANOMALY.md).
TEST(StepSyncCuda, DetectAnomalyReadsEachMicroBatch) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    TrainOptions o = tiny(Precision::bf16_amp, 2);
    o.plan.detect_anomaly = true;
    const StepWaits w = waits_of_a_step(o);
    EXPECT_GT(w.synchronizations, 2);
}

}  // namespace
}  // namespace napkin
