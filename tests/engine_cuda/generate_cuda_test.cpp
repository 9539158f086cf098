// The inference engine on CUDA (on a GPU, or the CPU emulator under NAPKIN_CUDA_PLUGIN): the
// CPU's checks (tests/engine/generate_check.h) over the CUDA kernels, decode_attention's twin
// included: every step's logits against a full forward without a cache, and the memory of
// every category the estimator's to the byte (cuBLASLt's workspace among the temporaries).
#include <gtest/gtest.h>

#include "core/engine/engine_device.h"
#include "tests/engine/generate_check.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"

namespace napkin {
namespace {

TEST(GenerateCuda, DecodeLogitsEqualAFullForwardWithoutACache) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    auto device = open_engine_device(DeviceKind::cuda);
    for (const ModelConfig& cfg : test::generate_configs()) {
        test::check_decode_matches_full_forward(cfg, DType::f32, 2e-5, device.get());
        test::check_decode_matches_full_forward(cfg, DType::bf16, 6e-2, device.get());
    }
}

TEST(GenerateCuda, MemoryMatchesTheEstimateToTheByte) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    auto device = open_engine_device(DeviceKind::cuda);
    for (const ModelConfig& cfg : test::generate_configs()) {
        for (DType dt : {DType::f32, DType::bf16})
            test::check_memory_matches_estimate(cfg, dt, {3, 9, 7}, device.get());
    }
}

}  // namespace
}  // namespace napkin
