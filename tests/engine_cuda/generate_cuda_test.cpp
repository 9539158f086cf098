// The inference engine on CUDA (on a GPU, or the CPU emulator under NAPKIN_CUDA_PLUGIN): the
// CPU's checks (tests/engine/generate_check.h) over the CUDA kernels, decode_attention's twin
// included: every step's logits against a full forward without a cache, and the memory of
// every category the estimator's to the byte (cuBLASLt's workspace and flash-decoding's partials
// among the temporaries); the decode steps' logits with flash-decoding against those without.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "core/engine/engine_device.h"
#include "tests/engine/generate_check.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin {
namespace {

TEST(GenerateCuda, DecodeLogitsEqualAFullForwardWithoutACache) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    auto device = open_engine_device(DeviceKind::cuda);
    for (const ModelConfig& cfg : test::generate_configs()) {
        test::check_decode_matches_full_forward(cfg, DType::f32, 2e-5, 2e-5, device.get());
        test::check_decode_matches_full_forward(cfg, DType::bf16, test::kBf16ForwardTol,
                                                test::kBf16CacheTol, device.get());
    }
}

TEST(GenerateCuda, MemoryMatchesTheEstimateToTheByte) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    auto device = open_engine_device(DeviceKind::cuda);
    for (const ModelConfig& cfg : test::generate_configs()) {
        for (DType dt : {DType::f32, DType::bf16}) {
            test::check_memory_matches_estimate(cfg, dt, {3, 9, 7}, device.get());  // split
            test::check_memory_matches_estimate(cfg, dt, {3, 9, 7, false}, device.get());
        }
    }
    // Past one chunk of keys: 2 chunks of the decode steps' partials per (sequence, head).
    ModelConfig cfg = test::generate_configs()[1];
    cfg.context_length = 160;
    test::check_memory_matches_estimate(cfg, DType::bf16, {2, 130, 3}, device.get());
}

// The decode steps' logits with flash-decoding (split-KV attention, 2 chunks of 128 keys past the
// prompt of 130) against the single-pass kernel's, the same weights and tokens fed to both (the
// single pass's greedy picks): the two orders of the softmax's sums agree to rounding.
TEST(GenerateCuda, FlashDecodingLogitsEqualTheSinglePassKernels) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    auto device = open_engine_device(DeviceKind::cuda);
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    for (const ModelConfig& base : test::generate_configs()) {
        ModelConfig cfg = base;
        cfg.context_length = 160;
        for (const auto& [dt, tol] : {std::pair{DType::f32, 2e-5}, std::pair{DType::bf16, 3e-2}}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dt) << ", KVH " << cfg.n_kv_heads);
            const GenerateShape on{2, 130, 4, true}, off{2, 130, 4, false};
            AccountingAllocator alloc(device->memory());
            auto split = Generator::create(cfg, dt, on, alloc, seed, device.get());
            auto single = Generator::create(cfg, dt, off, alloc, seed, device.get());
            test::perturb_weights(*split, seed);
            test::perturb_weights(*single, seed);
            std::mt19937 rng(seed);
            std::vector<std::int32_t> tokens(2 * 130);
            for (auto& t : tokens)
                t = static_cast<std::int32_t>(rng() % cfg.vocab_size);
            std::vector<float> got, want;
            split->prefill(tokens.data(), got);
            single->prefill(tokens.data(), want);
            for (int j = 1; j < 4; ++j) {
                std::vector<std::int32_t> next;
                for (std::size_t b = 0; b < 2; ++b) {
                    const float* row = want.data() + b * static_cast<std::size_t>(cfg.vocab_size);
                    next.push_back(static_cast<std::int32_t>(
                        std::max_element(row, row + cfg.vocab_size) - row));
                }
                split->decode(next.data(), got);
                single->decode(next.data(), want);
                test::expect_logits(got, std::vector<double>(want.begin(), want.end()), tol,
                                    "decode " + std::to_string(j));
            }
        }
    }
}

}  // namespace
}  // namespace napkin
