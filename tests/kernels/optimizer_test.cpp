// The optimizer kernels (kernels/optimizer.h) against a double-precision reference written out
// from the formulas (PyTorch's definitions: L2 decay folded into the gradient for sgd, momentum,
// adagrad, rmsprop and adam; decoupled for adamw), with fresh random inputs: three steps of
// every optimizer on fp32 and bf16 states (bf16 rounded after each step in the reference too),
// the rounded working copy, the sum of squares for the global norm, and the fp16 loss scale's
// unscale-and-check.
#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/step_scalars.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/optimizer_schedule_util.h"

namespace napkin {
namespace {

using test::Vec;

struct Reference {
    Vec w, m, v;
};

double round_state(double x, bool bf16) {
    return bf16 ? static_cast<double>(to_float(bf16_t(static_cast<float>(x)))) : x;
}

// One step of `kind` in double; g already scaled.
void reference_step(const OptimizerHyper& h, double wd, const Vec& g_in, Reference& r,
                    bool bf16_states) {
    for (std::size_t k = 0; k < r.w.size(); ++k) {
        double g = g_in[k], w = r.w[k];
        double& m = r.m[k];
        double& v = r.v[k];
        switch (h.kind) {
            case OptimizerKind::sgd:
                w -= h.lr * (g + wd * w);
                break;
            case OptimizerKind::momentum:
                g += wd * w;
                m = h.beta1 * m + g;
                w -= h.lr * m;
                m = round_state(m, bf16_states);
                break;
            case OptimizerKind::adagrad:
                g += wd * w;
                m += g * g;
                w -= h.lr * g / (std::sqrt(m) + h.eps);
                m = round_state(m, bf16_states);
                break;
            case OptimizerKind::rmsprop:
                g += wd * w;
                m = h.beta2 * m + (1 - h.beta2) * g * g;
                w -= h.lr * g / (std::sqrt(m) + h.eps);
                m = round_state(m, bf16_states);
                break;
            case OptimizerKind::adam:
            case OptimizerKind::adamw:
            case OptimizerKind::adamw_8bit: {
                const bool decoupled = h.kind != OptimizerKind::adam;
                if (!decoupled) g += wd * w;
                m = h.beta1 * m + (1 - h.beta1) * g;
                v = h.beta2 * v + (1 - h.beta2) * g * g;
                const double step =
                    (m / h.bias_correction1) / (std::sqrt(v / h.bias_correction2) + h.eps);
                w -= h.lr * (step + (decoupled ? wd * w : 0.0));
                m = round_state(m, bf16_states);
                v = round_state(v, bf16_states);
                break;
            }
        }
        r.w[k] = w;
    }
}

int states_of(OptimizerKind k) {
    switch (k) {
        case OptimizerKind::sgd:
            return 0;
        case OptimizerKind::momentum:
        case OptimizerKind::adagrad:
        case OptimizerKind::rmsprop:
            return 1;
        default:
            return 2;
    }
}

template <class S>
void check_kind(OptimizerKind kind, std::int64_t n, unsigned seed) {
    constexpr bool bf16_states = std::is_same_v<S, bf16_t>;
    SCOPED_TRACE(testing::Message() << "seed " << seed << " " << enum_name(kOptimizerNames, kind)
                                    << " n " << n << " states " << (bf16_states ? "bf16" : "f32"));
    std::mt19937 rng(seed);
    const int states = states_of(kind);
    std::vector<float> w(static_cast<std::size_t>(n));
    const Vec w0 = test::random_normal(rng, n);
    for (std::size_t k = 0; k < w.size(); ++k)
        w[k] = static_cast<float>(w0[k]);
    std::vector<S> m(w.size(), from_float<S>(0.0f)), v(w.size(), from_float<S>(0.0f));
    std::vector<bf16_t> working(w.size());  // the rounded copy a mixed-precision run computes with
    Reference ref{test::as_seen(w), Vec(w.size(), 0.0), Vec(w.size(), 0.0)};
    OptimizerHyper h;
    h.kind = kind;
    h.lr = 0.05f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.grad_scale = 0.5f;  // a clip factor or 1 / loss scale
    const float wd = 0.1f;
    for (int t = 1; t <= 3; ++t) {
        h.bias_correction1 = 1.0f - std::pow(h.beta1, static_cast<float>(t));
        h.bias_correction2 = 1.0f - std::pow(h.beta2, static_cast<float>(t));
        const std::vector<float> g = test::to_storage<float>(test::random_normal(rng, n));
        OptimizerTensor ts;
        ts.master = w.data();
        ts.grad = const_cast<float*>(g.data());
        ts.m = states >= 1 ? m.data() : nullptr;
        ts.v = states >= 2 ? v.data() : nullptr;
        ts.weight = working.data();
        ts.weight_dtype = DType::bf16;
        ts.n = n;
        ts.weight_decay = wd;
        const std::vector<float> before = w;
        cpu::optimizer_update(h, &ts, 1, bf16_states ? DType::bf16 : DType::f32);
        Vec scaled(g.size());
        for (std::size_t k = 0; k < g.size(); ++k)
            scaled[k] = static_cast<double>(g[k]) * h.grad_scale;
        // The reference starts each step from the kernel's own values (fp32 w, stored states), so
        // errors do not compound and the comparison is of one step's arithmetic.
        ref.w = test::as_seen(before);
        const Vec want_before = ref.w, m_before = ref.m, v_before = ref.v;
        // The kernel forms the gradient it steps with, g s + wd w, in fp32: off by up to
        // 2^-23 (|g s| + wd |w|), however small the sum. Where the sum nearly cancels and eps
        // is a visible part of the denominator (rmsprop's first step at |g| ~ 1e-6: sqrt(m) ~
        // eps), that rounding moves the update by more than the fixed tolerance (seed
        // 1176217076: 1e-4 relative). The reference stepped from g +- that bound gives each
        // element's slack.
        Vec lo(scaled), hi(scaled);
        for (std::size_t k = 0; k < g.size(); ++k) {
            const double bound = 0x1p-23 * (std::fabs(scaled[k]) + wd * std::fabs(ref.w[k]));
            lo[k] -= bound;
            hi[k] += bound;
        }
        Reference ref_lo = ref, ref_hi = ref;
        reference_step(h, wd, lo, ref_lo, bf16_states);
        reference_step(h, wd, hi, ref_hi, bf16_states);
        reference_step(h, wd, scaled, ref, bf16_states);
        // The update itself (w - w_before), not w: an update of 1e-2 on a weight of 1 would hide
        // a relative error of 1e-3 in a tolerance on w.
        Vec got_delta(w.size()), want_delta(w.size()), slack(w.size());
        for (std::size_t k = 0; k < w.size(); ++k) {
            got_delta[k] = static_cast<double>(w[k]) - static_cast<double>(before[k]);
            want_delta[k] = ref.w[k] - want_before[k];
            slack[k] =
                std::max(std::fabs(ref_lo.w[k] - ref.w[k]), std::fabs(ref_hi.w[k] - ref.w[k]));
        }
        // fp32 arithmetic on values of ~1, differences of ~lr: a few ulps of 1 absolute.
        test::expect_close("update at step " + std::to_string(t), got_delta, want_delta,
                           {5e-7, 1e-4}, &slack);
        // The states take the same slack from the gradient's rounding, and m one more term:
        // momentum's and Adam's m = beta1 m + g' cancels where g' is close to -beta1 m, and the
        // fp32 product beta1 m is off by up to 2^-24 |m| however small the sum (seed 2999960454:
        // momentum's m of 8e-4 off by 1.1e-7, over 1e-7 + 1e-5 |m|).
        const auto state_slack = [&](const Vec& before_state, const Vec& lo_state,
                                     const Vec& hi_state, const Vec& want_state) {
            Vec out(want_state.size());
            for (std::size_t k = 0; k < out.size(); ++k)
                out[k] = std::max(std::fabs(lo_state[k] - want_state[k]),
                                  std::fabs(hi_state[k] - want_state[k])) +
                         0x1p-23 * std::fabs(before_state[k]);
            return out;
        };
        if (states >= 1) {
            const Vec m_slack = state_slack(m_before, ref_lo.m, ref_hi.m, ref.m);
            test::expect_close(
                "m at step " + std::to_string(t), test::as_seen(m), ref.m,
                bf16_states ? test::Tolerance{1e-6, 1e-2} : test::Tolerance{1e-7, 1e-5}, &m_slack);
            ref.m = test::as_seen(m);
        }
        if (states >= 2) {
            const Vec v_slack = state_slack(v_before, ref_lo.v, ref_hi.v, ref.v);
            test::expect_close(
                "v at step " + std::to_string(t), test::as_seen(v), ref.v,
                bf16_states ? test::Tolerance{1e-7, 1e-2} : test::Tolerance{1e-9, 1e-5}, &v_slack);
            ref.v = test::as_seen(v);
        }
        for (std::size_t k = 0; k < w.size(); ++k) {
            ASSERT_EQ(working[k].bits, bf16_t(w[k]).bits)
                << "the working copy is not bf16(master) at " << k;
        }
    }
}

TEST(Optimizer, EveryKindMatchesTheDoubleReference) {
    const unsigned seed = test::fresh_seed();
    for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::momentum, OptimizerKind::adagrad,
                               OptimizerKind::rmsprop, OptimizerKind::adam, OptimizerKind::adamw}) {
        for (std::int64_t n : {1, 33, 40001}) {  // 40001: the threaded path
            check_kind<float>(kind, n, seed);
            check_kind<bf16_t>(kind, n, seed);
        }
    }
}

// Pure bf16 has no master: the kernel reads the bf16 weight widened and rounds its update back,
// bit for bit what the update of an fp32 copy followed by one rounding gives.
TEST(Optimizer, WeightsWithoutAMasterEqualAnUpdatedFp32CopyRoundedOnce) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const std::int64_t n = 40001;
    for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::momentum, OptimizerKind::sgd}) {
        const int states = optimizer_state_count(kind);
        std::vector<bf16_t> w = test::to_storage<bf16_t>(test::random_normal(rng, n));
        const std::vector<bf16_t> g = test::to_storage<bf16_t>(test::random_normal(rng, n));
        std::vector<bf16_t> m(static_cast<std::size_t>(n), bf16_t(0.01f)), v(m);
        std::vector<float> copy(w.size());
        for (std::size_t k = 0; k < w.size(); ++k)
            copy[k] = to_float(w[k]);
        std::vector<bf16_t> m2(m), v2(v), rounded(w.size());
        OptimizerHyper h;
        h.kind = kind;
        h.lr = 0.05f;
        h.bias_correction1 = 1.0f - h.beta1;
        h.bias_correction2 = 1.0f - h.beta2;
        OptimizerTensor a;  // no master: the weight itself
        a.grad = const_cast<bf16_t*>(g.data());
        a.grad_dtype = DType::bf16;
        a.m = states >= 1 ? m.data() : nullptr;
        a.v = states >= 2 ? v.data() : nullptr;
        a.weight = w.data();
        a.weight_dtype = DType::bf16;
        a.n = n;
        a.weight_decay = 0.1f;
        OptimizerTensor b = a;  // an fp32 copy updated, then rounded into `rounded`
        b.master = copy.data();
        b.weight = rounded.data();
        b.m = states >= 1 ? m2.data() : nullptr;
        b.v = states >= 2 ? v2.data() : nullptr;
        cpu::optimizer_update(h, &a, 1, DType::bf16);
        cpu::optimizer_update(h, &b, 1, DType::bf16);
        for (std::size_t k = 0; k < w.size(); ++k) {
            ASSERT_EQ(w[k].bits, rounded[k].bits)
                << enum_name(kOptimizerNames, kind) << " at " << k;
        }
    }
    OptimizerTensor none;  // neither a master nor a weight: refused
    none.n = 1;
    OptimizerHyper h;
    EXPECT_THROW(cpu::optimizer_update(h, &none, 1, DType::f32), std::exception);
}

TEST(Optimizer, SumOfSquaresOverTensorsOfEveryGradientType) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const std::vector<float> a = test::to_storage<float>(test::random_normal(rng, 70001));
    const std::vector<bf16_t> b = test::to_storage<bf16_t>(test::random_normal(rng, 513));
    const std::vector<f16_t> c = test::to_storage<f16_t>(test::random_normal(rng, 7));
    OptimizerTensor ts[3];
    ts[0].grad = const_cast<float*>(a.data());
    ts[0].n = static_cast<std::int64_t>(a.size());
    ts[1].grad = const_cast<bf16_t*>(b.data());
    ts[1].n = static_cast<std::int64_t>(b.size());
    ts[1].grad_dtype = DType::bf16;
    ts[2].grad = const_cast<f16_t*>(c.data());
    ts[2].n = static_cast<std::int64_t>(c.size());
    ts[2].grad_dtype = DType::f16;
    double want = 0;
    for (double x : test::as_seen(a))
        want += x * x;
    for (double x : test::as_seen(b))
        want += x * x;
    for (double x : test::as_seen(c))
        want += x * x;
    const double got = cpu::grad_sum_squares(ts, 3);
    EXPECT_NEAR(got, want, 1e-12 * want);
    EXPECT_EQ(cpu::grad_sum_squares(ts, 3), got) << "the fixed-block sum is not deterministic";
}

TEST(Optimizer, UnscaleMultipliesInPlaceAndFlagsOverflow) {
    std::vector<f16_t> g = {f16_t(1024.0f), f16_t(-2.0f), f16_t(0.5f)};
    OptimizerTensor t;
    t.grad = g.data();
    t.grad_dtype = DType::f16;
    t.n = 3;
    EXPECT_FALSE(cpu::grad_unscale_check(&t, 1, 1.0f / 1024.0f));
    EXPECT_EQ(to_float(g[0]), 1.0f);
    EXPECT_EQ(to_float(g[1]), -2.0f / 1024.0f);
    g[2] = f16_t(std::numeric_limits<float>::infinity());
    EXPECT_TRUE(cpu::grad_unscale_check(&t, 1, 1.0f));
    g[2] = f16_t(std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(cpu::grad_unscale_check(&t, 1, 1.0f));
}

// The update reads lr and the bias corrections from the gate's schedule (a CUDA graph's update,
// kernels/step_scalars.h) or takes them as arguments: the same bits, for every optimizer, state
// dtype, gradient dtype and way of holding the values (tests/kernels/optimizer_schedule_util.h).
TEST(Optimizer, ScheduleFromTheGateGivesTheBitsOfTheArguments) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const test::ScheduleCase& c : test::schedule_cases()) {
        SCOPED_TRACE(c.name());
        const std::vector<test::RawParam> start = test::random_raw_params(rng, c);
        std::vector<test::RawParam> args = start, gated = start;
        const auto tensors = [&](std::vector<test::RawParam>& ps) {
            std::vector<OptimizerTensor> ts;
            for (std::size_t i = 0; i < ps.size(); ++i) {
                test::RawParam& p = ps[i];
                ts.push_back(
                    test::raw_tensor(p, i, c,
                                     {p.master.data(), p.grad.data(), p.m.data(), p.v.data(),
                                      p.weight.data(), p.m_absmax.data(), p.v_absmax.data()}));
            }
            return ts;
        };
        const StepScalars args_gate = test::schedule_test_gate();
        StepScalars gate = test::schedule_test_gate();
        const OptimizerHyper h = test::schedule_as_arguments(c.kind, &args_gate);
        cpu::step_schedule(&gate, test::schedule_of(h));
        const auto ta = tensors(args), tg = tensors(gated);
        cpu::optimizer_update(h, ta.data(), static_cast<int>(ta.size()), c.state);
        cpu::optimizer_update(test::schedule_from_gate(h, &gate), tg.data(),
                              static_cast<int>(tg.size()), c.state);
        for (std::size_t i = 0; i < start.size(); ++i) {
            SCOPED_TRACE("tensor " + std::to_string(i));
            const test::RawParam &a = args[i], &g = gated[i];
            EXPECT_EQ(a.master, g.master);
            EXPECT_EQ(a.m, g.m);
            EXPECT_EQ(a.v, g.v);
            EXPECT_EQ(a.weight, g.weight);
            EXPECT_EQ(a.m_absmax, g.m_absmax);
            EXPECT_EQ(a.v_absmax, g.v_absmax);
            // The update ran (NaN read from the arguments would have spread into it, and made
            // the two differ).
            if (c.weights != test::ScheduleWeights::bf16_only) {
                EXPECT_NE(a.master, start[i].master);
            }
        }
    }
}

// Without a gate there is no schedule to read: refused, not read through a null pointer.
TEST(Optimizer, ScheduleFromTheGateNeedsAGate) {
    float w = 1.0f, g = 0.5f;
    OptimizerTensor t{.master = &w, .grad = &g, .n = 1};
    OptimizerHyper h{.kind = OptimizerKind::sgd, .lr = 0.1f};
    h.schedule_from_gate = true;
    EXPECT_THROW(cpu::optimizer_update(h, &t, 1, DType::f32), std::exception);
}

}  // namespace
}  // namespace napkin
