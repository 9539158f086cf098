#include "core/engine/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "core/check.h"
#include "profiler/host_range.h"

namespace napkin {

Trainer::Trainer(const TrainOptions& opts) : opts_(opts), alloc_(host_) {
    if (opts_.steps <= 0) throw UsageError("--steps: must be a positive integer (got " + std::to_string(opts_.steps) + ")");
    if (opts_.grad_accum <= 0) {
        throw UsageError("--grad-accum: must be a positive integer (got " + std::to_string(opts_.grad_accum) + ")");
    }
    if (opts_.plan.seq_len > opts_.model.context_length) {
        throw UsageError("--seq-len: " + std::to_string(opts_.plan.seq_len) + " exceeds the model's context length " +
                         std::to_string(opts_.model.context_length));
    }
    if (opts_.data.empty()) data_ = std::make_unique<SyntheticCorpus>(opts_.seed);
    else data_ = open_token_source(opts_.data);
    if (data_->vocab_size() > opts_.model.vocab_size) {
        throw InputError((opts_.data.empty() ? std::string("synthetic corpus") : opts_.data) + ": token ids up to " +
                         std::to_string(data_->vocab_size() - 1) + " do not fit the model's vocabulary of " +
                         std::to_string(opts_.model.vocab_size));
    }
    model_ = Gpt::create(opts_.model, opts_.plan, alloc_, opts_.seed);
    const PrecisionDTypes pd = precision_dtypes(opts_.plan.precision, opts_.plan.optimizer, false);
    opts_.optimizer.kind = opts_.plan.optimizer;
    optimizer_ = std::make_unique<Optimizer>(opts_.optimizer, *model_, alloc_, pd.optimizer_state);
    const std::int64_t n = opts_.plan.micro_batch * opts_.plan.seq_len;
    inputs_ = Tensor(alloc_, "batch.inputs", MemCategory::data, DType::f32, {n});  // int32, same size
    targets_ = Tensor(alloc_, "batch.targets", MemCategory::data, DType::f32, {n});
    if (opts_.plan.precision == Precision::fp16_amp) loss_scale_ = opts_.loss_scale_init;
    const PlanTotals t = plan_totals(model_->plan());
    model_flops_per_micro_ = static_cast<double>(t.model_flops());
    hardware_flops_per_micro_ = static_cast<double>(t.model_flops() + t.recompute_flops);
    optimizer_cost_ = optimizer_->step_cost();
    kernel_name_ = std::string(enum_name(kOptimizerNames, opts_.plan.optimizer)) + "_update";
}

StepRecord Trainer::step() {
    StepRecord r;
    r.step = step_;
    alloc_.reset_peaks();
    std::optional<profiler::ScopedRange> step_range;
    if (rec_ != nullptr) step_range.emplace(rec_, "step " + std::to_string(step_), profiler::Category::step);
    const auto t0 = std::chrono::steady_clock::now();
    model_->zero_grads();
    double loss_sum = 0.0;
    const std::int64_t B = opts_.plan.micro_batch, T = opts_.plan.seq_len;
    for (int micro = 0; micro < opts_.grad_accum; ++micro) {
        auto* in = static_cast<std::int32_t*>(inputs_.raw());
        auto* tg = static_cast<std::int32_t*>(targets_.raw());
        {
            std::optional<profiler::ScopedRange> data_range;
            if (rec_ != nullptr) data_range.emplace(rec_, "data", profiler::Category::op);
            data_->next_batch(in, tg, B, T);
        }
        loss_sum += model_->forward_backward(in, tg, loss_scale_ / static_cast<float>(opts_.grad_accum));
    }
    std::optional<profiler::ScopedRange> opt_range, opt_kernel;
    if (rec_ != nullptr) {
        opt_range.emplace(rec_, "optimizer", profiler::Category::optimizer, optimizer_cost_);
        profiler::begin_kernel(opt_kernel, rec_, kernel_name_, optimizer_cost_);
    }
    const StepStats st = optimizer_->step(step_, 1.0f / loss_scale_);
    opt_kernel.reset();
    opt_range.reset();
    if (opts_.plan.precision == Precision::fp16_amp) {
        if (st.skipped) {
            loss_scale_ = std::max(1.0f, loss_scale_ / 2);
            good_steps_ = 0;
        } else if (++good_steps_ >= opts_.loss_scale_window) {
            loss_scale_ *= 2;
            good_steps_ = 0;
        }
    } else if (st.skipped) {
        throw InputError("step " + std::to_string(step_) + ": the gradients are not finite (NaN or inf); training stopped");
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.loss = static_cast<float>(loss_sum / opts_.grad_accum);
    r.lr = st.lr;
    r.grad_norm = st.grad_norm;
    r.skipped = st.skipped;
    r.loss_scale = loss_scale_;
    r.tokens = static_cast<double>(B * T * opts_.grad_accum);
    r.model_flops = model_flops_per_micro_ * opts_.grad_accum;
    r.hardware_flops = hardware_flops_per_micro_ * opts_.grad_accum;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) {
        r.current_bytes[c] = alloc_.current_bytes(static_cast<MemCategory>(c));
        r.peak_bytes[c] = alloc_.peak_bytes(static_cast<MemCategory>(c));
    }
    r.peak_total_bytes = alloc_.peak_total_bytes();
    if (!std::isfinite(r.loss) && !r.skipped) {
        throw InputError("step " + std::to_string(step_) + ": the loss is not finite; training stopped");
    }
    ++step_;
    return r;
}

}  // namespace napkin
