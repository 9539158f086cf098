// Optimizer updates, the global norm's sum of squares and the loss-scale unscale + inf/NaN
// check: the CUDA twins against the CPU's (kernels/cpu/optimizer.cpp, the engine's arithmetic)
// for every optimizer, fp32 and bf16 states, fp32/bf16/fp16 gradients, with and without a
// rounded working copy, over more tensors than one launch carries (odd sizes included); and
// adamw-8bit's 8-bit states (codes and block absmax) against the CPU's, step by step.
#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/optimizer_rule.h"

#include "tests/kernels/optimizer_schedule_util.h"
#include "tests/kernels_cuda/cuda_test_util.h"

namespace napkin {
namespace {

using namespace test;

// One parameter's host and device copies, all in raw bytes so the dtypes can vary at run time.
struct Param {
    std::int64_t n = 0;
    DType grad_dtype = DType::f32, weight_dtype = DType::f32;
    std::vector<float> master;
    std::vector<unsigned char> grad, m, v, weight;  // host, in their dtypes (i8: codes)
    std::vector<float> m_absmax, v_absmax;          // 8-bit states only
    std::unique_ptr<DeviceBuffer<float>> master_d, m_absmax_d, v_absmax_d;
    std::unique_ptr<DeviceBuffer<unsigned char>> grad_d, m_d, v_d, weight_d;
};

std::size_t bytes(DType t, std::int64_t n) {
    return static_cast<std::size_t>(storage_bytes(t, static_cast<std::uint64_t>(n)));
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
        p.grad = raw_values(rng, grad_dtype, p.n, 0.0, 0.1, false);
        // Positive: adagrad and rmsprop keep g^2 in m, adam its second moment in v.
        p.m = raw_values(rng, state_dtype, p.n, 0.02, 0.005, true);
        p.v = raw_values(rng, state_dtype, p.n, 0.01, 0.001, true);
        p.weight.assign(bytes(weight_dtype, p.n), 0xff);  // poisoned: every element is written
        // The second six of every twelve one element off the 16-byte alignment of the update's
        // vectors: its scalar path.
        const std::size_t off = i % 12 < 6 ? 0 : 1;
        p.master_d = std::make_unique<DeviceBuffer<float>>(p.master, off);
        p.grad_d = std::make_unique<DeviceBuffer<unsigned char>>(p.grad, bytes(grad_dtype, off));
        p.m_d = std::make_unique<DeviceBuffer<unsigned char>>(p.m, bytes(state_dtype, off));
        p.v_d = std::make_unique<DeviceBuffer<unsigned char>>(p.v, bytes(state_dtype, off));
        p.weight_d =
            std::make_unique<DeviceBuffer<unsigned char>>(p.weight, bytes(weight_dtype, off));
    }
    return ps;
}

// The descriptor of parameter i (every other one with weight decay); the absmax where kept.
OptimizerTensor tensor_of(const Param& p, std::size_t i, float* master, void* grad, void* m,
                          void* v, void* weight, float* m_absmax, float* v_absmax) {
    OptimizerTensor t;
    t.master = master;
    t.grad = grad;
    t.m = m;
    t.v = v;
    t.weight = weight;
    t.m_absmax = m_absmax;
    t.v_absmax = v_absmax;
    t.n = p.n;
    t.weight_decay = i % 2 == 0 ? 0.1f : 0.0f;
    t.grad_dtype = p.grad_dtype;
    t.weight_dtype = p.weight_dtype;
    return t;
}

std::vector<OptimizerTensor> host_tensors(std::vector<Param>& ps, int states, bool copy) {
    std::vector<OptimizerTensor> ts;
    for (std::size_t i = 0; i < ps.size(); ++i) {
        Param& p = ps[i];
        const bool absmax = !p.m_absmax.empty();
        ts.push_back(
            tensor_of(p, i, p.master.data(), p.grad.data(), states >= 1 ? p.m.data() : nullptr,
                      states >= 2 ? p.v.data() : nullptr, copy ? p.weight.data() : nullptr,
                      absmax ? p.m_absmax.data() : nullptr, absmax ? p.v_absmax.data() : nullptr));
    }
    return ts;
}

std::vector<OptimizerTensor> device_tensors(std::vector<Param>& ps, int states, bool copy) {
    std::vector<OptimizerTensor> ts;
    for (std::size_t i = 0; i < ps.size(); ++i) {
        Param& p = ps[i];
        const bool absmax = p.m_absmax_d != nullptr;
        ts.push_back(tensor_of(
            p, i, p.master_d->get(), p.grad_d->get(), states >= 1 ? p.m_d->get() : nullptr,
            states >= 2 ? p.v_d->get() : nullptr, copy ? p.weight_d->get() : nullptr,
            absmax ? p.m_absmax_d->get() : nullptr, absmax ? p.v_absmax_d->get() : nullptr));
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
            p.weight = raw_values(rng, DType::bf16, p.n, 0.0, 1.0, false);
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

// The norm splits each tensor over blocks by its size (16 elements a thread at least, at most
// kGradNormBlocks blocks): one block, two, a block's share and one more, past the cap, in one
// launch beside each other. The scratch is poisoned: every partial sum read was written or zeroed.
TEST(OptimizerCuda, GradSumSquaresSplitsEachTensorByItsSize) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::int64_t sizes[] = {
        1, 4096, 4097, 8191, cuda::kGradNormBlocks * std::int64_t{4096} + 5, 300};
    constexpr int count = static_cast<int>(std::size(sizes));
    std::vector<std::vector<unsigned char>> grads;
    std::vector<std::unique_ptr<DeviceBuffer<unsigned char>>> grads_d;
    std::vector<OptimizerTensor> hts(count), dts(count);
    for (int i = 0; i < count; ++i) {
        grads.push_back(raw_values(rng, DType::f32, sizes[i], 0.0, 0.1, false));
        grads_d.push_back(std::make_unique<DeviceBuffer<unsigned char>>(grads.back()));
        hts[static_cast<std::size_t>(i)].grad = grads.back().data();
        dts[static_cast<std::size_t>(i)].grad = grads_d.back()->get();
        hts[static_cast<std::size_t>(i)].n = dts[static_cast<std::size_t>(i)].n = sizes[i];
    }
    DeviceBuffer<unsigned char> scratch(cuda::grad_sum_squares_scratch_bytes(count));
    scratch.poison();
    DeviceBuffer<double> sumsq(1);
    sumsq.poison();
    cuda::grad_sum_squares(sumsq.get(), dts.data(), count, scratch.get(), nullptr);
    const double want = cpu::grad_sum_squares(hts.data(), count);
    const double first = sumsq.download()[0];
    EXPECT_NEAR(first, want, 1e-10 * want);
    scratch.poison();
    cuda::grad_sum_squares(sumsq.get(), dts.data(), count, scratch.get(), nullptr);
    EXPECT_EQ(sumsq.download()[0], first);
}

// ---- 8-bit states (adamw-8bit): codes into the dynamic-tree maps, an fp32 absmax per block ----

constexpr auto kQuantBlock = static_cast<std::int64_t>(kOptimizer8bitBlock);

OptimizerHyper adamw_8bit(int step, float beta1 = 0.9f, float beta2 = 0.95f) {
    OptimizerHyper h;
    h.kind = OptimizerKind::adamw_8bit;
    h.lr = 1e-2f;
    h.beta1 = beta1;
    h.beta2 = beta2;
    h.bias_correction1 = 1.0f - std::pow(beta1, static_cast<float>(step));
    h.bias_correction2 = 1.0f - std::pow(beta2, static_cast<float>(step));
    h.grad_scale = 0.5f;
    return h;
}

// How a parameter's values are held: an fp32 master alone, a master and its rounded bf16 copy,
// or (pure bf16) the bf16 weight alone, read widened and written back rounded.
enum class Weights { master, master_and_copy, bf16_only };

const char* weights_name(Weights w) {
    return w == Weights::master            ? "master"
           : w == Weights::master_and_copy ? "master + bf16 copy"
                                           : "bf16 weight only";
}

constexpr int kZeroTensor = 4;  // of every 7: zero states and zero gradients

// Parameters with 8-bit states, sizes around the 2048-element block (one element, a block short
// of one, a block, one past, several with a short last one). Random codes (m's among its 255) and
// block absmax, except tensor kZeroTensor of every 7: the engine's zero states and zero
// gradients, so its new absmax is 0 and its codes the maps' zeros.
std::vector<Param> make_params_8bit(std::mt19937& rng, int count, DType grad_dtype, Weights weights,
                                    const std::vector<std::int64_t>& sizes = {1, 2047, 2048, 2049,
                                                                              5000, 37, 6145}) {
    std::vector<Param> ps(static_cast<std::size_t>(count));
    std::uniform_int_distribution<int> m_code(0, 254), v_code(0, 255);
    for (int i = 0; i < count; ++i) {
        Param& p = ps[static_cast<std::size_t>(i)];
        const bool zero = i % 7 == kZeroTensor;
        p.n = sizes[static_cast<std::size_t>(i) % sizes.size()];
        p.grad_dtype = grad_dtype;
        p.weight_dtype = weights == Weights::master ? DType::f32 : DType::bf16;
        const Vec w = random_normal(rng, p.n);
        p.master.assign(w.begin(), w.end());
        p.grad = zero ? std::vector<unsigned char>(bytes(grad_dtype, p.n), 0)
                      : raw_values(rng, grad_dtype, p.n, 0.0, 0.1, false);
        p.m.assign(static_cast<std::size_t>(p.n), 0);
        p.v = p.m;
        const auto blocks = static_cast<std::size_t>(optimizer_8bit_blocks(p.n));
        p.m_absmax.assign(blocks, 0.0f);
        p.v_absmax = p.m_absmax;
        if (!zero) {
            for (std::int64_t k = 0; k < p.n; ++k) {
                p.m[static_cast<std::size_t>(k)] = static_cast<unsigned char>(m_code(rng));
                p.v[static_cast<std::size_t>(k)] = static_cast<unsigned char>(v_code(rng));
            }
            const Vec ma = random_normal(rng, static_cast<std::int64_t>(blocks), 0.02, 0.005);
            const Vec va = random_normal(rng, static_cast<std::int64_t>(blocks), 0.01, 0.001);
            for (std::size_t b = 0; b < blocks; ++b) {
                p.m_absmax[b] = static_cast<float>(std::fabs(ma[b]));
                p.v_absmax[b] = static_cast<float>(std::fabs(va[b]));
            }
        }
        p.weight = weights == Weights::bf16_only
                       ? raw_values(rng, DType::bf16, p.n, 0.0, 1.0, false)
                       : std::vector<unsigned char>(bytes(p.weight_dtype, p.n), 0xff);
        p.master_d = std::make_unique<DeviceBuffer<float>>(p.master);
        p.grad_d = std::make_unique<DeviceBuffer<unsigned char>>(p.grad);
        p.m_d = std::make_unique<DeviceBuffer<unsigned char>>(p.m);
        p.v_d = std::make_unique<DeviceBuffer<unsigned char>>(p.v);
        p.weight_d = std::make_unique<DeviceBuffer<unsigned char>>(p.weight);
        p.m_absmax_d = std::make_unique<DeviceBuffer<float>>(p.m_absmax);
        p.v_absmax_d = std::make_unique<DeviceBuffer<float>>(p.v_absmax);
    }
    return ps;
}

// The tensors of an 8-bit call, host or device: the master only where the weights have one, the
// weight where it is written (a copy, or the bf16 weight itself).
std::vector<OptimizerTensor> tensors_8bit(std::vector<Param>& ps, Weights weights, bool device) {
    std::vector<OptimizerTensor> ts = device ? device_tensors(ps, 2, weights != Weights::master)
                                             : host_tensors(ps, 2, weights != Weights::master);
    if (weights == Weights::bf16_only) {
        for (OptimizerTensor& t : ts)
            t.master = nullptr;
    }
    return ts;
}

// The CPU's 8-bit step of one tensor replayed on fp32 states (its dequantized m and v, through
// the f32 path of the same kernel): the moments update_8bit quantizes, and per element a bound
// on how far a device's may lie from them. The rule is the same statement on both sides, but
// nvcc may fuse its multiply-adds: a few units in the last place of the operands (|m_old|, |g|
// and |m| itself), not of the result, since m = b1 m_old + (1 - b1) g may cancel.
struct Unquantized {
    std::vector<float> m, v;          // (n) new moments before quantization
    std::vector<float> m_err, v_err;  // (n) bound on |device's - m|, |device's - v|
};

Unquantized unquantized_step(const OptimizerHyper& h, const Param& p, OptimizerTensor t) {
    const DynamicMap m_map = dynamic_map(true), v_map = dynamic_map(false);
    const auto n = static_cast<std::size_t>(p.n);
    Unquantized u;
    u.m.resize(n);
    u.v.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t b = k / static_cast<std::size_t>(kQuantBlock);
        u.m[k] = m_map.value[p.m[k]] * p.m_absmax[b];
        u.v[k] = v_map.value[p.v[k]] * p.v_absmax[b];
    }
    const std::vector<float> m_old = u.m, v_old = u.v;
    std::vector<float> master = p.master;
    std::vector<unsigned char> weight = p.weight;
    if (t.master != nullptr) t.master = master.data();
    if (t.weight != nullptr) t.weight = weight.data();
    t.m = u.m.data();
    t.v = u.v.data();
    t.m_absmax = t.v_absmax = nullptr;
    cpu::optimizer_update(h, &t, 1, DType::f32);
    const Vec g = values(p.grad_dtype, p.grad);
    constexpr double kUlps = 1.0 / (1 << 22);  // 4 units of 2^-24, half an ulp
    u.m_err.resize(n);
    u.v_err.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
        const double gk = g[k] * h.grad_scale;
        u.m_err[k] =
            static_cast<float>(kUlps * (std::fabs(m_old[k]) + std::fabs(gk) + std::fabs(u.m[k])));
        u.v_err[k] = static_cast<float>(kUlps * (v_old[k] + gk * gk + u.v[k]));
    }
    return u;
}

// One moment of one tensor after a step, the device's against the CPU's: each block's absmax
// within the bound of its largest value (`err`), each code that of the value / absmax nearest to
// the unquantized one (`x`), or, where x lies within its bound of the midpoint of two codes, the
// other of the two (so codes differ from the CPU's by one step at most, and only there), and the
// dequantized value within half the map's coarsest step of the unquantized one.
void expect_moment_8bit(const std::string& what, const std::vector<unsigned char>& gpu_codes,
                        const std::vector<float>& gpu_absmax,
                        const std::vector<unsigned char>& cpu_codes,
                        const std::vector<float>& cpu_absmax, const std::vector<float>& x_value,
                        const std::vector<float>& err, bool is_signed) {
    const DynamicMap map = dynamic_map(is_signed);
    const std::size_t n = x_value.size();
    const std::size_t blocks = cpu_absmax.size();
    Vec block_err(blocks, 0.0), absmax_ref(blocks, 0.0);
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t b = k / static_cast<std::size_t>(kQuantBlock);
        block_err[b] = std::max(block_err[b], static_cast<double>(err[k]));
        absmax_ref[b] = std::max(absmax_ref[b], std::fabs(static_cast<double>(x_value[k])));
    }
    Vec slack(blocks);
    for (std::size_t b = 0; b < blocks; ++b)
        slack[b] = 2 * block_err[b];
    expect_close(what + " absmax", Vec(gpu_absmax.begin(), gpu_absmax.end()),
                 Vec(cpu_absmax.begin(), cpu_absmax.end()), Tolerance{0.0, 0.0}, &slack);
    expect_close(what + " absmax (CPU) vs unquantized", Vec(cpu_absmax.begin(), cpu_absmax.end()),
                 absmax_ref, Tolerance{0.0, 0.0}, &slack);
    constexpr int kShown = 5;
    std::size_t bad = 0, one_step = 0;
    std::string first;
    const auto code_ok = [&](int c, int nearest, double x, double tol) {
        if (c == nearest) return true;
        const double mid = 0.5 * (static_cast<double>(map.value[c]) + map.value[nearest]);
        return std::abs(c - nearest) == 1 && std::fabs(x - mid) <= tol;
    };
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t b = k / static_cast<std::size_t>(kQuantBlock);
        const double absmax = absmax_ref[b], e = block_err[b];
        double x = 0.0, tol = 0.0;  // the unquantized value / absmax, and its bound
        if (absmax > 0) {
            x = static_cast<float>(x_value[k] / static_cast<float>(absmax));
            tol = 2 * (err[k] + std::fabs(x) * e) / absmax + std::fabs(x) / (1 << 22);
        } else if (e > 0) {
            tol = std::numeric_limits<double>::infinity();  // a block of exact zeros by rounding
        }
        const int nearest = dynamic_quantize(static_cast<float>(x), map);
        const int c_gpu = gpu_codes[k], c_cpu = cpu_codes[k];
        const double deq = static_cast<double>(map.value[c_gpu]) * gpu_absmax[b];
        const bool ok = c_gpu < map.size && code_ok(c_gpu, nearest, x, tol) &&
                        code_ok(c_cpu, nearest, x, tol) && std::abs(c_gpu - c_cpu) <= 1 &&
                        std::fabs(deq - x_value[k]) <= 0.9 / 128 * absmax * 1.001 + 4 * e;
        one_step += c_gpu != c_cpu;
        if (ok) continue;
        if (bad++ < kShown) {
            first += "\n  [" + std::to_string(k) + "] code " + std::to_string(c_gpu) + ", CPU " +
                     std::to_string(c_cpu) + ", nearest " + std::to_string(nearest) + " to " +
                     std::to_string(x) + " +- " + std::to_string(tol) + " (dequantized " +
                     std::to_string(deq) + ", unquantized " + std::to_string(x_value[k]) + ")";
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " codes wrong (" << one_step
                       << " differ from the CPU's)" << first;
}

// Fresh gradients on both sides, in place: the host tensors point at p.grad.
void new_grads(std::mt19937& rng, Param& p) {
    const std::vector<unsigned char> g = raw_values(rng, p.grad_dtype, p.n, 0.0, 0.1, false);
    std::copy(g.begin(), g.end(), p.grad.begin());
    p.grad_d->upload(p.grad);
}

// Steps of both kernels from the same states: before each, the CPU's states, weights and fresh
// gradients go to the device, so that each step is compared from equal inputs (a one-step code
// difference would otherwise grow into larger ones over later steps).
void expect_8bit_steps_match_cpu(std::mt19937& rng, std::vector<Param>& ps, Weights weights,
                                 int steps) {
    const auto dts = tensors_8bit(ps, weights, true);
    const auto hts = tensors_8bit(ps, weights, false);
    const int count = static_cast<int>(ps.size());
    for (int step = 1; step <= steps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const OptimizerHyper h = adamw_8bit(step);
        std::vector<Unquantized> ref;
        for (int i = 0; i < count; ++i) {
            Param& p = ps[static_cast<std::size_t>(i)];
            if (step > 1 && i % 7 != kZeroTensor) {
                new_grads(rng, p);
            }
            p.master_d->upload(p.master);
            p.m_d->upload(p.m);
            p.v_d->upload(p.v);
            p.m_absmax_d->upload(p.m_absmax);
            p.v_absmax_d->upload(p.v_absmax);
            if (weights == Weights::master_and_copy)
                p.weight_d->poison();  // every element is written
            else
                p.weight_d->upload(p.weight);
            ref.push_back(unquantized_step(h, p, hts[static_cast<std::size_t>(i)]));
        }
        cuda::optimizer_update(h, dts.data(), count, DType::i8, nullptr);
        cpu::optimizer_update(h, hts.data(), count, DType::i8);
        for (int i = 0; i < count; ++i) {
            Param& p = ps[static_cast<std::size_t>(i)];
            const Unquantized& u = ref[static_cast<std::size_t>(i)];
            SCOPED_TRACE("tensor " + std::to_string(i) + " n " + std::to_string(p.n));
            if (weights != Weights::bf16_only)
                expect_match("master", p.master_d->download(), p.master, Tolerance{1e-5, 1e-5});
            if (weights != Weights::master)
                expect_close("weight", values(DType::bf16, p.weight_d->download()),
                             values(DType::bf16, p.weight), tolerance_for(DType::bf16));
            expect_moment_8bit("m", p.m_d->download(), p.m_absmax_d->download(), p.m, p.m_absmax,
                               u.m, u.m_err, true);
            expect_moment_8bit("v", p.v_d->download(), p.v_absmax_d->download(), p.v, p.v_absmax,
                               u.v, u.v_err, false);
        }
    }
}

TEST(OptimizerCuda, EightBitStatesMatchCpu) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (Weights weights : {Weights::master, Weights::master_and_copy, Weights::bf16_only}) {
        for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
            SCOPED_TRACE(std::string(weights_name(weights)) + ", grad " +
                         std::string(dtype_name(grad)));
            std::vector<Param> ps = make_params_8bit(rng, 35, grad, weights);  // 16 + 16 + 3
            expect_8bit_steps_match_cpu(rng, ps, weights, 3);
        }
    }
}

// Where the rule's arithmetic is exact, nothing is left to a contraction: b1 = b2 = 1/2, g a
// 16-bit gradient times 1/2 (so g^2 is exact in fp32) make every product exact and each moment
// one rounded sum on any device. Then the states (codes and absmax) must be the CPU's bits, step
// after step without resynchronizing, which holds the dequantizing product, the quantizing
// quotient, the block maximum and the search to the CPU's bits. The last case's first tensor has
// more quantization blocks (1026) than a launch gives a tensor (1024): blocks stride the rest.
TEST(OptimizerCuda, EightBitStatesAreTheCpusBitsWhereTheRuleIsExact) {
    NAPKIN_SKIP_WITHOUT_GPU();
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (int c = 0; c < 3; ++c) {
        const DType grad = c == 1 ? DType::f16 : DType::bf16;
        const bool large = c == 2;
        SCOPED_TRACE(std::string(dtype_name(grad)) + (large ? ", 1026 blocks" : ""));
        const int count = large ? 2 : 21;
        std::vector<Param> ps =
            large ? make_params_8bit(rng, count, grad, Weights::master, {1026 * kQuantBlock - 3, 5})
                  : make_params_8bit(rng, count, grad, Weights::master);
        const auto dts = tensors_8bit(ps, Weights::master, true);
        const auto hts = tensors_8bit(ps, Weights::master, false);
        for (int step = 1; step <= (large ? 2 : 4); ++step) {
            SCOPED_TRACE("step " + std::to_string(step));
            for (int i = 0; i < count; ++i) {
                Param& p = ps[static_cast<std::size_t>(i)];
                if (step == 1 || i % 7 == kZeroTensor) continue;
                new_grads(rng, p);
            }
            const OptimizerHyper h = adamw_8bit(step, 0.5f, 0.5f);
            cuda::optimizer_update(h, dts.data(), count, DType::i8, nullptr);
            cpu::optimizer_update(h, hts.data(), count, DType::i8);
            for (int i = 0; i < count; ++i) {
                Param& p = ps[static_cast<std::size_t>(i)];
                SCOPED_TRACE("tensor " + std::to_string(i) + " n " + std::to_string(p.n));
                ASSERT_EQ(p.m_absmax_d->download(), p.m_absmax);
                ASSERT_EQ(p.v_absmax_d->download(), p.v_absmax);
                ASSERT_EQ(p.m_d->download(), p.m);
                ASSERT_EQ(p.v_d->download(), p.v);
                // The weights take the rule's division and square root: close, not equal, and
                // they drift apart over the steps by their last bits only.
                expect_match("master", p.master_d->download(), p.master, Tolerance{1e-5, 1e-5});
            }
        }
    }
}

// What an 8-bit call needs: the codes and the absmax of both moments.
TEST(OptimizerCuda, EightBitStatesWithoutTheirAbsmaxAreRefused) {
    NAPKIN_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1);
    std::vector<Param> ps = make_params_8bit(rng, 1, DType::f32, Weights::master);
    auto dts = tensors_8bit(ps, Weights::master, true);
    dts[0].v_absmax = nullptr;
    EXPECT_THROW(cuda::optimizer_update(adamw_8bit(1), dts.data(), 1, DType::i8, nullptr),
                 std::exception);
    dts = tensors_8bit(ps, Weights::master, true);
    dts[0].m = nullptr;
    EXPECT_THROW(cuda::optimizer_update(adamw_8bit(1), dts.data(), 1, DType::i8, nullptr),
                 std::exception);
}

}  // namespace
}  // namespace napkin
