// The GPT engine's one orchestration, over a kernel backend: forward walks the plan's ops in
// order, backward walks them in reverse. Each op's kept tensors are allocated from the plan's own
// list (name, numel, dtype), so the activations the allocator measures are, by construction, the
// ones the estimator's detailed view sums.
//
// GptImpl<Kernels> is instantiated with CpuKernels<T> (core/engine/cpu_kernels.h, in gpt.cpp)
// and CudaKernels<T> (core/engine/cuda_kernels.h, in cuda_device.cpp). A backend struct has the
// kernels of kernels/kernel_list.h, each taking its argument struct (llm.c: the CPU is the
// specification and the CUDA code mirrors it name for name), plus the memory operations besides
// kernels (zero, parameter values in and out as fp32, the token check); nothing here knows the
// device. The buffer plan (core/buffer_plan.h) sizes every scratch buffer, for either backend.
// Tensors live where the allocator's raw memory puts them: host memory or device memory. The
// block's ops, dispatched on their roles, are core/engine/gpt_block.h.
#pragma once

#include <algorithm>
#include <iterator>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/engine/anomaly_check.h"
#include "core/engine/gpt.h"
#include "core/engine/gpt_buffers.h"
#include "core/engine/gpt_detail.h"
#include "core/engine/gpt_dropout.h"
#include "core/engine/gpt_fp8.h"
#include "core/engine/gpt_lora.h"
#include "core/engine/gpt_params.h"
#include "core/half.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/norm.h"
#include "kernels/residual.h"
#include "kernels/rope.h"
#include "kernels/zero.h"
#include "profiler/host_range.h"

namespace napkin {

// Throws UsageError for what the engine does not run yet (fp32 gradients beside a 16-bit model,
// LoRA under fp8-amp), on any backend; validates the model config.
void check_engine_support(const ModelConfig& cfg, const PlanInputs& in);

// The engine over one backend's kernels (Kernels: CpuKernels<T> or CudaKernels<T>, T the
// storage type); everything device-specific is a call on k_.
template <class Kernels>
class GptImpl final : public Gpt {
    using T = typename Kernels::Elem;
    using KeptTensors = gpt_detail::KeptTensors;
    using LayerParams = gpt_detail::LayerParams;

public:
    GptImpl(const ModelConfig& cfg, const PlanInputs& in, AccountingAllocator& alloc, std::uint64_t seed,
            Kernels kernels = Kernels())
        : cfg_(cfg), alloc_(alloc), k_(std::move(kernels)) {
        build_op_plan(cfg_, in, plan_);
        const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
        NAPKIN_ASSERT(pd.weights == gpt_detail::storage_dtype<T>() && pd.grads == gpt_detail::storage_dtype<T>(),
                      "engine storage does not match the recipe");
        adapters_ = in.finetune != Finetune::full;
        fuse_residual_norm_ = fusable_residual_norm();
        dropout_.configure(cfg.dropout);
        allocate_params(pd.has_master);
        init_params(seed);
        B_ = in.micro_batch;
        T_ = in.seq_len;
        N_ = B_ * T_;
        allocate_buffers();
    }

    std::vector<ParamSlot>& params() override { return params_; }
    const OpPlan& plan() const override { return plan_; }
    DType storage() const override { return gpt_detail::storage_dtype<T>(); }
    void set_recorder(profiler::Recorder* recorder) override {
        rec_ = recorder;
        anomaly_.set_recorder(recorder);
    }
    void set_kernel_tagger(profiler::KernelTagger* tagger) override { tagger_ = tagger; }
    void set_hooks(GptHooks* hooks) override { hooks_ = hooks; }
    void set_dropout_seed(std::uint64_t seed) override { dropout_.set_seed(seed); }
    // --detect-anomaly (core/engine/anomaly.h; plan_.in.detect_anomaly): the buffer plan's
    // slots, one for each tensor a micro-batch checks. Under fp16-amp the backward is left to the
    // loss scaler, which skips a step whose scaled gradients overflowed (docs/ANOMALY.md).
    void enable_anomaly_detection(Tensor slots) {
        anomaly_.enable(std::move(slots), anomaly_slot_count(plan_) - 1);
        check_backward_ = plan_.in.precision != Precision::fp16_amp;
        const bool adapters = plan_.in.finetune != Finetune::full;
        for (const ParamTensor& t : param_tensors(cfg_, adapters ? plan_.in.lora_rank : 0))
            param_shapes_.push_back(t.shape);  // params_' order (gpt_params.cpp)
    }

    // fp8-amp's delayed scaling: the histories rolled into the next step's scales, in an op
    // range of its own ("fp8.amax_roll").
    void end_step() override {
        std::optional<profiler::ScopedRange> r;
        profiler::KernelScope k;
        fp8_.end_step(k_, [&](std::string_view name, const KernelCost& cost) {
            op_range(r, "fp8.amax_roll", cost);
            kernel_range(k, name, cost);
        });
    }
    Tensor* fp8_amax_history() override { return &fp8_.amax_history(); }
    Tensor* fp8_scales() override { return &fp8_.scales(); }
    void fp8_state_restored(int steps_done) override { fp8_.restored(steps_done); }

    void zero_grads() override {
        std::optional<profiler::ScopedRange> r;
        profiler::KernelScope k;
        if (rec_ != nullptr) {
            KernelCost cost;
            for (const auto& p : params_) cost.bytes_written += p.grad.bytes();
            op_range(r, "zero_grads", cost);
            kernel_range(k, "memset", cost);
        }
        // One call for all of them: on a GPU a few launches instead of one memset per tensor.
        std::vector<ZeroSpan> spans;
        spans.reserve(params_.size());
        for (auto& p : params_) {
            if (p.trainable) spans.push_back(ZeroSpan{p.grad.raw(), p.grad.bytes()});
        }
        k_.zero(spans.data(), static_cast<int>(spans.size()));
    }

    void get_param(std::size_t i, float* out) const override {
        const ParamSlot& p = params_[i];
        if (p.weight.dtype() == DType::nf4) {
            k_.load_nf4(out, p.weight.template data<std::uint8_t>(), p.quant.template data<std::uint8_t>(), p.numel);
            return;
        }
        k_.load_floats(out, p.weight.template data<T>(), p.numel);
    }
    void get_grad(std::size_t i, float* out) const override {
        const ParamSlot& p = params_[i];
        if (!p.trainable) {
            std::fill(out, out + p.numel, 0.0f);
            return;
        }
        k_.load_floats(out, p.grad.template data<T>(), p.numel);
    }
    void set_param(std::size_t i, const float* values) override {
        ParamSlot& p = params_[i];
        if (p.weight.dtype() == DType::nf4) {
            k_.store_nf4(p.weight.template data<std::uint8_t>(), p.quant.template data<std::uint8_t>(), values, p.numel);
            return;
        }
        k_.store_floats(p.weight.template data<T>(), values, p.numel);
        if (!p.master.empty()) k_.copy_from_host(p.master.raw(), values, static_cast<std::size_t>(p.numel) * sizeof(float));
    }

    StepScalars* step_scalars() override { return k_.step_scalars(); }
    void defer_loss(bool on) override {
        NAPKIN_ASSERT(!on || !anomaly_.on(), "the anomaly check reads every micro-batch's loss");
        k_.defer_loss(on);
    }
    std::size_t anomaly_check_launches() const override { return anomaly_.launches(); }

    float forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float dloss) override {
        if (!anomaly_.on()) return micro_batch(inputs, targets, dloss);
        anomaly_.begin(k_);
        const float loss = micro_batch(inputs, targets, dloss);  // synchronous: throws at once
        if (anomaly_.synchronous()) return loss;
        const std::optional<Anomaly> found = anomaly_.first_found(k_);  // one read of the slots
        if (!found) return loss;
        // Replay the micro-batch reading each op's slots at once, to measure the first bad op's
        // inputs while they exist: weights and batch are unchanged (the optimizer has not run).
        anomaly_.set_replay(true);
        anomaly_.begin(k_);
        micro_batch(inputs, targets, dloss);
        throw AnomalyFound(*found);  // not reproduced: the first pass's record, inputs unmeasured
    }

private:
    float micro_batch(const std::int32_t* inputs, const std::int32_t* targets, float dloss) {
        k_.check_tokens(inputs, N_, cfg_.vocab_size);
        const int L = cfg_.n_layers;
        const bool rebuild = plan_.in.checkpointing != Checkpointing::none;

        // Forward: prologue, blocks, epilogue. Recomputed tensors (checkpointing) are freed as
        // soon as their block is done and rebuilt in the backward.
        std::optional<profiler::ScopedRange> phase;
        if (rec_ != nullptr) phase.emplace(rec_, "forward", profiler::Category::forward);
        prologue_forward(inputs);
        layers_.clear();
        layers_.resize(static_cast<std::size_t>(L));
        for (int l = 0; l < L; ++l) {
            std::optional<profiler::ScopedRange> layer;
            if (rec_ != nullptr) layer.emplace(rec_, "h." + std::to_string(l), profiler::Category::layer);
            hook_enter(l + 1, false);
            block_forward(l, false);
            hook_leave(l + 1, false);
        }
        const float loss = head_forward_backward(targets, dloss);
        // Backward.
        phase.reset();
        if (rec_ != nullptr) phase.emplace(rec_, "backward", profiler::Category::backward);
        ln_f_backward();
        for (int l = L - 1; l >= 0; --l) {
            std::optional<profiler::ScopedRange> layer;
            if (rec_ != nullptr) layer.emplace(rec_, "h." + std::to_string(l) + " backward", profiler::Category::layer);
            hook_enter(l + 1, true);
            if (rebuild) block_forward(l, true);
            block_backward(l);  // frees the layer's activations at its end
            hook_leave(l + 1, true);
        }
        prologue_backward(inputs);
        return loss;
    }

    void hook_enter(int unit, bool backward) {
        if (hooks_ != nullptr) hooks_->enter(unit, backward);
    }
    void hook_leave(int unit, bool backward) {
        if (hooks_ != nullptr) hooks_->leave(unit, backward);
    }
    // GptHooks' units: 0 the embeddings, 1 + l block l, L + 1 the head.
    int head_unit() const { return cfg_.n_layers + 1; }

    // The embedding (and its dropout) into the kept block 0 input.
    void prologue_forward(const std::int32_t* inputs) {
        const PlanOp& op = plan_.prologue.front();
        prologue_.items.clear();
        prologue_.keep(alloc_, "", op, false);
        std::optional<profiler::ScopedRange> range;
        profiler::KernelScope k;
        hook_enter(0, false);
        op_range(range, op, false, op.fwd);
        kernel_range(k, gpt_detail::kernel_name(op, false, cfg_), op.fwd);
        T* out = prologue_.get(KeptId::embedding_out).template data<T>();
        k_.embedding_forward(
            {.out = out,
             .tokens = inputs,
             .wte = p_wte_->weight.template data<T>(),
             .wpe = p_wpe_ != nullptr ? p_wpe_->weight.template data<T>() : nullptr,
             .B = B_,
             .T = T_,
             .C = cfg_.d_model});
        if (dropout_.on()) {
            dropout_.forward(k_, ranges(k), out, prologue_.get(KeptId::embedding_mask),
                             N_ * cfg_.d_model, -1, DropoutSite::embedding);
        }
        if (anomaly_.on()) check_embedding(false);
        k.reset();
        range.reset();
        hook_leave(0, false);
    }

    // ln_f, then the head and the loss, forward and backward fused (the head's input gradient
    // kept as lm_head.dinp); returns the mean loss. The head region stays entered for
    // ln_f_backward; a tied head reads and writes wte.
    float head_forward_backward(const std::int32_t* targets, float dloss) {
        epilogue_.items.clear();
        std::optional<profiler::ScopedRange> range;
        profiler::KernelScope k;
        hook_enter(head_unit(), true);
        if (p_head_ == nullptr) hook_enter(0, true);
        const PlanOp& lnf = plan_.epilogue[0];
        op_range(range, lnf, false, lnf.fwd);
        for (const PlanOp& op : plan_.epilogue)
            epilogue_.keep(alloc_, "", op, false);  // inside ln_f's range
        kernel_range(k, gpt_detail::kernel_name(lnf, false, cfg_), lnf.fwd);
        norm_forward(epilogue_, kLnfKept, block_output(cfg_.n_layers - 1), p_lnf_w_, p_lnf_b_, k);
        if (anomaly_.on()) check_ln_f(false);
        k.reset();
        range.reset();
        KernelCost cost = plan_.epilogue[1].fwd;
        cost += plan_.epilogue[1].bwd_input;
        cost += plan_.epilogue[1].bwd_weight;
        cost += plan_.epilogue[2].fwd;
        op_range(range, "lm_head+loss (fused forward and backward)", cost);
        kernel_range(k, "head_cross_entropy", cost);
        ParamSlot* head = p_head_ != nullptr ? p_head_ : p_wte_;
        const float loss =
            k_.head_cross_entropy({.losses = k_.losses(),
                                   .dx = epilogue_.get(KeptId::lm_head_dinp).template data<T>(),
                                   .dw = head->grad.template data<T>(),
                                   .x = epilogue_.get(KeptId::ln_f_out).template data<T>(),
                                   .w = head->weight.template data<T>(),
                                   .targets = targets,
                                   .M = N_,
                                   .C = cfg_.d_model,
                                   .V = cfg_.vocab_size,
                                   .Vp = cfg_.padded_vocab_size,
                                   .chunk = loss_chunk_,
                                   .dloss = dloss / static_cast<float>(N_),
                                   .scratch = ce_scratch_.template data<float>(),
                                   .gemm_scratch = mm_scratch_.template data<float>()});
        if (anomaly_.on()) check_head(loss, head);
        return loss;
    }

    // dres = ln_f's input gradient from the head's; leaves the head region.
    void ln_f_backward() {
        const PlanOp& lnf = plan_.epilogue[0];
        std::optional<profiler::ScopedRange> range;
        profiler::KernelScope k;
        T* dres = dres_.template data<T>();
        KernelCost cost = lnf.bwd_input;
        cost += lnf.bwd_weight;
        op_range(range, lnf, true, cost);
        zero(dres, N_ * cfg_.d_model);
        kernel_range(k, gpt_detail::kernel_name(lnf, true, cfg_), cost);
        norm_backward(epilogue_, kLnfKept, dres,
                      epilogue_.get(KeptId::lm_head_dinp).template data<T>(),
                      block_output(cfg_.n_layers - 1), p_lnf_w_, p_lnf_b_);
        if (anomaly_.on() && check_backward_) check_ln_f(true);
        k.reset();
        range.reset();
        if (p_head_ == nullptr) hook_leave(0, true);
        hook_leave(head_unit(), true);
        epilogue_.items.clear();
    }

    // The embedding's backward from dres (nothing when frozen: it has no input gradient).
    void prologue_backward(const std::int32_t* inputs) {
        const PlanOp& op = plan_.prologue.front();
        T* dres = dres_.template data<T>();
        hook_enter(0, true);
        if (p_wte_->trainable) {
            std::optional<profiler::ScopedRange> range;
            profiler::KernelScope k;
            op_range(range, op, true, op.bwd_weight);
            if (dropout_.on())
                dropout_.backward(k_, ranges(k), dres, dres, prologue_.get(KeptId::embedding_mask),
                                  N_ * cfg_.d_model);
            kernel_range(k, gpt_detail::kernel_name(op, true, cfg_), op.bwd_weight);
            k_.embedding_backward(
                {.dwte = p_wte_->grad.template data<T>(),
                 .dwpe = p_wpe_ != nullptr ? p_wpe_->grad.template data<T>() : nullptr,
                 .dout = dres,
                 .tokens = inputs,
                 .B = B_,
                 .T = T_,
                 .C = cfg_.d_model});
            if (anomaly_.on() && check_backward_) check_embedding(true);
            k.reset();
            range.reset();
        }
        hook_leave(0, true);
        prologue_.items.clear();
    }

    // An op range when recording.
    std::optional<profiler::ScopedRange>& op_range(std::optional<profiler::ScopedRange>& r, std::string_view name,
                                                   const KernelCost& cost) {
        if (rec_ != nullptr) r.emplace(rec_, name, profiler::Category::op, cost);
        return r;
    }
    // A prologue or epilogue op's range, named from the plan ("ln_f", "ln_f backward"); the name
    // is built only when recording.
    void op_range(std::optional<profiler::ScopedRange>& r, const PlanOp& op, bool backward,
                  const KernelCost& cost) {
        if (rec_ != nullptr)
            op_range(r, std::string(op.name()) + (backward ? " backward" : ""), cost);
    }

    // One kernel call. On the CPU a kernel range on the device track, joined to the op that
    // made it by a flow: the "launch" is the call itself, so the structure matches a GPU trace
    // (host op, launch flow, kernel on the device) and the report, export and viewer read both
    // alike. On a GPU the launches inside are tagged with the name and cost, and the kernels'
    // events come from the device's records (CUPTI: profiler/cupti_collector.h).
    void kernel_range(profiler::KernelScope& k, std::string_view name, const KernelCost& cost) {
        if constexpr (Kernels::kHostTimedKernels) {
            k.host_timed(rec_, name, cost);
        } else {
            k.tagged(tagger_, name, cost);
        }
    }

    // Zeroes a gradient buffer: a memset kernel of its own on the device track.
    template <class U>
    void zero(U* p, std::int64_t n) {
        const auto bytes = static_cast<std::size_t>(n) * sizeof(U);
        profiler::KernelScope k;
        kernel_range(k, "memset", KernelCost{0, 0, bytes, 0});
        k_.zero(static_cast<void*>(p), bytes);
    }

    // Every parameter as the recipe stores it (gpt_params.h), and the slots the ops read.
    void allocate_params(bool master) {
        params_ = gpt_detail::allocate_params(alloc_, cfg_, plan_.in, gpt_detail::storage_dtype<T>(), master);
        p_wte_ = gpt_detail::find_param(params_, "wte");
        p_wpe_ = gpt_detail::find_param(params_, "wpe");
        p_lnf_w_ = gpt_detail::find_param(params_, "ln_f.weight");
        p_lnf_b_ = gpt_detail::find_param(params_, "ln_f.bias");
        p_head_ = gpt_detail::find_param(params_, "lm_head");
        for (int l = 0; l < cfg_.n_layers; ++l) layer_params_.push_back(gpt_detail::layer_params(params_, l));
    }

    // GPT-2's initialization (gpt_params.h), through set_param: rounded into the working copy,
    // quantized for NF4 weights, exact in the master copy.
    void init_params(std::uint64_t seed) {
        gpt_detail::initialize(params_, cfg_, seed,
                               [this](std::size_t i, const float* v) { set_param(i, v); });
    }

    // The buffer plan's (core/buffer_plan.h), allocated in its order, each then handed to the
    // member that uses it.
    void allocate_buffers() {
        loss_chunk_ = loss_chunk_rows(plan_.in);
        gpt_detail::GptBuffers buffers(alloc_, build_buffer_plan(plan_, Kernels::kDevice));
        dres_ = buffers.take(BufferRole::grad_residual);
        dnarrow_ = buffers.take(BufferRole::grad_narrow);
        dwide_ = buffers.take(BufferRole::grad_wide);
        branch_ = buffers.take(BufferRole::branch_out);
        ce_scratch_ = buffers.take(BufferRole::loss_scratch);
        mm_scratch_ = buffers.take(BufferRole::matmul_scratch);
        attn_scratch_ = buffers.take(BufferRole::attention_scratch);
        lora_.allocate(plan_, buffers);
        k_.bind_losses(buffers.take(BufferRole::loss_rows), buffers.take(BufferRole::step_scalars),
                       N_);
        fp8_.allocate(buffers, plan_, k_);
        if (plan_.in.detect_anomaly) enable_anomaly_detection(buffers.take(BufferRole::anomaly_slots));
    }

    const T* block_input(int l) {
        if (l == 0) return prologue_.get(KeptId::embedding_out).template data<T>();
        return layers_[static_cast<std::size_t>(l - 1)].get(KeptId::mlp_res_out).template data<T>();
    }
    const T* block_output(int l) {
        return layers_[static_cast<std::size_t>(l)].get(KeptId::mlp_res_out).template data<T>();
    }

    // The block whose kept tensors kt are.
    int layer_of(const KeptTensors& kt) const {
        const auto l = &kt - layers_.data();
        NAPKIN_ASSERT(l >= 0 && l < static_cast<std::ptrdiff_t>(layers_.size()),
                      "kept tensors of no block");
        return static_cast<int>(l);
    }

    // The kernel ranges an fp8 helper opens inside the op in progress.
    auto ranges(profiler::KernelScope& k) {
        return [this, &k](std::string_view name, const KernelCost& cost) {
            kernel_range(k, name, cost);
        };
    }

    // A kept tensor's data, by id.
    template <class U>
    static U* kept(KeptTensors& kt, KeptId id) {
        return kt.get(id).template data<U>();
    }
    // The gradient a residual branch's ops read: dres, or with dropout dres through the branch's
    // mask, which the residual op's backward puts in branch_.
    T* branch_grad() { return dropout_.on() ? branch_.template data<T>() : dres_.template data<T>(); }

    // A block's forward and backward, op by op (core/engine/gpt_block.h).
    void block_forward(int l, bool recompute);
    bool rebuilds(const PlanOp& op) const;
    bool fusable_residual_norm() const;
    void open_forward_kernel(profiler::KernelScope& kernel, const PlanOp& op);
    void op_forward(const PlanOp& op, int l, bool recompute, KeptTensors& kt,
                    profiler::KernelScope& kernel);
    void block_backward(int l);
    template <class Launch>
    void op_backward(const PlanOp& op, int l, KeptTensors& kt, profiler::KernelScope& kernel,
                     Launch&& launch);
    T* output_of(Tensor& kept);
    void finish_output(KeptTensors& kt, KeptId id, profiler::KernelScope& kernel);
    void norm_forward(KeptTensors& kt, const NormKept& ids, const T* inp, ParamSlot* w,
                      ParamSlot* b, profiler::KernelScope& kernel);
    void residual_norm_forward(KeptTensors& kt, int l, profiler::KernelScope& kernel);
    void norm_backward(KeptTensors& kt, const NormKept& ids, T* dinp, const T* dout, const T* inp,
                       ParamSlot* w, ParamSlot* b);
    void matmul(const PlanOp& op, T* out, KeptTensors& kt, KeptId inp, ParamSlot* w, ParamSlot* b,
                profiler::KernelScope& kernel);
    template <class Launch>
    void matmul_back(const PlanOp& op, T* dinp, const T* dout, KeptTensors& kt, KeptId inp,
                     ParamSlot* w, ParamSlot* b, profiler::KernelScope& kernel, Launch&& launch);
    void lora_forward(const PlanOp& op, const gpt_detail::LoraSlots& slots, KeptTensors& kt,
                      KeptId inp, T* out, KeptId h);
    template <class Launch>
    void lora_backward(const PlanOp& op, const gpt_detail::LoraSlots& slots, KeptTensors& kt,
                       KeptId inp, const T* dout, KeptId h, Launch&& launch);
    void attention_forward(KeptTensors& kt, const PlanOp& op, int l, bool probabilities_only,
                           profiler::KernelScope& kernel);
    template <class Launch>
    void attention_backward(const PlanOp& op, int l, KeptTensors& kt, profiler::KernelScope& kernel,
                            Launch&& launch);
    void activation_forward(KeptTensors& kt, profiler::KernelScope& kernel);
    void fc_gelu_forward(const PlanOp& op, int l, KeptTensors& kt, profiler::KernelScope& kernel);
    void proj_gelu_backward(const PlanOp& op, int l, KeptTensors& kt,
                            profiler::KernelScope& kernel);
    template <class Launch>
    void activation_backward(KeptTensors& kt, Launch&& launch);
    void residual_backward(KeptTensors& kt, KeptId mask, profiler::KernelScope& kernel);
    void branch_dropout(KeptTensors& kt, int l, profiler::KernelScope& kernel, KeptId mask,
                        DropoutSite site);
    static bool recomputes(const PlanOp& op, KeptId id);
    [[noreturn]] static void not_in_block(const PlanOp& op);

    // --detect-anomaly: what each op wrote and read (core/engine/gpt_anomaly.h).
    using Checked = gpt_detail::Checked<T>;
    static std::string relative(const std::string& name, int l);
    Checked act(std::string name, const T* p, std::int64_t cols) const;
    Checked kept_in(KeptTensors& kt, KeptId id);
    Checked kept_out(KeptTensors& kt, KeptId id);
    Checked weight_of(const ParamSlot* p, int l) const;
    Checked grad_of(const ParamSlot* p, int l) const;
    Checked block_input_in(int l);
    void check_reads(const OpSite& site, Checked out, Checked x, const ParamSlot* p,
                     const ParamSlot* q);
    void check_reads_back(const OpSite& site, Checked dx, Checked dout, Checked x,
                          const ParamSlot* p, const ParamSlot* q);
    void check_forward(const PlanOp& op, int l, KeptTensors& kt);
    void check_backward(const PlanOp& op, int l, KeptTensors& kt);
    void check_embedding(bool backward);
    void check_ln_f(bool backward);
    void check_head(float loss, const ParamSlot* head);

    ModelConfig cfg_;
    AccountingAllocator& alloc_;
    Kernels k_;
    OpPlan plan_;
    std::int64_t B_ = 0, T_ = 0, N_ = 0, loss_chunk_ = 0;
    std::vector<ParamSlot> params_;
    std::vector<LayerParams> layer_params_;
    ParamSlot *p_wte_ = nullptr, *p_wpe_ = nullptr, *p_lnf_w_ = nullptr, *p_lnf_b_ = nullptr, *p_head_ = nullptr;
    KeptTensors prologue_, epilogue_;
    std::vector<KeptTensors> layers_;
    Tensor dres_, dnarrow_, dwide_, branch_, ce_scratch_, mm_scratch_, attn_scratch_;
    bool adapters_ = false;  // LoRA/QLoRA: the base frozen, adapters trained
    bool fuse_residual_norm_ = false;     // attn.res's add inside ln_2's kernel (gpt_block.h)
    gpt_detail::Adapters<Kernels> lora_;  // their scale and transients (gpt_lora.h)
    gpt_detail::Dropout<Kernels> dropout_;  // its probability and the micro-batch's seed (gpt_dropout.h)
    gpt_detail::Fp8Casts<Kernels> fp8_;  // fp8-amp's per-GEMM casts (gpt_fp8.h)
    gpt_detail::AnomalyCheck<Kernels> anomaly_;  // --detect-anomaly's slots (anomaly_check.h)
    bool check_backward_ = true;                 // false under fp16-amp: the loss scaler's
    std::vector<std::vector<std::int64_t>> param_shapes_;  // for its messages
    profiler::Recorder* rec_ = nullptr;
    profiler::KernelTagger* tagger_ = nullptr;  // GPU profiling: names and costs on launches
    GptHooks* hooks_ = nullptr;
};

}  // namespace napkin

#include "core/engine/gpt_anomaly.h"  // NOLINT(build/include): its anomaly checks
#include "core/engine/gpt_block.h"    // NOLINT(build/include): the class's block members
