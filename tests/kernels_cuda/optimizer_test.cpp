// Optimizer updates, the global norm's sum of squares and the loss-scale unscale + inf/NaN
// check: the CUDA twins against the CPU's (kernels/cpu/optimizer.cpp, the engine's arithmetic)
// for every optimizer, fp32 and bf16 states, fp32/bf16/fp16 gradients, with and without a
// rounded working copy, over more tensors than one launch carries (odd sizes included).
#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

// One parameter's host and device copies, all in raw bytes so the dtypes can vary at run time.
struct Param {
    std::int64_t n = 0;
    DType grad_dtype = DType::f32, weight_dtype = DType::f32;
    std::vector<float> master;
    std::vector<unsigned char> grad, m, v, weight;  // host, in their dtypes
    std::unique_ptr<DeviceBuffer<float>> master_d;
    std::unique_ptr<DeviceBuffer<unsigned char>> grad_d, m_d, v_d, weight_d;
};

std::size_t bytes(DType t, std::int64_t n) {
    return static_cast<std::size_t>(storage_bytes(t, static_cast<std::uint64_t>(n)));
}

// Normal values in dtype t; with `positive`, their magnitudes (a state that holds g^2 must not
// go negative: a normal with mean 4 sigma above zero still does, a few times in 70001 draws).
std::vector<unsigned char> random_bytes(std::mt19937& rng, DType t, std::int64_t n, double mean,
                                        double stddev, bool positive = false) {
    const Vec v = random_normal(rng, n, mean, stddev);
    std::vector<unsigned char> out(bytes(t, n));
    for (std::int64_t i = 0; i < n; ++i) {
        double d = v[static_cast<std::size_t>(i)];
        if (positive) d = std::fabs(d);
        const float f = static_cast<float>(d);
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

Vec values(DType t, const std::vector<unsigned char>& raw) {
    const std::size_t n = raw.size() / (t == DType::f32 ? 4 : 2);
    Vec out(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (t == DType::bf16) {
            bf16_t b;
            std::memcpy(&b, raw.data() + 2 * i, 2);
            out[i] = to_float(b);
        } else if (t == DType::f16) {
            f16_t h;
            std::memcpy(&h, raw.data() + 2 * i, 2);
            out[i] = to_float(h);
        } else {
            float f;
            std::memcpy(&f, raw.data() + 4 * i, 4);
            out[i] = f;
        }
    }
    return out;
}

Tolerance tolerance_for(DType t) {
    if (t == DType::bf16) return tolerance<bf16_t>();
    if (t == DType::f16) return tolerance<f16_t>();
    return Tolerance{1e-5, 1e-5};
}

std::vector<Param> make_params(std::mt19937& rng, int count, DType grad_dtype, DType state_dtype,
                               DType weight_dtype) {
    std::vector<Param> ps(static_cast<std::size_t>(count));
    const std::int64_t sizes[] = {1, 37, 5000, 3, 1024, 70001};
    for (int i = 0; i < count; ++i) {
        Param& p = ps[static_cast<std::size_t>(i)];
        p.n = sizes[i % 6];
        p.grad_dtype = grad_dtype;
        p.weight_dtype = weight_dtype;
        const Vec w = random_normal(rng, p.n);
        p.master.assign(w.begin(), w.end());
        p.grad = random_bytes(rng, grad_dtype, p.n, 0.0, 0.1);
        // Positive: adagrad and rmsprop keep g^2 in m, adam its second moment in v.
        p.m = random_bytes(rng, state_dtype, p.n, 0.02, 0.005, true);
        p.v = random_bytes(rng, state_dtype, p.n, 0.01, 0.001, true);
        p.weight.assign(bytes(weight_dtype, p.n), 0xff);  // poisoned: every element is written
        p.master_d = std::make_unique<DeviceBuffer<float>>(p.master);
        p.grad_d = std::make_unique<DeviceBuffer<unsigned char>>(p.grad);
        p.m_d = std::make_unique<DeviceBuffer<unsigned char>>(p.m);
        p.v_d = std::make_unique<DeviceBuffer<unsigned char>>(p.v);
        p.weight_d = std::make_unique<DeviceBuffer<unsigned char>>(p.weight);
    }
    return ps;
}

std::vector<OptimizerTensor> host_tensors(std::vector<Param>& ps, int states, bool copy) {
    std::vector<OptimizerTensor> ts;
    for (std::size_t i = 0; i < ps.size(); ++i) {
        Param& p = ps[i];
        ts.push_back({p.master.data(), p.grad.data(), states >= 1 ? p.m.data() : nullptr,
                      states >= 2 ? p.v.data() : nullptr, copy ? p.weight.data() : nullptr, p.n,
                      i % 2 == 0 ? 0.1f : 0.0f, p.grad_dtype, p.weight_dtype});
    }
    return ts;
}

std::vector<OptimizerTensor> device_tensors(std::vector<Param>& ps, int states, bool copy) {
    std::vector<OptimizerTensor> ts;
    for (std::size_t i = 0; i < ps.size(); ++i) {
        Param& p = ps[i];
        ts.push_back({p.master_d->get(), p.grad_d->get(), states >= 1 ? p.m_d->get() : nullptr,
                      states >= 2 ? p.v_d->get() : nullptr, copy ? p.weight_d->get() : nullptr, p.n,
                      i % 2 == 0 ? 0.1f : 0.0f, p.grad_dtype, p.weight_dtype});
    }
    return ts;
}

TEST(OptimizerCuda, UpdatesMatchCpuForEveryOptimizerAndDtype) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& [kind, name] : kOptimizerNames) {
        const int states = optimizer_state_count(kind);
        for (DType state : {DType::f32, DType::bf16}) {
            for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
                for (bool copy : {false, true}) {
                    const DType weight = copy ? DType::bf16 : DType::f32;
                    SCOPED_TRACE(std::string(name) + " state " + std::string(dtype_name(state)) +
                                 " grad " + std::string(dtype_name(grad)) +
                                 (copy ? " with bf16 copy" : ""));
                    const int count = 35;  // two launches: 32 + 3
                    std::vector<Param> ps = make_params(rng, count, grad, state, weight);
                    OptimizerHyper h;
                    h.kind = kind;
                    h.lr = 1e-2f;
                    h.bias_correction1 = 1.0f - std::pow(h.beta1, 3.0f);
                    h.bias_correction2 = 1.0f - std::pow(h.beta2, 3.0f);
                    h.grad_scale = 0.5f;
                    const auto dts = device_tensors(ps, states, copy);
                    const auto hts = host_tensors(ps, states, copy);
                    cuda::optimizer_update(h, dts.data(), count, state, nullptr);
                    cpu::optimizer_update(h, hts.data(), count, state);
                    for (int i = 0; i < count; ++i) {
                        Param& p = ps[static_cast<std::size_t>(i)];
                        SCOPED_TRACE("tensor " + std::to_string(i) + " n " + std::to_string(p.n));
                        expect_match("master", p.master_d->download(), p.master,
                                     Tolerance{1e-5, 1e-5});
                        if (states >= 1)
                            expect_close("m", values(state, p.m_d->download()), values(state, p.m),
                                         tolerance_for(state));
                        if (states >= 2)
                            expect_close("v", values(state, p.v_d->download()), values(state, p.v),
                                         tolerance_for(state));
                        if (copy)
                            expect_close("weight", values(weight, p.weight_d->download()),
                                         values(weight, p.weight), tolerance_for(weight));
                    }
                }
            }
        }
    }
}

// Pure bf16: no master; the bf16 weight itself is read widened and written back rounded.
TEST(OptimizerCuda, WeightsWithoutAMasterMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd, OptimizerKind::rmsprop}) {
        const int states = optimizer_state_count(kind);
        SCOPED_TRACE(std::string(enum_name(kOptimizerNames, kind)));
        const int count = 35;
        std::vector<Param> ps = make_params(rng, count, DType::bf16, DType::bf16, DType::bf16);
        for (Param& p : ps) {
            p.weight = random_bytes(rng, DType::bf16, p.n, 0.0, 1.0);
            p.weight_d->upload(p.weight);
        }
        OptimizerHyper h;
        h.kind = kind;
        h.lr = 1e-2f;
        h.bias_correction1 = 1.0f - std::pow(h.beta1, 2.0f);
        h.bias_correction2 = 1.0f - std::pow(h.beta2, 2.0f);
        auto dts = device_tensors(ps, states, true);
        auto hts = host_tensors(ps, states, true);
        for (std::size_t i = 0; i < ps.size(); ++i) {
            dts[i].master = nullptr;
            hts[i].master = nullptr;
        }
        cuda::optimizer_update(h, dts.data(), count, DType::bf16, nullptr);
        cpu::optimizer_update(h, hts.data(), count, DType::bf16);
        for (int i = 0; i < count; ++i) {
            Param& p = ps[static_cast<std::size_t>(i)];
            SCOPED_TRACE("tensor " + std::to_string(i) + " n " + std::to_string(p.n));
            // The same fp32 arithmetic rounded once to bf16 on both sides: equal but for a
            // last-place difference of the device's fused multiply-adds.
            expect_close("weight", values(DType::bf16, p.weight_d->download()),
                         values(DType::bf16, p.weight), tolerance_for(DType::bf16));
            if (states >= 1)
                expect_close("m", values(DType::bf16, p.m_d->download()), values(DType::bf16, p.m),
                             tolerance_for(DType::bf16));
        }
    }
    // Neither a master nor a weight: refused, not a null dereference on the device.
    std::vector<Param> ps = make_params(rng, 1, DType::f32, DType::f32, DType::f32);
    auto dts = device_tensors(ps, 0, false);
    dts[0].master = nullptr;
    OptimizerHyper h;
    h.kind = OptimizerKind::sgd;
    EXPECT_THROW(cuda::optimizer_update(h, dts.data(), 1, DType::f32, nullptr), std::exception);
}

TEST(OptimizerCuda, GradSumSquaresAndUnscaleCheckMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(std::string(dtype_name(grad)));
        const int count = 40;
        std::vector<Param> ps = make_params(rng, count, grad, DType::f32, DType::f32);
        auto dts = device_tensors(ps, 0, false);
        auto hts = host_tensors(ps, 0, false);
        DeviceBuffer<unsigned char> scratch(cuda::grad_sum_squares_scratch_bytes(count));
        DeviceBuffer<double> sumsq(1);
        sumsq.poison();
        cuda::grad_sum_squares(sumsq.get(), dts.data(), count, scratch.get(), nullptr);
        const double want = cpu::grad_sum_squares(hts.data(), count);
        EXPECT_NEAR(sumsq.download()[0], want, 1e-10 * want);  // fp64 sums in another order
        // Twice: deterministic to the bit.
        const double first = sumsq.download()[0];
        cuda::grad_sum_squares(sumsq.get(), dts.data(), count, scratch.get(), nullptr);
        EXPECT_EQ(sumsq.download()[0], first);

        DeviceBuffer<int> found(std::vector<int>{0});
        cuda::grad_unscale_check(found.get(), dts.data(), count, 0.25f, nullptr);
        EXPECT_FALSE(cpu::grad_unscale_check(hts.data(), count, 0.25f));
        EXPECT_EQ(found.download()[0], 0);
        for (int i = 0; i < count; ++i) {
            Param& p = ps[static_cast<std::size_t>(i)];
            expect_close("unscaled grad", values(grad, p.grad_d->download()), values(grad, p.grad),
                         tolerance_for(grad));
        }
        // One inf in the 39th tensor (second launch) is found.
        Param& p = ps[38];
        std::vector<unsigned char> g = p.grad_d->download();
        const float inf = std::numeric_limits<float>::infinity();
        if (grad == DType::f32)
            std::memcpy(g.data() + 4 * (p.n - 1), &inf, 4);
        else if (grad == DType::bf16) {
            const bf16_t b(inf);
            std::memcpy(g.data() + 2 * (p.n - 1), &b, 2);
        } else {
            const f16_t h(inf);
            std::memcpy(g.data() + 2 * (p.n - 1), &h, 2);
        }
        p.grad_d->upload(g);
        cuda::grad_unscale_check(found.get(), dts.data(), count, 1.0f, nullptr);
        EXPECT_EQ(found.download()[0], 1);
        cuda::grad_sum_squares(sumsq.get(), dts.data(), count, scratch.get(), nullptr);
        EXPECT_FALSE(std::isfinite(sumsq.download()[0]));
    }
}

}  // namespace
}  // namespace napkin
