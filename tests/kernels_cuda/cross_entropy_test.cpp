// The fused, chunked head + cross-entropy: the CUDA twin against the CPU's
// (kernels/cpu/cross_entropy.cpp) with chunks that divide the rows and chunks that do not, a
// padded vocabulary, V off the row kernel's 4-float vectors (its scalar tail) and Vp off them
// (its scalar path), rows longer than a block's sweep, large logits (the online max's rescaling),
// and a frozen head; losses, dx and the scratch poisoned, dw accumulating. Targets outside
// [0, V), -1 included, give a NaN loss and no gradient.
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

struct CrossEntropyTestCase {
    std::int64_t M, C, V, Vp, chunk;
    double w_std = 0.3;  // the head weight's spread: logits spread about w_std sqrt(C)
};
constexpr CrossEntropyTestCase kCrossEntropyTestCases[] = {
    {1, 8, 13, 16, 1},      {7, 33, 100, 128, 4},    {65, 64, 1000, 1024, 64},
    {64, 16, 50, 50, 16},   {130, 96, 301, 384, 50}, {37, 24, 1001, 1008, 16},
    {9, 40, 2050, 2051, 4}, {20, 32, 4099, 4104, 7}, {33, 64, 777, 780, 8, 12.0}};

// Floats that hold `bytes`.
std::size_t floats_of(std::size_t bytes) {
    return (bytes + sizeof(float) - 1) / sizeof(float);
}

template <class T>
class CrossEntropyCuda : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyCuda, StorageTypes);

TYPED_TEST(CrossEntropyCuda, LossesAndGradientsMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    CublasLt lt;
    for (const CrossEntropyTestCase& c : kCrossEntropyTestCases) {
        for (bool frozen : {false, true}) {
            SCOPED_TRACE(case_name<T>(c.M, c.C, c.V, c.Vp, c.chunk) + (frozen ? " frozen" : ""));
            const auto x = random_storage<T>(rng, c.M * c.C),
                       w = random_storage<T>(rng, c.Vp * c.C, c.w_std);
            const auto dw0 = random_storage<T>(rng, c.Vp * c.C, 0.01);
            std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(c.V - 1));
            std::vector<std::int32_t> targets(static_cast<std::size_t>(c.M));
            for (auto& t : targets)
                t = tok(rng);
            const float dloss = 1.0f / static_cast<float>(c.M);

            std::vector<float> losses(static_cast<std::size_t>(c.M));
            std::vector<T> dx(static_cast<std::size_t>(c.M * c.C)), dw = dw0;
            const bool widen = !std::is_same_v<T, float>;
            std::vector<float> scratch(static_cast<std::size_t>(
                cpu::head_cross_entropy_scratch_floats(c.chunk, c.C, c.Vp, widen)));
            cpu::head_cross_entropy<T>({losses.data(), dx.data(), frozen ? nullptr : dw.data(),
                                        x.data(), w.data(), targets.data(), c.M, c.C, c.V, c.Vp,
                                        c.chunk, dloss, scratch.data()});

            const DType dt = std::is_same_v<T, float>    ? DType::f32
                             : std::is_same_v<T, bf16_t> ? DType::bf16
                                                         : DType::f16;
            DeviceBuffer<float> scratch_d(
                floats_of(cuda::head_cross_entropy_scratch_bytes(c.chunk, c.C, c.Vp, dt, !frozen)));
            DeviceBuffer<T> x_d(x), w_d(w), dx_d(dx.size()), dw_d(dw0);
            DeviceBuffer<std::int32_t> targets_d(targets);
            DeviceBuffer<float> losses_d(losses.size());
            dx_d.poison();
            losses_d.poison();
            scratch_d.poison();  // the logits, dlogits and dw's fp32 sum: written before read
            cuda::head_cross_entropy<T>({losses_d.get(), dx_d.get(), frozen ? nullptr : dw_d.get(),
                                         x_d.get(), w_d.get(), targets_d.get(), c.M, c.C, c.V, c.Vp,
                                         c.chunk, dloss, scratch_d.get(), lt.workspace},
                                        lt.launch);
            // Logits sum C products in fp32 on both sides (16-bit inputs widened exactly); the
            // large-logit case's are w_std / 0.3 times larger, and so is their rounding, which
            // the softmax carries into the gradients.
            const double scale = std::max(1.0, c.w_std / 0.3);
            const auto widened = [scale](Tolerance t) {
                return Tolerance{t.abs * scale, t.rel * scale};
            };
            expect_match("losses", losses_d.download(), losses,
                         widened(for_sum_of(Tolerance{1e-5, 1e-5}, c.C + c.V)));
            expect_match("dx", dx_d.download(), dx, widened(for_sum_of(tolerance<T>(), c.Vp)));
            expect_match("dw", dw_d.download(), dw, widened(for_sum_of(tolerance<T>(), c.M)));
        }
    }
}

TYPED_TEST(CrossEntropyCuda, TargetsOutsideTheVocabularyGiveNanLossAndNoGradient) {
    NAPKIN_SKIP_WITHOUT_GPU();
    using T = TypeParam;
    const std::int64_t M = 4, C = 4, V = 5, Vp = 8;
    const DType dt = std::is_same_v<T, float>    ? DType::f32
                     : std::is_same_v<T, bf16_t> ? DType::bf16
                                                 : DType::f16;
    CublasLt lt(0);
    std::mt19937 rng(fresh_seed());
    DeviceBuffer<T> x(random_storage<T>(rng, M * C)), w(random_storage<T>(rng, Vp * C));
    DeviceBuffer<T> dx(static_cast<std::size_t>(M * C));
    DeviceBuffer<float> losses(static_cast<std::size_t>(M));
    DeviceBuffer<std::int32_t> targets(std::vector<std::int32_t>{1, 7, -1, 4});  // 7 >= V
    DeviceBuffer<float> scratch(
        floats_of(cuda::head_cross_entropy_scratch_bytes(M, C, Vp, dt, false)));
    dx.poison();
    losses.poison();
    cuda::head_cross_entropy<T>({losses.get(), dx.get(), nullptr, x.get(), w.get(), targets.get(),
                                 M, C, V, Vp, M, 0.5f, scratch.get()},
                                lt.launch);
    const auto l = losses.download();
    EXPECT_TRUE(std::isfinite(l[0]));
    EXPECT_TRUE(std::isnan(l[1]));
    EXPECT_TRUE(std::isnan(l[2]));
    EXPECT_TRUE(std::isfinite(l[3]));
    const auto g = dx.download();
    for (std::int64_t c = 0; c < C; ++c) {
        EXPECT_TRUE(std::isfinite(to_float(g[static_cast<std::size_t>(c)])));
        EXPECT_EQ(to_float(g[static_cast<std::size_t>(C + c)]), 0.0f);
        EXPECT_EQ(to_float(g[static_cast<std::size_t>(2 * C + c)]), 0.0f);
    }
}

}  // namespace
}  // namespace napkin
