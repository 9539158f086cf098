#include "core/engine/optimizer.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace napkin {

namespace {

float load(const Tensor& t, std::int64_t i) {
    return t.dtype() == DType::bf16 ? to_float(t.data<bf16_t>()[i]) : t.data<float>()[i];
}

void store(Tensor& t, std::int64_t i, float v) {
    if (t.dtype() == DType::bf16) t.data<bf16_t>()[i] = bf16_t(v);
    else t.data<float>()[i] = v;
}

}  // namespace

float learning_rate(const OptimizerConfig& c, int step) {
    if (step < c.warmup_steps) return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
    const int decay_steps = std::max(1, c.total_steps - c.warmup_steps);
    const float progress = std::min(1.0f, static_cast<float>(step - c.warmup_steps) / static_cast<float>(decay_steps));
    const float cosine = 0.5f * (1.0f + std::cos(3.14159265358979f * progress));
    const float min_lr = c.lr * c.min_lr_frac;
    return min_lr + (c.lr - min_lr) * cosine;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, Gpt& model, AccountingAllocator& alloc, DType state_dtype)
    : cfg_(cfg), model_(model), state_dtype_(state_dtype) {
    NAPKIN_ASSERT(state_dtype == DType::f32 || state_dtype == DType::bf16, "optimizer state dtype");
    const int states = optimizer_state_count(cfg.kind);
    for (const ParamSlot& p : model.params()) {
        if (states >= 1) {
            m_.emplace_back(alloc, p.name + ".opt.m", MemCategory::optimizer_state, state_dtype, std::initializer_list<std::int64_t>{p.numel});
            std::memset(m_.back().raw(), 0, m_.back().bytes());
        }
        if (states >= 2) {
            v_.emplace_back(alloc, p.name + ".opt.v", MemCategory::optimizer_state, state_dtype, std::initializer_list<std::int64_t>{p.numel});
            std::memset(v_.back().raw(), 0, v_.back().bytes());
        }
    }
}

StepStats Optimizer::step(int step_index, float grad_scale) {
    StepStats st;
    st.lr = learning_rate(cfg_, step_index);
    auto& params = model_.params();

    // Global norm of the unscaled gradients (fp64 sum).
    double sumsq = 0.0;
    for (std::size_t i = 0; i < params.size(); ++i) {
        grad_buf_.resize(static_cast<std::size_t>(params[i].numel));
        model_.get_grad(i, grad_buf_.data());
        for (float g : grad_buf_) sumsq += static_cast<double>(g) * g;
    }
    const double norm = std::sqrt(sumsq) * grad_scale;
    st.grad_norm = static_cast<float>(norm);
    if (!std::isfinite(norm)) {
        st.skipped = true;
        return st;
    }
    const float clip = cfg_.grad_clip > 0 && norm > cfg_.grad_clip ? static_cast<float>(cfg_.grad_clip / norm) : 1.0f;
    const float scale = grad_scale * clip;
    ++t_;
    const float b1 = cfg_.beta1, b2 = cfg_.beta2;
    const float bc1 = 1.0f - std::pow(b1, static_cast<float>(t_));
    const float bc2 = 1.0f - std::pow(b2, static_cast<float>(t_));
    const int states = optimizer_state_count(cfg_.kind);

    for (std::size_t i = 0; i < params.size(); ++i) {
        ParamSlot& p = params[i];
        const std::int64_t n = p.numel;
        grad_buf_.resize(static_cast<std::size_t>(n));
        master_buf_.resize(static_cast<std::size_t>(n));
        model_.get_grad(i, grad_buf_.data());
        if (!p.master.empty()) std::memcpy(master_buf_.data(), p.master.raw(), static_cast<std::size_t>(n) * sizeof(float));
        else model_.get_param(i, master_buf_.data());
        const float wd = p.decay ? cfg_.weight_decay : 0.0f;
        Tensor* m = states >= 1 ? &m_[i] : nullptr;
        Tensor* v = states >= 2 ? &v_[i] : nullptr;
        for (std::int64_t k = 0; k < n; ++k) {
            float g = grad_buf_[static_cast<std::size_t>(k)] * scale;
            float w = master_buf_[static_cast<std::size_t>(k)];
            switch (cfg_.kind) {
                case OptimizerKind::sgd:
                    w -= st.lr * (g + wd * w);
                    break;
                case OptimizerKind::momentum: {
                    g += wd * w;
                    const float mk = b1 * load(*m, k) + g;
                    store(*m, k, mk);
                    w -= st.lr * mk;
                    break;
                }
                case OptimizerKind::adagrad: {
                    g += wd * w;
                    const float sk = load(*m, k) + g * g;
                    store(*m, k, sk);
                    w -= st.lr * g / (std::sqrt(sk) + cfg_.eps);
                    break;
                }
                case OptimizerKind::rmsprop: {
                    g += wd * w;
                    const float sk = b2 * load(*m, k) + (1 - b2) * g * g;
                    store(*m, k, sk);
                    w -= st.lr * g / (std::sqrt(sk) + cfg_.eps);
                    break;
                }
                case OptimizerKind::adam:
                case OptimizerKind::adamw:
                case OptimizerKind::adamw_8bit: {
                    const bool decoupled = cfg_.kind != OptimizerKind::adam;
                    if (!decoupled) g += wd * w;
                    const float mk = b1 * load(*m, k) + (1 - b1) * g;
                    const float vk = b2 * load(*v, k) + (1 - b2) * g * g;
                    store(*m, k, mk);
                    store(*v, k, vk);
                    const float update = (mk / bc1) / (std::sqrt(vk / bc2) + cfg_.eps);
                    w -= st.lr * (update + (decoupled ? wd * w : 0.0f));
                    break;
                }
            }
            master_buf_[static_cast<std::size_t>(k)] = w;
        }
        model_.set_param(i, master_buf_.data());
    }
    return st;
}

}  // namespace napkin
