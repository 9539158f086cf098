// --detect-anomaly on the CUDA engine (label gpu, and emu.* on the emulator): the CPU's cases
// (tests/engine/anomaly_cases.h) with the slots on the device, read once per micro-batch, and the
// micro-batch replayed to name the first op and measure its inputs.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace napkin
