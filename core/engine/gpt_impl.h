// The GPT engine's one orchestration, over a kernel backend: forward walks the plan's ops in
// order, backward walks them in reverse. Each op's kept tensors are allocated from the plan's own
// list (name, numel, dtype), so the activations the allocator measures are, by construction, the
// ones the estimator's detailed view sums.
//
// GptImpl<Kernels> is instantiated with CpuKernels<T> (core/engine/cpu_kernels.h, in gpt.cpp)
// and CudaKernels<T> (core/engine/cuda_kernels.h, in cuda_device.cpp). A backend struct has the
// kernels' names and the CPU's signatures (llm.c: the CPU is the specification and the CUDA
// code mirrors it name for name), plus the memory operations besides kernels (zero, parameter
// values in and out as fp32, the token check); nothing here knows the device. The buffer plan
// (core/buffer_plan.h) sizes every scratch buffer, for either backend.
// Tensors live where the allocator's raw memory puts them: host memory or device memory.
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
    void set_recorder(profiler::Recorder* recorder) override { rec_ = recorder; }
    void set_kernel_tagger(profiler::KernelTagger* tagger) override { tagger_ = tagger; }
    void set_hooks(GptHooks* hooks) override { hooks_ = hooks; }
    void set_dropout_seed(std::uint64_t seed) override { dropout_.set_seed(seed); }

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

    float forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float dloss) override {
        k_.check_tokens(inputs, N_, cfg_.vocab_size);
        const int L = cfg_.n_layers;
        const bool full_ckpt = plan_.in.checkpointing == Checkpointing::full;

        // Forward: prologue, blocks, epilogue. Recomputed tensors (checkpointing) are freed as
        // soon as their block is done and rebuilt in the backward.
        std::optional<profiler::ScopedRange> phase;
        if (rec_ != nullptr) phase.emplace(rec_, "forward", profiler::Category::forward);
        prologue_.items.clear();
        prologue_.keep(alloc_, "", plan_.prologue.front(), false);
        std::optional<profiler::ScopedRange> r_emb;
        profiler::KernelScope k;
        const int head_unit = L + 1;  // units: 0 embeddings, 1 + l block l, L + 1 head (GptHooks)
        hook_enter(0, false);
        op_range(r_emb, "embedding", plan_.prologue.front().fwd);
        kernel_range(k, gpt_detail::kernel_name(plan_.prologue.front(), false, cfg_), plan_.prologue.front().fwd);
        k_.embedding_forward(prologue_.get("embedding.out").template data<T>(), inputs, p_wte_->weight.template data<T>(),
                                  p_wpe_ != nullptr ? p_wpe_->weight.template data<T>() : nullptr, B_, T_, cfg_.d_model);
        if (dropout_.on()) {
            dropout_.forward(k_, ranges(k), prologue_.get("embedding.out").template data<T>(),
                             prologue_.get("embedding.mask"), N_ * cfg_.d_model, -1, DropoutSite::embedding);
        }
        k.reset();
        r_emb.reset();
        hook_leave(0, false);
        layers_.clear();
        layers_.resize(static_cast<std::size_t>(L));
        for (int l = 0; l < L; ++l) {
            std::optional<profiler::ScopedRange> layer;
            if (rec_ != nullptr) layer.emplace(rec_, "h." + std::to_string(l), profiler::Category::layer);
            hook_enter(l + 1, false);
            block_forward(l, false);
            hook_leave(l + 1, false);
        }
        epilogue_.items.clear();
        const T* last = block_output(L - 1);
        std::optional<profiler::ScopedRange> r_ep;
        // The head region runs forward and backward fused; a tied head reads and writes wte.
        hook_enter(head_unit, true);
        if (p_head_ == nullptr) hook_enter(0, true);
        op_range(r_ep, "ln_f", plan_.epilogue[0].fwd);
        for (const PlanOp& op : plan_.epilogue) epilogue_.keep(alloc_, "", op, false);  // inside ln_f's range
        kernel_range(k, gpt_detail::kernel_name(plan_.epilogue[0], false, cfg_), plan_.epilogue[0].fwd);
        norm_forward(epilogue_, "ln_f", last, p_lnf_w_, p_lnf_b_, k);
        k.reset();
        r_ep.reset();
        KernelCost head_cost = plan_.epilogue[1].fwd;
        head_cost += plan_.epilogue[1].bwd_input;
        head_cost += plan_.epilogue[1].bwd_weight;
        head_cost += plan_.epilogue[2].fwd;
        op_range(r_ep, "lm_head+loss (fused forward and backward)", head_cost);
        kernel_range(k, "head_cross_entropy", head_cost);
        ParamSlot* head = p_head_ != nullptr ? p_head_ : p_wte_;
        const float loss = k_.head_cross_entropy(
            k_.losses(), epilogue_.get("lm_head.dinp").template data<T>(), head->grad.template data<T>(),
            epilogue_.get("ln_f.out").template data<T>(), head->weight.template data<T>(), targets, N_, cfg_.d_model,
            cfg_.vocab_size, cfg_.padded_vocab_size, loss_chunk_, dloss / static_cast<float>(N_),
            ce_scratch_.template data<float>());
        k.reset();
        r_ep.reset();
        // Backward.
        phase.reset();
        if (rec_ != nullptr) phase.emplace(rec_, "backward", profiler::Category::backward);
        T* dres = dres_.template data<T>();
        KernelCost lnf_cost = plan_.epilogue[0].bwd_input;
        lnf_cost += plan_.epilogue[0].bwd_weight;
        op_range(r_ep, "ln_f backward", lnf_cost);
        zero(dres, N_ * cfg_.d_model);
        kernel_range(k, gpt_detail::kernel_name(plan_.epilogue[0], true, cfg_), lnf_cost);
        norm_backward(epilogue_, "ln_f", dres, epilogue_.get("lm_head.dinp").template data<T>(), last, p_lnf_w_,
                      p_lnf_b_);
        k.reset();
        r_ep.reset();
        if (p_head_ == nullptr) hook_leave(0, true);
        hook_leave(head_unit, true);
        epilogue_.items.clear();
        for (int l = L - 1; l >= 0; --l) {
            std::optional<profiler::ScopedRange> layer;
            if (rec_ != nullptr) layer.emplace(rec_, "h." + std::to_string(l) + " backward", profiler::Category::layer);
            hook_enter(l + 1, true);
            if (full_ckpt || plan_.in.checkpointing == Checkpointing::selective) block_forward(l, true);
            block_backward(l);  // frees the layer's activations at its end
            hook_leave(l + 1, true);
        }
        hook_enter(0, true);
        if (p_wte_->trainable) {  // the embedding has no input gradient: frozen, nothing to do
            op_range(r_emb, "embedding backward", plan_.prologue.front().bwd_weight);
            if (dropout_.on())
                dropout_.backward(k_, ranges(k), dres, dres, prologue_.get("embedding.mask"), N_ * cfg_.d_model);
            kernel_range(k, gpt_detail::kernel_name(plan_.prologue.front(), true, cfg_),
                         plan_.prologue.front().bwd_weight);
            k_.embedding_backward(p_wte_->grad.template data<T>(),
                                  p_wpe_ != nullptr ? p_wpe_->grad.template data<T>() : nullptr, dres,
                                  inputs, B_, T_, cfg_.d_model);
            k.reset();
            r_emb.reset();
        }
        hook_leave(0, true);
        prologue_.items.clear();
        return loss;
    }

private:
    void hook_enter(int unit, bool backward) {
        if (hooks_ != nullptr) hooks_->enter(unit, backward);
    }
    void hook_leave(int unit, bool backward) {
        if (hooks_ != nullptr) hooks_->leave(unit, backward);
    }

    // An op range when recording; the name is built only then.
    std::optional<profiler::ScopedRange>& op_range(std::optional<profiler::ScopedRange>& r, std::string_view name,
                                                   const KernelCost& cost) {
        if (rec_ != nullptr) r.emplace(rec_, name, profiler::Category::op, cost);
        return r;
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
        std::mt19937_64 rng(seed);
        std::vector<float> buf;
        for (std::size_t i = 0; i < params_.size(); ++i) {
            gpt_detail::initial_values(params_[i], cfg_, rng, buf);
            set_param(i, buf.data());
        }
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
        k_.bind_losses(buffers.take(BufferRole::loss_rows), N_);
        fp8_.allocate(buffers);
    }

    const T* block_input(int l) {
        if (l == 0) return prologue_.get("embedding.out").template data<T>();
        return layers_[static_cast<std::size_t>(l - 1)].get("mlp.res.out").template data<T>();
    }
    const T* block_output(int l) { return layers_[static_cast<std::size_t>(l)].get("mlp.res.out").template data<T>(); }

    // The kernel ranges an fp8 helper opens inside the op in progress.
    auto ranges(profiler::KernelScope& k) {
        return [this, &k](std::string_view name, const KernelCost& cost) {
            kernel_range(k, name, cost);
        };
    }

    // Where a producer writes a GEMM input it keeps: the kept tensor itself, or, when the plan
    // keeps it in fp8 (fp8-amp), dnarrow_ (N x max(C, F), the backward's buffer, free during any
    // forward, a recomputing one included), from which finish_output casts it.
    T* output_of(Tensor& kept) {
        return gpt_detail::is_fp8(kept) ? dnarrow_.template data<T>() : kept.template data<T>();
    }
    void finish_output(KeptTensors& kt, const std::string& name, profiler::KernelScope& kernel) {
        Tensor& kept = kt.get(name);
        if (gpt_detail::is_fp8(kept))
            fp8_.cast_output(k_, ranges(kernel), kept, kt.get(name + ".scale"),
                             dnarrow_.template data<T>());
    }

    void norm_forward(KeptTensors& kept, std::string_view name, const T* inp, ParamSlot* w,
                      ParamSlot* b, profiler::KernelScope& kernel) {
        const std::string n(name);
        T* out = output_of(kept.get(n + ".out"));
        float* rstd = kept.get(n + ".rstd").template data<float>();
        if (cfg_.norm == NormKind::layernorm) {
            k_.layernorm_forward(out, kept.get(n + ".mean").template data<float>(), rstd, inp,
                                      w->weight.template data<T>(), b != nullptr ? b->weight.template data<T>() : nullptr,
                                      N_, cfg_.d_model);
        } else {
            k_.rmsnorm_forward(out, rstd, inp, w->weight.template data<T>(), N_, cfg_.d_model);
        }
        finish_output(kept, n + ".out", kernel);
    }

    void norm_backward(KeptTensors& kept, std::string_view name, T* dinp, const T* dout, const T* inp, ParamSlot* w,
                       ParamSlot* b) {
        const std::string n(name);
        const float* rstd = kept.get(n + ".rstd").template data<float>();
        if (cfg_.norm == NormKind::layernorm) {
            k_.layernorm_backward(dinp, w->grad.template data<T>(), b != nullptr ? b->grad.template data<T>() : nullptr,
                                       dout, inp, w->weight.template data<T>(), kept.get(n + ".mean").template data<float>(),
                                       rstd, N_, cfg_.d_model, mm_scratch_.template data<float>());
        } else {
            k_.rmsnorm_backward(dinp, w->grad.template data<T>(), dout, inp, w->weight.template data<T>(), rstd, N_,
                                     cfg_.d_model, mm_scratch_.template data<float>());
        }
    }

    // A GEMM on the input kept under `inp` (bf16, or fp8 codes with "<inp>.scale": gpt_fp8.h).
    void matmul(const PlanOp& op, T* out, KeptTensors& kt, std::string_view inp, ParamSlot* w,
                ParamSlot* b, profiler::KernelScope& kernel) {
        const auto& s = std::get<MatmulShape>(op.shape);
        const Tensor& x = kt.get(inp);
        const T* bias = b != nullptr ? b->weight.template data<T>() : nullptr;
        if (gpt_detail::is_fp8(x)) {
            fp8_.forward(k_, ranges(kernel), s, out, x, kt.get(std::string(inp) + ".scale"),
                         w->weight.template data<T>(), bias, mm_scratch_.template data<float>());
            return;
        }
        const T* weight = lora_.weight(k_, ranges(kernel), *w);
        if (rec_ != nullptr)
            kernel_range(kernel, gpt_detail::kernel_name(op, false, cfg_), op.fwd);
        k_.matmul_forward(out, x.template data<T>(), weight, bias, s.M, s.N, s.K,
                          mm_scratch_.template data<float>());
    }

    template <class Launch>
    void matmul_back(const PlanOp& op, T* dinp, const T* dout, KeptTensors& kt,
                     std::string_view inp, ParamSlot* w, ParamSlot* b,
                     profiler::KernelScope& kernel, Launch&& launch) {
        const auto& s = std::get<MatmulShape>(op.shape);
        const Tensor& x = kt.get(inp);
        T* dbias = b != nullptr ? b->grad.template data<T>() : nullptr;
        if (gpt_detail::is_fp8(x)) {
            fp8_.backward(k_, ranges(kernel), s, dinp, w->grad.template data<T>(), dbias, dout, x,
                          kt.get(std::string(inp) + ".scale"), w->weight.template data<T>(),
                          mm_scratch_.template data<float>());
            return;
        }
        const T* weight = lora_.weight(k_, ranges(kernel), *w);
        launch();
        k_.matmul_backward(dinp, w->grad.template data<T>(), dbias, dout, x.template data<T>(),
                           weight, s.M, s.N, s.K, mm_scratch_.template data<float>());
    }

    // A linear layer's adapter (op "<linear>.lora"): its slots, the input its base GEMM reads,
    // and the kept tensor the GEMM writes (empty: branch_, a projection into the residual stream,
    // whose output gradient is then dres_; otherwise dwide_).
    struct LoraSite {
        gpt_detail::LoraSlots slots;
        std::string_view inp, out;
    };
    static LoraSite lora_site(const LayerParams& lp, std::string_view op) {
        if (op == "attn.qkv.lora") return {lp.qkv_lora, "ln_1.out", "attn.qkv.out"};
        if (op == "attn.proj.lora") return {lp.proj_lora, "attn.out", ""};
        if (op == "mlp.fc.lora") return {lp.fc_lora, "ln_2.out", "mlp.fc.out"};
        if (op == "mlp.proj.lora") return {lp.down_lora, "mlp.act.out", ""};
        throw UsageError("napkin train: the engine cannot run op '" + std::string(op) + "' yet");
    }

    // The base GEMM's output += scale * (inp @ A^T) @ B^T, keeping h (gpt_lora.h).
    void lora_forward(const PlanOp& op, const LayerParams& lp, KeptTensors& kt) {
        const LoraSite site = lora_site(lp, op.name);
        T* out = site.out.empty() ? branch_.template data<T>() : kt.get(site.out).template data<T>();
        lora_.forward(k_, op, site.slots, kt.get(site.inp).template data<T>(),
                      kt.get(std::string(op.name) + ".h").template data<T>(), out,
                      mm_scratch_.template data<float>());
    }

    // The adapter's gradients from the base GEMM's output gradient, and its share of the input
    // gradient added into dnarrow_ (N, K), where the base GEMM's backward then adds its own.
    void lora_backward(const PlanOp& op, const LayerParams& lp, KeptTensors& kt) {
        const LoraSite site = lora_site(lp, op.name);
        const T* dout = site.out.empty() ? branch_grad() : dwide_.template data<T>();
        lora_.backward(k_, op, site.slots, dnarrow_.template data<T>(), dout,
                       kt.get(site.inp).template data<T>(),
                       kt.get(std::string(op.name) + ".h").template data<T>(),
                       mm_scratch_.template data<float>());
    }

    // Runs block l's forward. recompute: only the tensors checkpointing dropped are allocated
    // (the rest are still kept), and the ops whose outputs are all kept are skipped.
    void block_forward(int l, bool recompute) {
        KeptTensors& kt = layers_[static_cast<std::size_t>(l)];
        const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
        const std::string prefix = "h." + std::to_string(l) + ".";
        const std::int64_t C = cfg_.d_model;
        const T* x = block_input(l);
        const bool full = plan_.in.checkpointing == Checkpointing::full;
        for (const PlanOp& op : plan_.block) {
            if (recompute) {
                // Rebuild what checkpointing dropped: ops with recomputed outputs, and under full
                // recomputation the ops that keep nothing (rope, projections) in between.
                bool rebuilds = full && op.n_saved == 0;
                for (int i = 0; i < op.n_saved; ++i) rebuilds |= op.saved[static_cast<std::size_t>(i)].recomputed;
                if (!rebuilds) continue;
            }
            const std::string_view n = op.name;
            std::optional<profiler::ScopedRange> range;
            profiler::KernelScope kernel;
            if (rec_ != nullptr) {
                range.emplace(rec_, prefix + std::string(n) + (recompute ? " (recompute)" : ""), profiler::Category::op,
                              op.fwd);
            }
            kt.keep(alloc_, prefix, op, recompute);  // the op allocates what it keeps: inside its range
            // A GEMM opens its own kernel ranges (fp8-amp casts its weight first).
            if (rec_ != nullptr && op.kind != OpKind::matmul)
                kernel_range(kernel, gpt_detail::kernel_name(op, false, cfg_), op.fwd);
            if (n == "ln_1") {
                norm_forward(kt, "ln_1", x, lp.ln1_w, lp.ln1_b, kernel);
            } else if (n == "attn.qkv") {
                matmul(op, kt.get("attn.qkv.out").template data<T>(), kt, "ln_1.out", lp.qkv_w,
                       lp.qkv_b, kernel);
            } else if (n == "attn.rope") {
                k_.rope_forward(kt.get("attn.qkv.out").template data<T>(), B_, T_, cfg_.n_heads, cfg_.n_kv_heads,
                                     cfg_.head_dim());
            } else if (n == "attn.core") {
                // Selective: only the probabilities are rebuilt; attn.out is still kept.
                attention_forward(kt, op, l, recompute && !recomputes(op, "attn.out"), kernel);
            } else if (n == "attn.proj") {
                matmul(op, branch_.template data<T>(), kt, "attn.out", lp.proj_w, lp.proj_b,
                       kernel);
                if (!adapters_) branch_dropout(kt, l, kernel, "attn.proj.mask", DropoutSite::attention_residual);
            } else if (n == "attn.res") {
                k_.residual_forward(kt.get("attn.res.out").template data<T>(), x, branch_.template data<T>(), N_ * C);
            } else if (n == "ln_2") {
                norm_forward(kt, "ln_2", kt.get("attn.res.out").template data<T>(), lp.ln2_w,
                             lp.ln2_b, kernel);
            } else if (n == "mlp.fc") {
                matmul(op, kt.get("mlp.fc.out").template data<T>(), kt, "ln_2.out", lp.fc_w,
                       lp.fc_b, kernel);
            } else if (n == "mlp.act") {
                T* out = output_of(kt.get("mlp.act.out"));
                const T* inp = kt.get("mlp.fc.out").template data<T>();
                if (cfg_.mlp == MlpKind::gelu) k_.gelu_forward(out, inp, N_ * cfg_.d_ff);
                else k_.swiglu_forward(out, inp, N_, cfg_.d_ff);
                finish_output(kt, "mlp.act.out", kernel);
            } else if (n == "mlp.proj") {
                matmul(op, branch_.template data<T>(), kt, "mlp.act.out", lp.down_w, lp.down_b,
                       kernel);
                if (!adapters_) branch_dropout(kt, l, kernel, "mlp.proj.mask", DropoutSite::mlp_residual);
            } else if (n == "mlp.res") {
                k_.residual_forward(kt.get("mlp.res.out").template data<T>(), kt.get("attn.res.out").template data<T>(),
                                         branch_.template data<T>(), N_ * C);
            } else if (op.kind == OpKind::lora) {
                lora_forward(op, lp, kt);
                // A projection's adapter is the branch's last writer: the dropout follows it.
                if (n == "attn.proj.lora") branch_dropout(kt, l, kernel, "attn.proj.mask", DropoutSite::attention_residual);
                if (n == "mlp.proj.lora") branch_dropout(kt, l, kernel, "mlp.proj.mask", DropoutSite::mlp_residual);
            } else {
                throw UsageError("napkin train: the engine cannot run op '" + std::string(n) + "' yet");
            }
            // Checkpointing drops what backward rebuilds once the block's last op has run; the
            // frees are that op's work (its range), not time between ops.
            if (!recompute && &op == &plan_.block.back() && plan_.in.checkpointing != Checkpointing::none) {
                kernel.reset();
                kt.release_recomputed(plan_.block);
            }
        }
    }

    // The residual branch's dropout (gpt_dropout.h), in place on branch_, its mask kept by the
    // branch's projection.
    void branch_dropout(KeptTensors& kt, int l, profiler::KernelScope& kernel, std::string_view mask,
                        DropoutSite site) {
        if (dropout_.on())
            dropout_.forward(k_, ranges(kernel), branch_.template data<T>(), kt.get(mask), N_ * cfg_.d_model, l, site);
    }

    // The gradient a residual branch's ops read: dres, or with dropout dres through the branch's
    // mask, which the residual op's backward puts in branch_.
    T* branch_grad() { return dropout_.on() ? branch_.template data<T>() : dres_.template data<T>(); }

    // Whether checkpointing rebuilds the op's kept tensor `name`.
    static bool recomputes(const PlanOp& op, std::string_view name) {
        for (int i = 0; i < op.n_saved; ++i) {
            if (op.saved[static_cast<std::size_t>(i)].name == name)
                return op.saved[static_cast<std::size_t>(i)].recomputed;
        }
        return false;
    }

    void attention_forward(KeptTensors& kt, const PlanOp& op, int l, bool probabilities_only,
                           profiler::KernelScope& kernel) {
        const auto& s = std::get<AttentionShape>(op.shape);
        const T* qkv = kt.get("attn.qkv.out").template data<T>();
        if (s.impl == AttentionImpl::naive) {
            // Rebuilding P alone still produces an output; write it to scratch.
            T* out =
                probabilities_only ? branch_.template data<T>() : output_of(kt.get("attn.out"));
            const AttentionDropout<T> drop = dropout_.on() ? dropout_.attention(kt, l) : AttentionDropout<T>{};
            k_.attention_naive_forward(out, kt.get("attn.p").template data<T>(), qkv, s.B, s.T, s.NH, s.KVH, s.HD,
                                       dropout_.on() ? &drop : nullptr);
        } else {
            const AttentionDropout<T> drop = dropout_.flash_attention(l);
            k_.attention_flash_forward(output_of(kt.get("attn.out")),
                                       kt.get("attn.lse").template data<float>(), qkv, s.B, s.T,
                                       s.NH, s.KVH, s.HD, dropout_.on() ? &drop : nullptr);
        }
        if (!probabilities_only) finish_output(kt, "attn.out", kernel);
    }

    void block_backward(int l) {
        KeptTensors& kt = layers_[static_cast<std::size_t>(l)];
        const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
        const std::int64_t C = cfg_.d_model;
        const T* x = block_input(l);
        T* dres = dres_.template data<T>();
        T* dnarrow = dnarrow_.template data<T>();
        T* dwide = dwide_.template data<T>();
        for (auto it = plan_.block.rbegin(); it != plan_.block.rend(); ++it) {
            const PlanOp& op = *it;
            const std::string_view n = op.name;
            std::optional<profiler::ScopedRange> range;
            profiler::KernelScope kernel;
            KernelCost cost = op.bwd_input;
            cost += op.bwd_weight;
            if (rec_ != nullptr) {
                range.emplace(rec_, "h." + std::to_string(l) + "." + std::string(n) + " backward", profiler::Category::op,
                              cost);
            }
            // The op's kernel starts here (after the memsets that clear its outputs).
            auto launch = [&] { kernel_range(kernel, gpt_detail::kernel_name(op, true, cfg_), cost); };
            if (n == "mlp.res" || n == "attn.res") {
                // The branch's gradient is the residual stream's: dres is read by the branch
                // below, or with dropout dres through the branch's mask, into branch_.
                if (dropout_.on()) {
                    dropout_.backward(k_, ranges(kernel), branch_.template data<T>(), dres,
                                      kt.get(n == "attn.res" ? "attn.proj.mask" : "mlp.proj.mask"), N_ * C);
                }
            } else if (op.kind == OpKind::lora) {
                const auto& s = std::get<LoraShape>(op.shape);
                zero(dnarrow, s.M * s.K);  // its input gradient starts here
                launch();
                lora_backward(op, lp, kt);
            } else if (n == "mlp.proj") {
                if (!adapters_) zero(dnarrow, N_ * cfg_.d_ff);  // else its adapter's backward did
                matmul_back(op, dnarrow, branch_grad(), kt, "mlp.act.out", lp.down_w, lp.down_b, kernel,
                            launch);
            } else if (n == "mlp.act") {
                const std::int64_t cols = cfg_.mlp == MlpKind::swiglu ? 2 * cfg_.d_ff : cfg_.d_ff;
                zero(dwide, N_ * cols);
                launch();
                const T* inp = kt.get("mlp.fc.out").template data<T>();
                if (cfg_.mlp == MlpKind::gelu) k_.gelu_backward(dwide, inp, dnarrow, N_ * cfg_.d_ff);
                else k_.swiglu_backward(dwide, inp, dnarrow, N_, cfg_.d_ff);
            } else if (n == "mlp.fc") {
                if (!adapters_) zero(dnarrow, N_ * C);
                matmul_back(op, dnarrow, dwide, kt, "ln_2.out", lp.fc_w, lp.fc_b, kernel, launch);
            } else if (n == "ln_2") {
                launch();
                norm_backward(kt, "ln_2", dres, dnarrow, kt.get("attn.res.out").template data<T>(), lp.ln2_w, lp.ln2_b);
            } else if (n == "attn.proj") {
                if (!adapters_) zero(dnarrow, N_ * C);
                matmul_back(op, dnarrow, branch_grad(), kt, "attn.out", lp.proj_w, lp.proj_b, kernel,
                            launch);
            } else if (n == "attn.core") {
                const auto& s = std::get<AttentionShape>(op.shape);
                zero(dwide, N_ * cfg_.qkv_dim());
                const T* qkv = kt.get("attn.qkv.out").template data<T>();
                if (s.impl == AttentionImpl::naive) {
                    launch();
                    const AttentionDropout<T> drop = dropout_.on() ? dropout_.attention(kt, l) : AttentionDropout<T>{};
                    k_.attention_naive_backward(dwide, attn_scratch_.template data<float>(), dnarrow, qkv,
                                                kt.get("attn.p").template data<T>(), s.B, s.T, s.NH, s.KVH, s.HD,
                                                dropout_.on() ? &drop : nullptr);
                } else {
                    // Flash reads its output O; fp8-amp keeps it as codes: dequantized into branch_
                    // (N, C), free during the backward.
                    const Tensor& o = kt.get("attn.out");
                    const T* out =
                        gpt_detail::is_fp8(o)
                            ? fp8_.dequantized(k_, ranges(kernel), o, kt.get("attn.out.scale"),
                                               branch_.template data<T>())
                            : o.template data<T>();
                    launch();
                    const AttentionDropout<T> drop = dropout_.flash_attention(l);
                    k_.attention_flash_backward(dwide, dnarrow, out, qkv,
                                                kt.get("attn.lse").template data<float>(), s.B, s.T,
                                                s.NH, s.KVH, s.HD, dropout_.on() ? &drop : nullptr);
                }
            } else if (n == "attn.rope") {
                launch();
                k_.rope_backward(dwide, B_, T_, cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim());
            } else if (n == "attn.qkv") {
                if (!adapters_) zero(dnarrow, N_ * C);
                matmul_back(op, dnarrow, dwide, kt, "ln_1.out", lp.qkv_w, lp.qkv_b, kernel, launch);
            } else if (n == "ln_1") {
                launch();
                norm_backward(kt, "ln_1", dres, dnarrow, x, lp.ln1_w, lp.ln1_b);
            } else {
                throw UsageError("napkin train: the engine cannot run op '" + std::string(n) + "' yet");
            }
            // After the block's first op the layer's activations are dead: freeing them is that
            // op's work (its range), not time between ops.
            if (std::next(it) == plan_.block.rend()) {
                kernel.reset();
                kt.items.clear();
            }
        }
    }

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
    gpt_detail::Adapters<Kernels> lora_;  // their scale and transients (gpt_lora.h)
    gpt_detail::Dropout<Kernels> dropout_;  // its probability and the micro-batch's seed (gpt_dropout.h)
    gpt_detail::Fp8Casts<Kernels> fp8_;  // fp8-amp's per-GEMM casts (gpt_fp8.h)
    profiler::Recorder* rec_ = nullptr;
    profiler::KernelTagger* tagger_ = nullptr;  // GPU profiling: names and costs on launches
    GptHooks* hooks_ = nullptr;
};

}  // namespace napkin
