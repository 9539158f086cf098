// --detect-anomaly on the CUDA engine (label gpu, and emu.* on the emulator): the CPU's cases
// (tests/engine/anomaly_cases.h) with the slots on the device, read once per micro-batch, and the
// micro-batch replayed to name the first op and measure its inputs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

#include <memory>
#include <vector>

#include "core/engine/engine_device.h"
#include "core/tensor.h"
#include "tests/engine/anomaly_cases.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct CudaRig {
    std::unique_ptr<EngineDevice> device = open_engine_device(DeviceKind::cuda);
    AccountingAllocator alloc{device->memory()};
    std::vector<Tensor> batches;
    AnomalyRig rig{[this](const ModelConfig& c, const PlanInputs& in) {
                       return device->create_gpt(c, in, alloc, 1234);
                   },
                   [this](const std::vector<std::int32_t>& t) {
                       const auto n = static_cast<std::int64_t>(t.size());
                       batches.emplace_back(alloc, "batch", MemCategory::data, DType::f32,
                                            std::initializer_list<std::int64_t>{n});
                       device->copy_to_device(batches.back().raw(), t.data(),
                                              t.size() * sizeof(std::int32_t));
                       return static_cast<const std::int32_t*>(batches.back().raw());
                   }};
};

TEST(AnomalyCuda, CorruptedWeightNamesTheOpThatReadsIt) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    CudaRig r;
    corrupted_weight_names_its_reader(r.rig, Precision::fp32);
}

TEST(AnomalyCuda, AttentionOverflowNamesAttention) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    CudaRig r;
    attention_overflow_names_attention(r.rig);
}

TEST(AnomalyCuda, NanLossGradientNamesTheHeadsBackward) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    CudaRig r;
    nan_loss_gradient_names_the_heads_backward(r.rig);
}

// One check launch per op, not one per tensor: a clean micro-batch launches the batched check
// once for each op (forward and backward) whose tensors it checks, at most twice the op plan's
// ops (prologue, L blocks, epilogue), and never the single-tensor check. Counted by the emulator
// (its launches per kernel name, read from the plugin) against the engine's count; on a GPU it
// skips.
TEST(AnomalyCuda, OneCheckLaunchPerOp) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const char* path = std::getenv("NAPKIN_CUDA_PLUGIN");
    void* lib =
        path != nullptr && cuda_engine_emulated() ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    auto launches = lib == nullptr ? nullptr
                                   : reinterpret_cast<std::uint64_t (*)(const char*)>(
                                         dlsym(lib, "napkin_emu_launches_of"));
    if (launches == nullptr) GTEST_SKIP() << "launches are counted on the emulator only";
    CudaRig r;
    const std::unique_ptr<Gpt> m = r.rig.make(anomaly_config(), anomaly_inputs(Precision::fp32));
    const std::int64_t n = m->plan().in.micro_batch * m->plan().in.seq_len;
    const Batch b = random_batch(n, 37, 5);
    std::vector<std::int32_t> both = b.inputs;
    both.insert(both.end(), b.targets.begin(), b.targets.end());
    const std::int32_t* t = r.rig.tokens(both);
    m->zero_grads();
    const std::uint64_t many0 = launches("nonfinite_check_many_kernel");
    const std::uint64_t single0 = launches("nonfinite_check_kernel");
    m->forward_backward(t, t + n, 1.0f);
    const OpPlan& plan = m->plan();
    const std::size_t ops = plan.prologue.size() + plan.epilogue.size() +
                            plan.block.size() * static_cast<std::size_t>(plan.n_layers);
    const std::uint64_t many = launches("nonfinite_check_many_kernel") - many0;
    EXPECT_EQ(many, m->anomaly_check_launches());
    EXPECT_GT(many, ops);  // the backward's ops too
    EXPECT_LE(many, 2 * ops);
    EXPECT_EQ(launches("nonfinite_check_kernel") - single0, 0u);
}

}  // namespace
}  // namespace napkin
