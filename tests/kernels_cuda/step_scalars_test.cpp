// The step's scalars (kernels/step_scalars.h): the CUDA twins against the CPU's, bit for bit
// (the loss's fp64 row-order sum over more rows than one tile, the gate over finite, huge and
// non-finite sums of squares), and the optimizer update through a gate: skip leaves every
// weight and state as it was, and update_scale does what OptimizerHyper::grad_scale does.
#include "kernels/step_scalars.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/optimizer.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

void expect_same_bits(const StepScalars& want, const StepScalars& got) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(want.loss_sum),
              std::bit_cast<std::uint64_t>(got.loss_sum));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.loss_mean),
              std::bit_cast<std::uint32_t>(got.loss_mean));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.grad_norm),
              std::bit_cast<std::uint32_t>(got.grad_norm));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.update_scale),
              std::bit_cast<std::uint32_t>(got.update_scale));
    EXPECT_EQ(want.skip, got.skip);
}

// Two micro-batches of 70001 rows (a tile is 4096): the mean of each and their fp64 sum.
TEST(StepScalarsCuda, LossMeanIsTheHostsRowOrderSum) {
    NAPKIN_SKIP_WITHOUT_GPU();
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> loss(0.0f, 12.0f);
    constexpr std::int64_t M = 70001;
    StepScalars want;
    DeviceBuffer<StepScalars> got(std::vector<StepScalars>(1));
    for (int micro = 0; micro < 2; ++micro) {
        std::vector<float> rows(M);
        for (float& r : rows)
            r = loss(rng);
        cpu::loss_mean(&want, rows.data(), M);
        DeviceBuffer<float> rows_d(rows);
        cuda::loss_mean(got.get(), rows_d.get(), M, nullptr);
        expect_same_bits(want, got.download()[0]);
    }
    EXPECT_NE(want.loss_sum, 0.0);
}

TEST(StepScalarsCuda, GateIsTheHostsClipAndSkip) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const double inf = std::numeric_limits<double>::infinity();
    const double sums[] = {
        0.0, 0.25, 3.0, 1e6, 1e300 * 1e10, inf, std::numeric_limits<double>::quiet_NaN()};
    const float scales[] = {1.0f, 1.0f / 65536.0f};
    const float clips[] = {0.0f, 1.0f};
    for (double sumsq : sums) {
        for (float scale : scales) {
            for (float clip : clips) {
                SCOPED_TRACE(testing::Message()
                             << "sumsq " << sumsq << " scale " << scale << " clip " << clip);
                StepScalars want;
                cpu::optimizer_gate(&want, &sumsq, scale, clip);
                DeviceBuffer<StepScalars> got(std::vector<StepScalars>(1));
                DeviceBuffer<double> sumsq_d(std::vector<double>{sumsq});
                cuda::optimizer_gate(got.get(), sumsq_d.get(), scale, clip, nullptr);
                expect_same_bits(want, got.download()[0]);
                EXPECT_EQ(want.skip, std::isfinite(sumsq) ? 0 : 1);
            }
        }
    }
}

// adamw over one fp32 tensor of 1003 elements on the GPU, gated or given its scale.
std::vector<float> updated(const std::vector<float>& w0, const std::vector<float>& g,
                           const OptimizerHyper& h, const StepScalars* gate_host) {
    const auto n = static_cast<std::int64_t>(w0.size());
    DeviceBuffer<float> w(w0), grad(g), m(std::vector<float>(w0.size(), 0.0f)),
        v(std::vector<float>(w0.size(), 0.0f));
    DeviceBuffer<StepScalars> gate(
        std::vector<StepScalars>{gate_host != nullptr ? *gate_host : StepScalars{}});
    OptimizerHyper hd = h;
    if (gate_host != nullptr) hd.gate = gate.get();
    OptimizerTensor t{.master = w.get(), .grad = grad.get(), .m = m.get(), .v = v.get(), .n = n};
    cuda::optimizer_update(hd, &t, 1, DType::f32, nullptr);
    return w.download();
}

TEST(StepScalarsCuda, GatedUpdateSkipsOrScalesAsTheHostWould) {
    NAPKIN_SKIP_WITHOUT_GPU();
    std::mt19937 rng(11);
    const Vec w0d = random_normal(rng, 1003, 0.0, 1.0), gd = random_normal(rng, 1003, 0.0, 1.0);
    const std::vector<float> w0(w0d.begin(), w0d.end()), g(gd.begin(), gd.end());
    OptimizerHyper h{.kind = OptimizerKind::adamw,
                     .lr = 1e-2f,
                     .bias_correction1 = 0.1f,
                     .bias_correction2 = 0.05f};
    StepScalars skip;
    skip.skip = 1;
    skip.update_scale = 0.5f;
    EXPECT_EQ(updated(w0, g, h, &skip), w0);
    StepScalars run;
    run.update_scale = 0.375f;
    const std::vector<float> gated = updated(w0, g, h, &run);
    h.grad_scale = 0.375f;
    const std::vector<float> given = updated(w0, g, h, nullptr);
    EXPECT_EQ(gated, given);
    EXPECT_NE(gated, w0);
    // The CPU twin with the same pointer semantics (a host gate) does the same.
    std::vector<float> w = w0, m(w0.size(), 0.0f), v(w0.size(), 0.0f);
    std::vector<float> grad = g;
    OptimizerTensor t{.master = w.data(),
                      .grad = grad.data(),
                      .m = m.data(),
                      .v = v.data(),
                      .n = static_cast<std::int64_t>(w.size())};
    OptimizerHyper hc = h;
    hc.grad_scale = 1.0f;
    hc.gate = &skip;
    cpu::optimizer_update(hc, &t, 1, DType::f32);
    EXPECT_EQ(w, w0);
    hc.gate = &run;
    cpu::optimizer_update(hc, &t, 1, DType::f32);
    expect_close("cpu gated vs cuda given", Vec(w.begin(), w.end()),
                 Vec(given.begin(), given.end()), tolerance<float>());
}

}  // namespace
}  // namespace napkin
