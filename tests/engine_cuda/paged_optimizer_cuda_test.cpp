// --paged-optimizer on the CUDA engine (label gpu, and emu.* on the emulator): the optimizer
// state in managed memory changes where bytes live, not one number of training (losses and
// gradient norms bit for bit those of the same run unpaged), and the engine asks the driver for
// exactly the memory and the page traffic the estimator predicts: the state out of the device
// allocator and into the paged one, prefetched in and out once per step. On the emulator the
// driver's side is read back from the plugin (tests/cuda_emu/emu_state.h ManagedStats).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <variant>
#include <vector>

#include "core/check.h"
#include "core/engine/trainer.h"
#include "core/model_config.h"
#include "profiler/event.h"
#include "tests/engine/estimate_util.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

// The emulated driver's counts (tests/cuda_emu/emu_state.h ManagedStats, field for field).
struct EmuManagedStats {
    std::uint64_t allocations = 0, advised_host_bytes = 0, prefetches = 0, to_device_bytes = 0,
                  to_host_bytes = 0;
};

// The emulator plugin's entry points, or nullopt on a real GPU.
struct EmuManaged {
    void (*stats)(EmuManagedStats*) = nullptr;
    void (*reset)() = nullptr;
};
std::optional<EmuManaged> emu_managed() {
    const char* path = std::getenv("NAPKIN_CUDA_PLUGIN");
    if (path == nullptr || !test::cuda_engine_emulated()) return std::nullopt;
    void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return std::nullopt;
    EmuManaged m;
    m.stats = reinterpret_cast<void (*)(EmuManagedStats*)>(dlsym(lib, "napkin_emu_managed_stats"));
    m.reset = reinterpret_cast<void (*)()>(dlsym(lib, "napkin_emu_reset_managed_stats"));
    if (m.stats == nullptr || m.reset == nullptr) return std::nullopt;
    return m;
}

struct Recipe {
    const char* name;
    Precision precision;
    OptimizerKind optimizer;
    Finetune finetune;
};

TrainOptions tiny(const Recipe& r, bool paged) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = r.precision;
    o.plan.optimizer = r.optimizer;
    o.plan.finetune = r.finetune;
    if (r.finetune != Finetune::full) {
        o.plan.lora_rank = 4;
        o.plan.lora_alpha = 8.0f;
    }
    o.device = DeviceKind::cuda;
    o.steps = 3;
    o.optimizer.lr = 3e-3f;
    o.optimizer.total_steps = 3;
    o.paged_optimizer = paged;
    return o;
}

class PagedOptimizerCuda : public testing::TestWithParam<Recipe> {};

TEST_P(PagedOptimizerCuda, SameNumbersExactMemoryAndTraffic) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const std::optional<EmuManaged> emu = emu_managed();
    std::vector<StepRecord> plain;
    std::int64_t plain_state = 0, plain_total = 0;
    {
        Trainer a(tiny(GetParam(), false));
        for (int s = 0; s < 3; ++s)
            plain.push_back(a.step());
        plain_state =
            plain.back().peak_bytes[static_cast<std::size_t>(MemCategory::optimizer_state)];
        plain_total = plain.back().peak_total_bytes;
    }
    const TrainOptions o = tiny(GetParam(), true);
    const Estimate pred = test::cpu_estimate(o);
    ASSERT_TRUE(pred.paged.has_value());
    const auto state = static_cast<std::uint64_t>(pred.paged->state_bytes);
    EXPECT_EQ(pred.paged->state_bytes, static_cast<double>(plain_state));  // to the byte
    EXPECT_EQ(pred.gpu.optimizer, 0.0);
    EXPECT_EQ(pred.paged->traffic_bytes_per_step, 2.0 * pred.paged->state_bytes);

    if (emu) emu->reset();
    Trainer b(o);
    ASSERT_NE(b.paged_allocator(), nullptr);
    EXPECT_EQ(b.paged_allocator()->current_bytes(MemCategory::optimizer_state),
              static_cast<std::int64_t>(state));
    EXPECT_EQ(b.paged_allocator()->current_total_bytes(), static_cast<std::int64_t>(state));
    profiler::Recorder rec;
    for (int s = 0; s < 3; ++s) {
        if (s == 2) b.set_recorder(&rec);  // the last step profiled: its trace shows the paging
        const StepRecord r = b.step();
        // The same arithmetic on other memory: bit for bit.
        EXPECT_EQ(r.loss, plain[s].loss) << "step " << s;
        EXPECT_EQ(r.grad_norm, plain[s].grad_norm) << "step " << s;
        // Nothing of the state on the device allocator; everything else as unpaged.
        EXPECT_EQ(test::peak_of(r, MemCategory::optimizer_state), 0.0);
        EXPECT_EQ(r.peak_total_bytes, plain_total - plain_state);
        EXPECT_EQ(test::peak_of(r, MemCategory::optimizer_state), pred.gpu.optimizer);
        // In before the update, out after it: the state once each way.
        EXPECT_EQ(r.paged_to_device_bytes, state) << "step " << s;
        EXPECT_EQ(r.paged_to_host_bytes, state) << "step " << s;
        EXPECT_GE(r.paged_seconds, 0.0);
    }
    // The trace's "paged optimizer" counter: the profiled step's bytes each way.
    int counters = 0;
    for (const profiler::Event& ev : rec.take()) {
        const auto* c = std::get_if<profiler::CounterEvent>(&ev);
        if (c == nullptr || c->name != "paged optimizer") continue;
        ++counters;
        ASSERT_EQ(c->values.size(), 3u);
        EXPECT_EQ(c->values[0].series, "to_device_bytes");
        EXPECT_EQ(c->values[0].value, static_cast<double>(state));
        EXPECT_EQ(c->values[1].value, static_cast<double>(state));
    }
    EXPECT_EQ(counters, 1);
    if (emu) {  // what the driver was asked: advice on every state byte, the start's move home
        EmuManagedStats m;
        emu->stats(&m);
        EXPECT_EQ(m.advised_host_bytes, state);
        EXPECT_EQ(m.to_device_bytes, 3 * state);
        EXPECT_EQ(m.to_host_bytes, 4 * state);  // the start's (after zeroing) and each step's
    }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, PagedOptimizerCuda,
    testing::Values(
        Recipe{"fp32_adamw", Precision::fp32, OptimizerKind::adamw, Finetune::full},
        Recipe{"bf16amp_adamw8bit", Precision::bf16_amp, OptimizerKind::adamw_8bit, Finetune::full},
        Recipe{"bf16amp_qlora_adamw", Precision::bf16_amp, OptimizerKind::adamw, Finetune::qlora}),
    [](const testing::TestParamInfo<Recipe>& i) { return std::string(i.param.name); });

TEST(PagedOptimizer, CpuEngineIsAUsageError) {
    TrainOptions o = tiny({"cpu", Precision::fp32, OptimizerKind::adamw, Finetune::full}, true);
    o.device = DeviceKind::cpu;
    try {
        Trainer t(o);
        FAIL() << "the CPU engine accepted a paged optimizer";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("paged_optimizer"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CUDA only"), std::string::npos) << e.what();
    }
}

TEST(PagedOptimizer, ZeroStagesAreAUsageError) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    TrainOptions o = tiny({"z1", Precision::bf16_amp, OptimizerKind::adamw, Finetune::full}, true);
    o.zero = 1;
    try {
        Trainer t(o);
        FAIL() << "ZeRO-1 accepted a paged optimizer";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("zero 1-3"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace napkin
