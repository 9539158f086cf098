// The batches' uploads on a copy stream (core/engine/engine_device.h BatchUploads; docs/CUDA.md
// "Batches on a copy stream"), label gpu, and emu.* on the emulator: the same training, bit for
// bit, as each batch queued on the engine's stream (TrainOptions::copy_stream off), with G = 1
// and with G = 3 (each slot used twice in a step, so its copies wait for the micro-batch two
// back); the second slot's device buffers counted under `data`; and, on the emulator, the driver's
// side read back from the plugin (tests/cuda_emu/emu_state.h StreamStats): two pinned staging
// buffers, cross-stream waits, all pinned memory returned at the end.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

// The emulated driver's counts (tests/cuda_emu/emu_state.h StreamStats, field for field).
struct BatchUploadsEmuStats {
    std::uint64_t pinned_allocations = 0, pinned_bytes = 0, stream_waits = 0;
};

// The emulator plugin's entry point, or null on a real GPU.
using BatchUploadsStatsFn = void (*)(BatchUploadsEmuStats*);
BatchUploadsStatsFn batch_uploads_emu_stats() {
    const char* path = std::getenv("NAPKIN_CUDA_PLUGIN");
    if (path == nullptr || !test::cuda_engine_emulated()) return nullptr;
    void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return nullptr;
    return reinterpret_cast<BatchUploadsStatsFn>(dlsym(lib, "napkin_emu_stream_stats"));
}

TrainOptions batch_uploads_tiny(Precision precision, int grad_accum, bool copy_stream) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = precision;
    o.device = DeviceKind::cuda;
    o.steps = 3;
    o.grad_accum = grad_accum;
    o.copy_stream = copy_stream;
    return o;
}

struct BatchUploadsRun {
    std::vector<float> losses, grad_norms;
    std::int64_t data_bytes = 0;
};

BatchUploadsRun batch_uploads_train(const TrainOptions& o) {
    Trainer trainer(o);
    BatchUploadsRun r;
    for (int s = 0; s < o.steps; ++s) {
        const StepRecord rec = trainer.step();
        r.losses.push_back(rec.loss);
        r.grad_norms.push_back(rec.grad_norm);
    }
    r.data_bytes = trainer.allocator().peak_bytes(MemCategory::data);
    return r;
}

struct BatchUploadsCase {
    Precision precision;
    int grad_accum;
};

class BatchUploadsCuda : public testing::TestWithParam<BatchUploadsCase> {};

TEST_P(BatchUploadsCuda, TrainsBitForBitAsTheEngineStreamsUploads) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const BatchUploadsCase c = GetParam();
    const BatchUploadsStatsFn stats = batch_uploads_emu_stats();
    if (test::cuda_engine_emulated()) {
        ASSERT_NE(stats, nullptr) << "napkin_emu_stream_stats";
    }
    BatchUploadsEmuStats before;
    if (stats != nullptr) stats(&before);
    const TrainOptions o = batch_uploads_tiny(c.precision, c.grad_accum, true);
    const BatchUploadsRun copy_stream = batch_uploads_train(o);
    BatchUploadsEmuStats after;
    if (stats != nullptr) stats(&after);
    const BatchUploadsRun engine_stream =
        batch_uploads_train(batch_uploads_tiny(c.precision, c.grad_accum, false));
    for (std::size_t s = 0; s < copy_stream.losses.size(); ++s) {
        SCOPED_TRACE(testing::Message() << "step " << s);
        EXPECT_TRUE(std::isfinite(copy_stream.losses[s]));
        EXPECT_EQ(copy_stream.losses[s], engine_stream.losses[s]);
        EXPECT_EQ(copy_stream.grad_norms[s], engine_stream.grad_norms[s]);
    }
    // Inputs and targets, int32, per slot: two slots with the copy stream, one without.
    const std::int64_t slot_bytes = 2 * o.plan.micro_batch * o.plan.seq_len * 4;
    EXPECT_EQ(copy_stream.data_bytes, 2 * slot_bytes);
    EXPECT_EQ(engine_stream.data_bytes, slot_bytes);
    if (stats != nullptr) {
        EXPECT_EQ(after.pinned_allocations - before.pinned_allocations, 2u);
        EXPECT_EQ(after.pinned_bytes, before.pinned_bytes);  // returned with the trainer
        // Per micro-batch the engine's stream waits for the copies, and from each slot's second
        // use on the copy stream waits for the micro-batch two back.
        const auto micro = static_cast<std::uint64_t>(o.steps * c.grad_accum);
        EXPECT_EQ(after.stream_waits - before.stream_waits, 2 * micro - 2);
    }
}

INSTANTIATE_TEST_SUITE_P(Recipes, BatchUploadsCuda,
                         testing::Values(BatchUploadsCase{Precision::fp32, 1},
                                         BatchUploadsCase{Precision::bf16_amp, 3}));

}  // namespace
}  // namespace napkin
