// The step's scalars (kernels/step_scalars.h): the CUDA twins against the CPU's, bit for bit
// (the loss's fp64 row-order sum over more rows than one tile, the gate over finite, huge and
// non-finite sums of squares, the schedule written as given), and the optimizer update through a
// gate: skip leaves every weight and state as it was, update_scale does what OptimizerHyper::
// grad_scale does, and the schedule read from the gate gives the bits of the same values as
// arguments for every optimizer, state, gradient and weight dtype.
#include "kernels/step_scalars.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/optimizer.h"
#include "tests/kernels/optimizer_schedule_util.h"
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
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.schedule.lr),
              std::bit_cast<std::uint32_t>(got.schedule.lr));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.schedule.bias_correction1),
              std::bit_cast<std::uint32_t>(got.schedule.bias_correction1));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(want.schedule.bias_correction2),
              std::bit_cast<std::uint32_t>(got.schedule.bias_correction2));
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

// The schedule lands as given, and nothing else of the block moves.
TEST(StepScalarsCuda, ScheduleIsWrittenAsGiven) {
    NAPKIN_SKIP_WITHOUT_GPU();
    StepScalars start;
    start.loss_sum = 12.5;
    start.loss_mean = 3.25f;
    start.grad_norm = 0.75f;
    start.update_scale = 0.5f;
    start.skip = 1;
    const StepSchedule schedule{
        .lr = 6e-4f, .bias_correction1 = 0.271f, .bias_correction2 = 0.142625f};
    StepScalars want = start;
    cpu::step_schedule(&want, schedule);
    EXPECT_EQ(want.schedule.lr, schedule.lr);
    DeviceBuffer<StepScalars> got(std::vector<StepScalars>{start});
    cuda::step_schedule(got.get(), schedule, nullptr);
    expect_same_bits(want, got.download()[0]);
}

// One parameter's device copies (test::RawParam's fields).
struct DeviceRaw {
    explicit DeviceRaw(const test::RawParam& p)
        : master(p.master),
          grad(p.grad),
          m(p.m),
          v(p.v),
          weight(p.weight),
          m_absmax(p.m_absmax),
          v_absmax(p.v_absmax) {}
    DeviceBuffer<float> master;
    DeviceBuffer<unsigned char> grad, m, v, weight;
    DeviceBuffer<float> m_absmax, v_absmax;
};

// The update with lr and bias corrections from the gate (a CUDA graph's) against the same values
// as arguments: bit for bit, on the device, for every case of test::schedule_cases().
TEST(StepScalarsCuda, ScheduleFromTheGateGivesTheBitsOfTheArguments) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const test::ScheduleCase& c : test::schedule_cases()) {
        SCOPED_TRACE(c.name());
        const std::vector<test::RawParam> start = test::random_raw_params(rng, c);
        std::vector<std::unique_ptr<DeviceRaw>> args, gated;
        std::vector<OptimizerTensor> ta, tg;
        for (std::size_t i = 0; i < start.size(); ++i) {
            for (auto* side : {&args, &gated}) {
                DeviceRaw& d = *side->emplace_back(std::make_unique<DeviceRaw>(start[i]));
                (side == &args ? ta : tg)
                    .push_back(
                        test::raw_tensor(start[i], i, c,
                                         {d.master.get(), d.grad.get(), d.m.get(), d.v.get(),
                                          d.weight.get(), d.m_absmax.get(), d.v_absmax.get()}));
            }
        }
        DeviceBuffer<StepScalars> args_gate(std::vector<StepScalars>{test::schedule_test_gate()});
        DeviceBuffer<StepScalars> gate(std::vector<StepScalars>{test::schedule_test_gate()});
        const OptimizerHyper h = test::schedule_as_arguments(c.kind, args_gate.get());
        cuda::step_schedule(gate.get(), test::schedule_of(h), nullptr);
        const int count = static_cast<int>(start.size());
        cuda::optimizer_update(h, ta.data(), count, c.state, nullptr);
        cuda::optimizer_update(test::schedule_from_gate(h, gate.get()), tg.data(), count, c.state,
                               nullptr);
        for (std::size_t i = 0; i < start.size(); ++i) {
            SCOPED_TRACE("tensor " + std::to_string(i));
            const DeviceRaw &a = *args[i], &g = *gated[i];
            const std::vector<float> master = a.master.download();
            EXPECT_EQ(master, g.master.download());
            EXPECT_EQ(a.m.download(), g.m.download());
            EXPECT_EQ(a.v.download(), g.v.download());
            EXPECT_EQ(a.weight.download(), g.weight.download());
            EXPECT_EQ(a.m_absmax.download(), g.m_absmax.download());
            EXPECT_EQ(a.v_absmax.download(), g.v_absmax.download());
            if (c.weights != test::ScheduleWeights::bf16_only) {
                EXPECT_NE(master, start[i].master);
            }
        }
    }
}

}  // namespace
}  // namespace napkin
