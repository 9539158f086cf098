#include "core/engine/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/engine/engine_device.h"
#include "core/half.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars_rule.h"

namespace napkin {

float learning_rate(const OptimizerConfig& c, int step) {
    if (step < c.warmup_steps)
        return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
    const int decay_steps = std::max(1, c.total_steps - c.warmup_steps);
    const float progress =
        std::min(1.0f, static_cast<float>(step - c.warmup_steps) / static_cast<float>(decay_steps));
    const float cosine = 0.5f * (1.0f + std::cos(3.14159265358979f * progress));
    const float min_lr = c.lr * c.min_lr_frac;
    return min_lr + (c.lr - min_lr) * cosine;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, Gpt& model, AccountingAllocator& alloc,
                     DType state_dtype, EngineDevice* device, AccountingAllocator* paged)
    : cfg_(cfg),
      model_(model),
      alloc_(alloc),
      device_(device),
      paged_(paged != nullptr),
      state_dtype_(state_dtype) {
    NAPKIN_ASSERT(!paged_ || device != nullptr, "paged optimizer state without a device");
    AccountingAllocator& state_alloc = paged_ ? *paged : alloc;
    NAPKIN_ASSERT(
        state_dtype == DType::f32 || state_dtype == DType::bf16 || state_dtype == DType::i8,
        "optimizer state dtype");
    NAPKIN_ASSERT((device == nullptr) == (alloc.device() == DeviceKind::cpu),
                  "optimizer: allocator and device disagree");
    const int states = optimizer_state_count(cfg.kind);
    auto zero = [&](Tensor& t) {
        if (device_ != nullptr)
            device_->zero(t.raw(), t.bytes());
        else
            std::memset(t.raw(), 0, t.bytes());
    };
    for (const ParamSlot& p : model.params()) {
        const bool quantized = state_dtype == DType::i8;
        if (!p.trainable) {  // frozen: no state, an empty slot keeps the indices aligned
            if (states >= 1) m_.emplace_back();
            if (states >= 2) v_.emplace_back();
            if (quantized) {
                m_absmax_.emplace_back();
                v_absmax_.emplace_back();
            }
            continue;
        }
        if (states >= 1) {
            m_.emplace_back(state_alloc, p.name + ".opt.m", MemCategory::optimizer_state,
                            state_dtype, std::initializer_list<std::int64_t>{p.numel});
            zero(m_.back());
        }
        if (states >= 2) {
            v_.emplace_back(state_alloc, p.name + ".opt.v", MemCategory::optimizer_state,
                            state_dtype, std::initializer_list<std::int64_t>{p.numel});
            zero(v_.back());
        }
        if (quantized) {  // 8-bit moments: one fp32 absmax per block each (kernels/optimizer.h)
            const std::int64_t blocks = optimizer_8bit_blocks(p.numel);
            m_absmax_.emplace_back(state_alloc, p.name + ".opt.m.absmax",
                                   MemCategory::optimizer_state, DType::f32,
                                   std::initializer_list<std::int64_t>{blocks});
            zero(m_absmax_.back());
            v_absmax_.emplace_back(state_alloc, p.name + ".opt.v.absmax",
                                   MemCategory::optimizer_state, DType::f32,
                                   std::initializer_list<std::int64_t>{blocks});
            zero(v_absmax_.back());
        }
    }
    // Zeroed by the device, which may have pulled the pages over: the state starts on the host.
    if (paged_) page_states(false);
}

void Optimizer::page_states(bool to_device) {
    device_->begin_prefetch();
    for (const std::vector<Tensor>* states : {&m_, &v_, &m_absmax_, &v_absmax_}) {
        for (const Tensor& t : *states)
            if (!t.empty()) device_->prefetch(t.raw(), t.bytes(), to_device);
    }
    device_->end_prefetch();
}

namespace {

// Values of a tensor as fp32: the tensor's own memory when it is fp32, else a widened copy.
const float* as_f32(const Tensor& t, std::vector<float>& buf) {
    if (t.dtype() == DType::f32) return t.data<float>();
    buf.resize(static_cast<std::size_t>(t.numel()));
    if (t.dtype() == DType::bf16) {
        const bf16_t* p = t.data<bf16_t>();
        for (std::int64_t i = 0; i < t.numel(); ++i)
            buf[static_cast<std::size_t>(i)] = to_float(p[i]);
    } else {
        const f16_t* p = t.data<f16_t>();
        for (std::int64_t i = 0; i < t.numel(); ++i)
            buf[static_cast<std::size_t>(i)] = to_float(p[i]);
    }
    return buf.data();
}

void round_into(Tensor& t, const float* src) {
    const std::int64_t n = t.numel();
    if (t.dtype() == DType::bf16) {
        bf16_t* p = t.data<bf16_t>();
#pragma omp parallel for if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i)
            p[i] = bf16_t(src[i]);
    } else if (t.dtype() == DType::f16) {
        f16_t* p = t.data<f16_t>();
#pragma omp parallel for if (n > 65536)
        for (std::int64_t i = 0; i < n; ++i)
            p[i] = f16_t(src[i]);
    }
}

// The hyperparameters of update number t (1-based) at learning rate lr.
OptimizerHyper update_hyper(const OptimizerConfig& cfg, float lr, int t, float grad_scale) {
    return OptimizerHyper{.kind = cfg.kind,
                          .lr = lr,
                          .beta1 = cfg.beta1,
                          .beta2 = cfg.beta2,
                          .eps = cfg.eps,
                          .bias_correction1 = 1.0f - std::pow(cfg.beta1, static_cast<float>(t)),
                          .bias_correction2 = 1.0f - std::pow(cfg.beta2, static_cast<float>(t)),
                          .grad_scale = grad_scale};
}

}  // namespace

std::optional<OptimizerHyper> begin_update(const OptimizerConfig& cfg, int step_index, double sumsq,
                                           float grad_scale, int& t, StepStats& st) {
    st.lr = learning_rate(cfg, step_index);
    StepScalars gate;  // the device's optimizer_gate, on the host
    optimizer_gate_rule(gate, sumsq, grad_scale, cfg.grad_clip);
    st.grad_norm = gate.grad_norm;
    if (gate.skip != 0) {
        st.skipped = true;
        return std::nullopt;
    }
    ++t;
    return update_hyper(cfg, st.lr, t, gate.update_scale);
}

void host_update(const OptimizerHyper& h, const HostPiece& piece, DType state_dtype) {
    OptimizerTensor t;
    t.master = piece.w;
    t.grad = const_cast<float*>(piece.g);  // read only: the update writes w and the states
    t.m = piece.m;
    t.v = piece.v;
    t.m_absmax = piece.m_absmax;
    t.v_absmax = piece.v_absmax;
    t.n = piece.n;
    t.weight_decay = piece.weight_decay;
    cpu::optimizer_update(h, &t, 1, state_dtype);
}

double Optimizer::host_grad_sum_squares() {
    auto& params = model_.params();
    double sumsq = 0.0;
    for (ParamSlot& p : params) {
        if (!p.trainable) continue;
        const float* g = as_f32(p.grad, grad_buf_);
        const std::int64_t n = p.numel;
        // Fixed blocks summed in order: the norm (and so clipping) is bitwise the same for any
        // thread count, which resume-from-checkpoint relies on.
        constexpr std::int64_t kBlocks = 64;
        double parts[kBlocks] = {};
        const std::int64_t per = (n + kBlocks - 1) / kBlocks;
#pragma omp parallel for if (n > 65536)
        for (std::int64_t b = 0; b < kBlocks; ++b) {
            double acc = 0.0;
            for (std::int64_t k = b * per; k < std::min(n, (b + 1) * per); ++k)
                acc += static_cast<double>(g[k]) * g[k];
            parts[b] = acc;
        }
        for (double part : parts)
            sumsq += part;
    }
    return sumsq;
}

std::vector<OptimizerTensor> Optimizer::device_tensors() const {
    const auto& params = model_.params();
    const int states = optimizer_state_count(cfg_.kind);
    std::vector<OptimizerTensor> ts;
    for (std::size_t i = 0; i < params.size(); ++i) {
        const ParamSlot& p = params[i];
        if (!p.trainable) continue;
        OptimizerTensor& t = ts.emplace_back();
        // The fp32 values the update applies to: the master copy, the fp32 weights, or (pure
        // bf16, no master) none: the kernel reads the bf16 weight and rounds its result back.
        const bool master = !p.master.empty();
        const bool f32_weight = p.weight.dtype() == DType::f32;
        t.master = master       ? const_cast<float*>(p.master.data<float>())
                   : f32_weight ? const_cast<float*>(p.weight.data<float>())
                                : nullptr;
        t.grad = const_cast<void*>(p.grad.raw());
        t.grad_dtype = p.grad.dtype();
        t.m = states >= 1 ? const_cast<void*>(m_[i].raw()) : nullptr;
        t.v = states >= 2 ? const_cast<void*>(v_[i].raw()) : nullptr;
        if (!m_absmax_.empty()) {
            t.m_absmax = const_cast<float*>(m_absmax_[i].data<float>());
            t.v_absmax = const_cast<float*>(v_absmax_[i].data<float>());
        }
        t.weight = master || !f32_weight ? const_cast<void*>(p.weight.raw()) : nullptr;
        t.weight_dtype = p.weight.dtype();
        t.n = p.numel;
        t.weight_decay = p.decay ? cfg_.weight_decay : 0.0f;
    }
    return ts;
}

HostPiece Optimizer::host_piece(std::size_t i) {
    ParamSlot& p = model_.params()[i];
    HostPiece piece;
    piece.g = as_f32(p.grad, grad_buf_);
    // The fp32 values the update applies to: the master copy, the fp32 weights themselves,
    // or (pure bf16) a widened copy rounded back afterwards.
    if (!p.master.empty()) {
        piece.w = p.master.data<float>();
    } else if (p.weight.dtype() == DType::f32) {
        piece.w = p.weight.data<float>();
    } else {
        as_f32(p.weight, master_buf_);
        piece.w = master_buf_.data();
    }
    const int states = optimizer_state_count(cfg_.kind);
    if (states >= 1) piece.m = m_[i].raw();
    if (states >= 2) piece.v = v_[i].raw();
    if (state_dtype_ == DType::i8) {  // 8-bit moments, blockwise (kernels/optimizer.h)
        piece.m_absmax = m_absmax_[i].data<float>();
        piece.v_absmax = v_absmax_[i].data<float>();
    }
    piece.n = p.numel;
    piece.weight_decay = p.decay ? cfg_.weight_decay : 0.0f;
    return piece;
}

StepStats Optimizer::schedule_into(int step_index, StepScalars* gate) {
    NAPKIN_ASSERT(device_ != nullptr && gate != nullptr, "optimizer: a gate needs a device");
    StepStats st;
    st.lr = learning_rate(cfg_, step_index);
    // Update number t_ + 1 if the gate lets it run (finish_step counts it once the host knows).
    const OptimizerHyper next = update_hyper(cfg_, st.lr, t_ + 1, 1.0f);
    device_->step_schedule(gate, StepSchedule{.lr = next.lr,
                                              .bias_correction1 = next.bias_correction1,
                                              .bias_correction2 = next.bias_correction2});
    return st;
}

void Optimizer::queue_gated_update(float grad_scale, StepScalars* gate) {
    NAPKIN_ASSERT(device_ != nullptr && gate != nullptr, "optimizer: a gate needs a device");
    const std::vector<OptimizerTensor> dev = device_tensors();
    const int count = static_cast<int>(dev.size());
    device_->optimizer_gate(dev.data(), count, alloc_, grad_scale, cfg_.grad_clip, gate);
    // Everything that changes from step to step is read from the gate: the gradient scale and
    // skip (optimizer_gate) and the schedule (schedule_into). The host's three are NaN, so an
    // update that ignored the gate's schedule would show at once.
    const float unused = std::numeric_limits<float>::quiet_NaN();
    OptimizerHyper h = update_hyper(cfg_, unused, 1, 1.0f);
    h.bias_correction1 = unused;
    h.bias_correction2 = unused;
    h.gate = gate;
    h.schedule_from_gate = true;
    // Paged states move whether or not the gate lets the update run: the host does not
    // know until the step's one read (a skipped fp16 step pages them too).
    device_update(h, dev);
}

StepStats Optimizer::step(int step_index, float grad_scale, StepScalars* gate) {
    if (gate != nullptr) {  // everything queued on the device; finish_step reads the outcome
        const StepStats st = schedule_into(step_index, gate);
        queue_gated_update(grad_scale, gate);
        return st;
    }
    StepStats st;
    // Global norm of the unscaled gradients (fp64 sum), on the device the model lives on.
    std::vector<OptimizerTensor> dev;
    double sumsq = 0.0;
    if (device_ != nullptr) {
        dev = device_tensors();
        sumsq = device_->grad_sum_squares(dev.data(), static_cast<int>(dev.size()), alloc_);
    } else {
        sumsq = host_grad_sum_squares();
    }
    const std::optional<OptimizerHyper> h =
        begin_update(cfg_, step_index, sumsq, grad_scale, t_, st);
    if (!h) return st;
    if (device_ != nullptr) {
        device_update(*h, dev);
        return st;
    }
    auto& params = model_.params();
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (!params[i].trainable) continue;
        const HostPiece piece = host_piece(i);
        host_update(*h, piece, state_dtype_);
        if (params[i].weight.dtype() != DType::f32) round_into(params[i].weight, piece.w);
    }
    return st;
}

void Optimizer::device_update(const OptimizerHyper& h, const std::vector<OptimizerTensor>& dev) {
    // One multi-tensor update: per-tensor weight decay rides in each OptimizerTensor.
    if (paged_) page_states(true);
    device_->optimizer_update(h, dev.data(), static_cast<int>(dev.size()), state_dtype_);
    if (paged_) page_states(false);
}

void Optimizer::finish_step(const StepScalars& read, StepStats& st) {
    st.grad_norm = read.grad_norm;
    st.skipped = read.skip != 0;
    if (!st.skipped) ++t_;
}

namespace {

// Floating-point operations per element of one update, counted from update() above (each
// add, multiply, divide and sqrt is one; weight decay counted for every element), plus 2 for
// the global-norm pass (square, add).
std::uint64_t update_flops_per_element(OptimizerKind kind) {
    switch (kind) {
        case OptimizerKind::sgd:
            return 5 + 2;
        case OptimizerKind::momentum:
            return 7 + 2;
        case OptimizerKind::adagrad:
            return 10 + 2;
        case OptimizerKind::rmsprop:
            return 12 + 2;
        case OptimizerKind::adam:
        case OptimizerKind::adamw:
        case OptimizerKind::adamw_8bit:
            return 17 + 2;
    }
    return 0;
}

}  // namespace

KernelCost Optimizer::step_cost() const {
    KernelCost c;
    const auto states = static_cast<std::uint64_t>(optimizer_state_count(cfg_.kind));
    for (const ParamSlot& p : model_.params()) {
        if (!p.trainable) continue;
        const auto n = static_cast<std::uint64_t>(p.numel);
        c.flops += n * update_flops_per_element(cfg_.kind);
        const std::uint64_t grad = p.grad.bytes(), weight = p.weight.bytes();
        std::uint64_t state = states * storage_bytes(state_dtype_, n);
        if (state_dtype_ == DType::i8)  // and their block absmax
            state +=
                states * storage_bytes(DType::f32,
                                       static_cast<std::uint64_t>(optimizer_8bit_blocks(p.numel)));
        c.bytes_read += 2 * grad + state + (p.master.empty() ? weight : p.master.bytes());
        c.bytes_written += state + weight + (p.master.empty() ? 0 : p.master.bytes());
    }
    return c;
}

}  // namespace napkin
