// The cases of the schedule-from-the-gate tests (Optimizer.* in tests/kernels/optimizer_test.cpp
// on the CPU, StepScalarsCuda.* in tests/kernels_cuda/step_scalars_test.cpp on CUDA): an update
// that reads lr and the bias corrections from the step's scalars (OptimizerHyper::
// schedule_from_gate, kernels/step_scalars.h) must give the bits of one that takes them as
// arguments, for every optimizer with each state dtype it supports (f32, bf16; adamw-8bit's i8),
// every gradient dtype and the three ways a parameter's values are held. Fresh random
// parameters in raw bytes, so that the dtypes vary at run time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/recipe.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin::test {

// How a parameter's values are held: an fp32 master alone, a master and its rounded bf16 copy,
// or (pure bf16) the bf16 weight alone, read widened and written back rounded.
enum class ScheduleWeights { master, master_and_copy, bf16_only };

struct ScheduleCase {
    OptimizerKind kind;
    DType state, grad;
    ScheduleWeights weights;

    std::string name() const {
        const char* w = weights == ScheduleWeights::master            ? "master"
                        : weights == ScheduleWeights::master_and_copy ? "master + bf16 copy"
                                                                      : "bf16 weight only";
        return std::string(enum_name(kOptimizerNames, kind)) + " state " +
               std::string(dtype_name(state)) + " grad " + std::string(dtype_name(grad)) + ", " + w;
    }
};

inline std::vector<ScheduleCase> schedule_cases() {
    std::vector<ScheduleCase> cases;
    for (const auto& [kind, name] : kOptimizerNames) {
        const bool eight_bit = kind == OptimizerKind::adamw_8bit;
        for (DType state : {DType::f32, DType::bf16, DType::i8}) {
            if ((state == DType::i8) != eight_bit) continue;
            for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
                for (ScheduleWeights w : {ScheduleWeights::master, ScheduleWeights::master_and_copy,
                                          ScheduleWeights::bf16_only})
                    cases.push_back({kind, state, grad, w});
            }
        }
    }
    return cases;
}

// One parameter, host bytes in their dtypes (i8 states: codes, with their block absmax).
struct RawParam {
    std::int64_t n = 0;
    DType grad_dtype = DType::f32, weight_dtype = DType::f32;
    std::vector<float> master;
    std::vector<unsigned char> grad, m, v, weight;
    std::vector<float> m_absmax, v_absmax;
};

inline std::vector<unsigned char> raw_values(std::mt19937& rng, DType t, std::int64_t n,
                                             double mean, double stddev, bool positive) {
    const Vec x = random_normal(rng, n, mean, stddev);
    std::vector<unsigned char> out(
        static_cast<std::size_t>(storage_bytes(t, static_cast<std::uint64_t>(n))));
    for (std::int64_t i = 0; i < n; ++i) {
        const auto f = static_cast<float>(positive ? std::fabs(x[static_cast<std::size_t>(i)])
                                                   : x[static_cast<std::size_t>(i)]);
        if (t == DType::bf16) {
            const bf16_t b(f);
            std::memcpy(out.data() + 2 * i, &b, 2);
        } else if (t == DType::f16) {
            const f16_t h(f);
            std::memcpy(out.data() + 2 * i, &h, 2);
        } else {
            std::memcpy(out.data() + 4 * i, &f, 4);
        }
    }
    return out;
}

// Sizes around a vector of 4 and an 8-bit block of 2048, one element included.
inline std::vector<RawParam> random_raw_params(std::mt19937& rng, const ScheduleCase& c) {
    std::vector<RawParam> ps;
    for (std::int64_t n :
         {std::int64_t{1}, std::int64_t{37}, std::int64_t{2049}, std::int64_t{4100}}) {
        RawParam& p = ps.emplace_back();
        p.n = n;
        p.grad_dtype = c.grad;
        p.weight_dtype = c.weights == ScheduleWeights::master ? DType::f32 : DType::bf16;
        const Vec w = random_normal(rng, n);
        p.master.assign(w.begin(), w.end());
        p.grad = raw_values(rng, c.grad, n, 0.0, 0.1, false);
        p.weight = raw_values(rng, p.weight_dtype, n, 0.0, 1.0, false);
        if (c.state == DType::i8) {
            std::uniform_int_distribution<int> m_code(0, 254), v_code(0, 255);
            for (std::int64_t k = 0; k < n; ++k) {
                p.m.push_back(static_cast<unsigned char>(m_code(rng)));
                p.v.push_back(static_cast<unsigned char>(v_code(rng)));
            }
            const std::int64_t blocks = optimizer_8bit_blocks(n);
            const Vec ma = random_normal(rng, blocks, 0.02, 0.005);
            const Vec va = random_normal(rng, blocks, 0.01, 0.001);
            for (std::int64_t b = 0; b < blocks; ++b) {
                p.m_absmax.push_back(
                    static_cast<float>(std::fabs(ma[static_cast<std::size_t>(b)])));
                p.v_absmax.push_back(
                    static_cast<float>(std::fabs(va[static_cast<std::size_t>(b)])));
            }
        } else {  // positive: adagrad and rmsprop keep g^2 in m, adam its second moment in v
            p.m = raw_values(rng, c.state, n, 0.02, 0.005, true);
            p.v = raw_values(rng, c.state, n, 0.01, 0.001, true);
        }
    }
    return ps;
}

// Parameter i's descriptor over the given memory (host or device), with what the case keeps:
// the optimizer's states, the master unless the bf16 weight alone holds the values, the weight
// unless the master is the fp32 weight itself; every other parameter with weight decay.
struct RawPointers {
    float* master;
    void *grad, *m, *v, *weight;
    float *m_absmax, *v_absmax;
};
inline OptimizerTensor raw_tensor(const RawParam& p, std::size_t i, const ScheduleCase& c,
                                  const RawPointers& at) {
    const int states = optimizer_state_count(c.kind);
    OptimizerTensor t;
    t.master = c.weights == ScheduleWeights::bf16_only ? nullptr : at.master;
    t.grad = at.grad;
    t.m = states >= 1 ? at.m : nullptr;
    t.v = states >= 2 ? at.v : nullptr;
    t.weight = c.weights == ScheduleWeights::master ? nullptr : at.weight;
    if (c.state == DType::i8) {
        t.m_absmax = at.m_absmax;
        t.v_absmax = at.v_absmax;
    }
    t.n = p.n;
    t.weight_decay = i % 2 == 0 ? 0.1f : 0.0f;
    t.grad_dtype = p.grad_dtype;
    t.weight_dtype = p.weight_dtype;
    return t;
}

// Update number 3 at lr 3e-3, as arguments, through a gate that scales the gradients by 0.5.
inline OptimizerHyper schedule_as_arguments(OptimizerKind kind, const StepScalars* gate) {
    OptimizerHyper h;
    h.kind = kind;
    h.lr = 3e-3f;
    h.bias_correction1 = 1.0f - std::pow(h.beta1, 3.0f);
    h.bias_correction2 = 1.0f - std::pow(h.beta2, 3.0f);
    h.gate = gate;
    return h;
}

// The same update with lr and the bias corrections read from `gate`, whose schedule must then
// hold the values of `args`; its own are NaN, so a kernel that read them would show.
inline OptimizerHyper schedule_from_gate(OptimizerHyper args, const StepScalars* gate) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    args.lr = nan;
    args.bias_correction1 = nan;
    args.bias_correction2 = nan;
    args.gate = gate;
    args.schedule_from_gate = true;
    return args;
}

inline StepSchedule schedule_of(const OptimizerHyper& h) {
    return StepSchedule{
        .lr = h.lr, .bias_correction1 = h.bias_correction1, .bias_correction2 = h.bias_correction2};
}

// A gate that lets the update run with the gradients scaled by 0.5, its schedule NaN (the
// argument mode must not read it).
inline StepScalars schedule_test_gate() {
    StepScalars s;
    s.update_scale = 0.5f;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    s.schedule = StepSchedule{.lr = nan, .bias_correction1 = nan, .bias_correction2 = nan};
    return s;
}

}  // namespace napkin::test
