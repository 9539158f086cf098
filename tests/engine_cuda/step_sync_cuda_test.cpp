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
    int blocking_copies = 0;   // synchronous cudaMemcpy calls (they wait without a record)
    int copies_to_host = 0;    // device-to-host copies of any kind
};

StepWaits count_waits(const std::vector<profiler::GpuActivity>& records) {
    StepWaits w;
    for (const profiler::GpuActivity& a : records) {
        if (a.kind == profiler::GpuActivityKind::synchronization) ++w.synchronizations;
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

// The waits of step 1 (step 0 warms the caching allocator and the libraries up).
StepWaits waits_of_a_step(const TrainOptions& o) {
    std::unique_ptr<EngineDevice> device = open_engine_device(DeviceKind::cuda);
    std::unique_ptr<profiler::GpuActivitySource> activity = device->activity_source();
    EXPECT_NE(activity, nullptr);
    if (activity == nullptr) return {};
    Trainer trainer(o, nullptr, "", {}, std::move(device));
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
    EXPECT_GT(r.grad_norm, 0.0f);
    return count_waits(records);
}

struct Case {
    Precision precision;
    int grad_accum;
};

class StepSyncCuda : public testing::TestWithParam<Case> {};

TEST_P(StepSyncCuda, OneReadAtTheEndOfTheStep) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const StepWaits w = waits_of_a_step(tiny(GetParam().precision, GetParam().grad_accum));
    EXPECT_EQ(w.synchronizations, 1);
    EXPECT_EQ(w.blocking_copies, 0);
    EXPECT_EQ(w.copies_to_host, 1);
}

INSTANTIATE_TEST_SUITE_P(Recipes, StepSyncCuda,
                         testing::Values(Case{Precision::fp32, 1}, Case{Precision::bf16_amp, 2},
                                         Case{Precision::fp16_amp, 2}));

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
