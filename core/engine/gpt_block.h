// One transformer block of the GPT engine, forward and backward: GptImpl's members that walk the
// plan's block ops and dispatch each on its role (OpRole, core/op_plan.h) to the backend's
// kernels. Every switch names every role and has no default, so a role added to the plan and
// forgotten here is a compile error (-Wswitch under NAPKIN_WERROR). Kept tensors are read by id
// (KeptId). Part of core/engine/gpt_impl.h, which includes this file after the class.
#pragma once

#include "core/engine/gpt_impl.h"

namespace napkin {

// Runs block l's forward. recompute: only the tensors checkpointing dropped are allocated (the
// rest are still kept), and the ops whose outputs are all kept are skipped.
template <class Kernels>
void GptImpl<Kernels>::block_forward(int l, bool recompute) {
    KeptTensors& kt = layers_[static_cast<std::size_t>(l)];
    const std::string prefix = "h." + std::to_string(l) + ".";
    for (const PlanOp& op : plan_.block) {
        if (recompute && !rebuilds(op)) continue;
        std::optional<profiler::ScopedRange> range;
        profiler::KernelScope kernel;
        if (rec_ != nullptr) {
            range.emplace(rec_, prefix + std::string(op.name()) + (recompute ? " (recompute)" : ""),
                          profiler::Category::op, op.fwd);
        }
        kt.keep(alloc_, prefix, op, recompute);  // the op allocates what it keeps: inside its range
        if (rec_ != nullptr) open_forward_kernel(kernel, op);
        op_forward(op, l, recompute, kt, kernel);
        if (anomaly_.on() && !recompute) check_forward(op, l, kt);  // the rebuild is the same
        // Checkpointing drops what backward rebuilds once the block's last op has run; the
        // frees are that op's work (its range), not time between ops.
        if (!recompute && &op == &plan_.block.back() &&
            plan_.in.checkpointing != Checkpointing::none) {
            kernel.reset();
            kt.release_recomputed(plan_.block);
        }
    }
}

// Whether checkpointing's recompute rebuilds op: the ops with recomputed outputs, and under full
// recomputation the ops that keep nothing (rope, projections) in between.
template <class Kernels>
bool GptImpl<Kernels>::rebuilds(const PlanOp& op) const {
    bool rebuilt = plan_.in.checkpointing == Checkpointing::full && op.n_saved == 0;
    for (int i = 0; i < op.n_saved; ++i)
        rebuilt |= op.saved[static_cast<std::size_t>(i)].recomputed;
    return rebuilt;
}

// attn.res's add runs in ln_2's kernel (residual_layernorm_forward) when ln_2 is a layernorm
// right after it and checkpointing rebuilds the two together (it does: full both, selective
// neither).
template <class Kernels>
bool GptImpl<Kernels>::fusable_residual_norm() const {
    if (cfg_.norm != NormKind::layernorm) return false;
    for (std::size_t i = 0; i + 1 < plan_.block.size(); ++i) {
        const PlanOp& res = plan_.block[i];
        const PlanOp& norm = plan_.block[i + 1];
        if (res.role == OpRole::attn_res)
            return norm.role == OpRole::ln_2 && rebuilds(res) == rebuilds(norm);
    }
    return false;
}

// The range of the kernel an op's forward launches (a GEMM opens its own: fp8-amp casts its
// weight first); the fused attn.res and ln_2 launch one kernel, in ln_2's range.
template <class Kernels>
void GptImpl<Kernels>::open_forward_kernel(profiler::KernelScope& kernel, const PlanOp& op) {
    if (op.kind == OpKind::matmul) return;
    if (fuse_residual_norm_ && op.role == OpRole::attn_res) return;
    if (plan_.fusions.gelu && op.role == OpRole::mlp_act) return;  // in mlp.fc's GEMM
    if (fuse_residual_norm_ && op.role == OpRole::ln_2) {
        kernel_range(kernel, "residual_layernorm_forward",
                     residual_layernorm_forward_cost(std::get<NormShape>(op.shape)));
        return;
    }
    kernel_range(kernel, gpt_detail::kernel_name(op, false, cfg_), op.fwd);
}

// One op of block l's forward.
template <class Kernels>
void GptImpl<Kernels>::op_forward(const PlanOp& op, int l, bool recompute, KeptTensors& kt,
                                  profiler::KernelScope& kernel) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    T* branch = branch_.template data<T>();
    switch (op.role) {  // the roles in the forward's order
        case OpRole::embedding:
            return not_in_block(op);
        case OpRole::ln_1:
            return norm_forward(kt, kLn1Kept, block_input(l), lp.ln1_w, lp.ln1_b, kernel);
        case OpRole::attn_qkv:
            return matmul(op, kept<T>(kt, KeptId::attn_qkv_out), kt, KeptId::ln_1_out, lp.qkv_w,
                          lp.qkv_b, kernel);
        case OpRole::attn_qkv_lora:
            return lora_forward(op, lp.qkv_lora, kt, KeptId::ln_1_out,
                                kept<T>(kt, KeptId::attn_qkv_out), KeptId::attn_qkv_lora_h);
        case OpRole::attn_rope:
            return k_.rope_forward({.qkv = kept<T>(kt, KeptId::attn_qkv_out),
                                    .B = B_,
                                    .T = T_,
                                    .NH = cfg_.n_heads,
                                    .KVH = cfg_.n_kv_heads,
                                    .HD = cfg_.head_dim()});
        case OpRole::attn_core:
            // Selective: only the probabilities are rebuilt; attn.out is still kept.
            return attention_forward(kt, op, l, recompute && !recomputes(op, KeptId::attn_out),
                                     kernel);
        case OpRole::attn_proj:
            matmul(op, branch, kt, KeptId::attn_out, lp.proj_w, lp.proj_b, kernel);
            if (!adapters_)
                branch_dropout(kt, l, kernel, KeptId::attn_proj_mask,
                               DropoutSite::attention_residual);
            return;
        case OpRole::attn_proj_lora:
            // A projection's adapter is the branch's last writer: the dropout follows it.
            lora_forward(op, lp.proj_lora, kt, KeptId::attn_out, branch, KeptId::attn_proj_lora_h);
            return branch_dropout(kt, l, kernel, KeptId::attn_proj_mask,
                                  DropoutSite::attention_residual);
        case OpRole::attn_res:
            if (fuse_residual_norm_) return;  // in ln_2's kernel
            return k_.residual_forward({.out = kept<T>(kt, KeptId::attn_res_out),
                                        .a = block_input(l),
                                        .b = branch,
                                        .n = N_ * cfg_.d_model});
        case OpRole::ln_2:
            if (fuse_residual_norm_) return residual_norm_forward(kt, l, kernel);
            return norm_forward(kt, kLn2Kept, kept<T>(kt, KeptId::attn_res_out), lp.ln2_w, lp.ln2_b,
                                kernel);
        case OpRole::mlp_fc:
            if (plan_.fusions.gelu) return fc_gelu_forward(op, l, kt, kernel);
            return matmul(op, kept<T>(kt, KeptId::mlp_fc_out), kt, KeptId::ln_2_out, lp.fc_w,
                          lp.fc_b, kernel);
        case OpRole::mlp_fc_lora:
            return lora_forward(op, lp.fc_lora, kt, KeptId::ln_2_out,
                                kept<T>(kt, KeptId::mlp_fc_out), KeptId::mlp_fc_lora_h);
        case OpRole::mlp_act:
            if (plan_.fusions.gelu) return;  // in mlp.fc's GEMM epilogue
            return activation_forward(kt, kernel);
        case OpRole::mlp_proj:
            matmul(op, branch, kt, KeptId::mlp_act_out, lp.down_w, lp.down_b, kernel);
            if (!adapters_)
                branch_dropout(kt, l, kernel, KeptId::mlp_proj_mask, DropoutSite::mlp_residual);
            return;
        case OpRole::mlp_proj_lora:
            lora_forward(op, lp.down_lora, kt, KeptId::mlp_act_out, branch,
                         KeptId::mlp_proj_lora_h);
            return branch_dropout(kt, l, kernel, KeptId::mlp_proj_mask, DropoutSite::mlp_residual);
        case OpRole::mlp_res:
            return k_.residual_forward({.out = kept<T>(kt, KeptId::mlp_res_out),
                                        .a = kept<T>(kt, KeptId::attn_res_out),
                                        .b = branch,
                                        .n = N_ * cfg_.d_model});
        case OpRole::ln_f:
        case OpRole::lm_head:
        case OpRole::loss:
            return not_in_block(op);
    }
}

// Runs block l's backward, its ops in reverse, and frees its activations at the end.
template <class Kernels>
void GptImpl<Kernels>::block_backward(int l) {
    KeptTensors& kt = layers_[static_cast<std::size_t>(l)];
    for (auto it = plan_.block.rbegin(); it != plan_.block.rend(); ++it) {
        const PlanOp& op = *it;
        std::optional<profiler::ScopedRange> range;
        profiler::KernelScope kernel;
        KernelCost cost = op.bwd_input;
        cost += op.bwd_weight;
        if (rec_ != nullptr) {
            range.emplace(rec_,
                          "h." + std::to_string(l) + "." + std::string(op.name()) + " backward",
                          profiler::Category::op, cost);
        }
        // The op's kernel starts here (after the memsets that clear its outputs).
        auto launch = [&] { kernel_range(kernel, gpt_detail::kernel_name(op, true, cfg_), cost); };
        op_backward(op, l, kt, kernel, launch);
        if (anomaly_.on() && check_backward_) check_backward(op, l, kt);
        // After the block's first op the layer's activations are dead: freeing them is that
        // op's work (its range), not time between ops.
        if (std::next(it) == plan_.block.rend()) {
            kernel.reset();
            kt.items.clear();
        }
    }
}

// One op of block l's backward. The residual stream's gradient is dres_; an op's input gradient
// goes to dnarrow_ (N x max(C, F)) or dwide_ (N x max(qkv, fc)), where the op below reads it.
template <class Kernels>
template <class Launch>
void GptImpl<Kernels>::op_backward(const PlanOp& op, int l, KeptTensors& kt,
                                   profiler::KernelScope& kernel, Launch&& launch) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    const std::int64_t C = cfg_.d_model;
    T* dres = dres_.template data<T>();
    T* dnarrow = dnarrow_.template data<T>();
    T* dwide = dwide_.template data<T>();
    switch (op.role) {  // the roles in the backward's order
        case OpRole::loss:
        case OpRole::lm_head:
        case OpRole::ln_f:
            return not_in_block(op);
        case OpRole::mlp_res:
            return residual_backward(kt, KeptId::mlp_proj_mask, kernel);
        case OpRole::mlp_proj_lora:
            return lora_backward(op, lp.down_lora, kt, KeptId::mlp_act_out, branch_grad(),
                                 KeptId::mlp_proj_lora_h, launch);
        case OpRole::mlp_proj:
            if (plan_.fusions.gelu) return proj_gelu_backward(op, l, kt, kernel);
            if (!adapters_) zero(dnarrow, N_ * cfg_.d_ff);  // else its adapter's backward did
            return matmul_back(op, dnarrow, branch_grad(), kt, KeptId::mlp_act_out, lp.down_w,
                               lp.down_b, kernel, launch);
        case OpRole::mlp_act:
            if (plan_.fusions.gelu) return;  // in mlp.proj's backward GEMM epilogue
            return activation_backward(kt, launch);
        case OpRole::mlp_fc_lora:
            return lora_backward(op, lp.fc_lora, kt, KeptId::ln_2_out, dwide, KeptId::mlp_fc_lora_h,
                                 launch);
        case OpRole::mlp_fc:
            if (!adapters_) zero(dnarrow, N_ * C);
            // Under the GELU fusion the fc's bias gradient came with mlp.proj's backward.
            return matmul_back(op, dnarrow, dwide, kt, KeptId::ln_2_out, lp.fc_w,
                               plan_.fusions.gelu ? nullptr : lp.fc_b, kernel, launch);
        case OpRole::ln_2:
            launch();
            return norm_backward(kt, kLn2Kept, dres, dnarrow, kept<T>(kt, KeptId::attn_res_out),
                                 lp.ln2_w, lp.ln2_b);
        case OpRole::attn_res:
            return residual_backward(kt, KeptId::attn_proj_mask, kernel);
        case OpRole::attn_proj_lora:
            return lora_backward(op, lp.proj_lora, kt, KeptId::attn_out, branch_grad(),
                                 KeptId::attn_proj_lora_h, launch);
        case OpRole::attn_proj:
            if (!adapters_) zero(dnarrow, N_ * C);
            return matmul_back(op, dnarrow, branch_grad(), kt, KeptId::attn_out, lp.proj_w,
                               lp.proj_b, kernel, launch);
        case OpRole::attn_core:
            return attention_backward(op, l, kt, kernel, launch);
        case OpRole::attn_rope:
            launch();
            return k_.rope_backward({.qkv = dwide,
                                     .B = B_,
                                     .T = T_,
                                     .NH = cfg_.n_heads,
                                     .KVH = cfg_.n_kv_heads,
                                     .HD = cfg_.head_dim()});
        case OpRole::attn_qkv_lora:
            return lora_backward(op, lp.qkv_lora, kt, KeptId::ln_1_out, dwide,
                                 KeptId::attn_qkv_lora_h, launch);
        case OpRole::attn_qkv:
            if (!adapters_) zero(dnarrow, N_ * C);
            return matmul_back(op, dnarrow, dwide, kt, KeptId::ln_1_out, lp.qkv_w, lp.qkv_b, kernel,
                               launch);
        case OpRole::ln_1:
            launch();
            return norm_backward(kt, kLn1Kept, dres, dnarrow, block_input(l), lp.ln1_w, lp.ln1_b);
        case OpRole::embedding:
            return not_in_block(op);
    }
}

// The residual ops' backward: the branch's gradient is the residual stream's, dres, read by the
// branch below; with dropout, dres through the branch's mask, into branch_.
template <class Kernels>
void GptImpl<Kernels>::residual_backward(KeptTensors& kt, KeptId mask,
                                         profiler::KernelScope& kernel) {
    if (dropout_.on()) {
        dropout_.backward(k_, ranges(kernel), branch_.template data<T>(), dres_.template data<T>(),
                          kt.get(mask), N_ * cfg_.d_model);
    }
}

// The residual branch's dropout (gpt_dropout.h), in place on branch_, its mask kept by the
// branch's projection.
template <class Kernels>
void GptImpl<Kernels>::branch_dropout(KeptTensors& kt, int l, profiler::KernelScope& kernel,
                                      KeptId mask, DropoutSite site) {
    if (dropout_.on()) {
        dropout_.forward(k_, ranges(kernel), branch_.template data<T>(), kt.get(mask),
                         N_ * cfg_.d_model, l, site);
    }
}

// The prologue's and the epilogue's ops run in gpt_impl.h, never in a block.
template <class Kernels>
void GptImpl<Kernels>::not_in_block(const PlanOp& op) {
    NAPKIN_ASSERT(false, "'" << op.name() << "' is not a block op");
}

// Whether checkpointing rebuilds the op's kept tensor `id`.
template <class Kernels>
bool GptImpl<Kernels>::recomputes(const PlanOp& op, KeptId id) {
    for (int i = 0; i < op.n_saved; ++i) {
        if (op.saved[static_cast<std::size_t>(i)].id == id)
            return op.saved[static_cast<std::size_t>(i)].recomputed;
    }
    return false;
}

// ---- the ops' helpers

// Where a producer writes a GEMM input it keeps: the kept tensor itself, or, when the plan keeps
// it in fp8 (fp8-amp), dnarrow_ (N x max(C, F), the backward's buffer, free during any forward, a
// recomputing one included), from which finish_output casts it with its scale pair.
template <class Kernels>
auto GptImpl<Kernels>::output_of(Tensor& kept) -> T* {
    return gpt_detail::is_fp8(kept) ? dnarrow_.template data<T>() : kept.template data<T>();
}
template <class Kernels>
void GptImpl<Kernels>::finish_output(KeptTensors& kt, KeptId id, profiler::KernelScope& kernel) {
    Tensor& kept = kt.get(id);
    if (gpt_detail::is_fp8(kept)) {
        fp8_.cast_output(k_, ranges(kernel), kept, kt.get(kept_scale(id)),
                         dnarrow_.template data<T>(), {layer_of(kt), id});
    }
}

template <class Kernels>
void GptImpl<Kernels>::norm_forward(KeptTensors& kt, const NormKept& ids, const T* inp,
                                    ParamSlot* w, ParamSlot* b, profiler::KernelScope& kernel) {
    T* out = output_of(kt.get(ids.out));
    float* rstd = kept<float>(kt, ids.rstd);
    if (cfg_.norm == NormKind::layernorm) {
        k_.layernorm_forward({.out = out,
                              .mean = kept<float>(kt, ids.mean),
                              .rstd = rstd,
                              .inp = inp,
                              .weight = w->weight.template data<T>(),
                              .bias = b != nullptr ? b->weight.template data<T>() : nullptr,
                              .N = N_,
                              .C = cfg_.d_model});
    } else {
        k_.rmsnorm_forward({.out = out,
                            .rstd = rstd,
                            .inp = inp,
                            .weight = w->weight.template data<T>(),
                            .N = N_,
                            .C = cfg_.d_model});
    }
    finish_output(kt, ids.out, kernel);
}

// attn.res and ln_2 in one kernel: attn.res.out = the block input + the branch, ln_2 of it.
template <class Kernels>
void GptImpl<Kernels>::residual_norm_forward(KeptTensors& kt, int l,
                                             profiler::KernelScope& kernel) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    k_.residual_layernorm_forward(
        {.out = output_of(kt.get(KeptId::ln_2_out)),
         .mean = kept<float>(kt, KeptId::ln_2_mean),
         .rstd = kept<float>(kt, KeptId::ln_2_rstd),
         .x = kept<T>(kt, KeptId::attn_res_out),
         .a = block_input(l),
         .b = branch_.template data<T>(),
         .weight = lp.ln2_w->weight.template data<T>(),
         .bias = lp.ln2_b != nullptr ? lp.ln2_b->weight.template data<T>() : nullptr,
         .N = N_,
         .C = cfg_.d_model});
    finish_output(kt, KeptId::ln_2_out, kernel);
}

// dinp += the norm's input gradient from dout; the GEMM scratch, idle between GEMMs, holds the
// CUDA kernels' per-chunk sums of the parameter gradients.
template <class Kernels>
void GptImpl<Kernels>::norm_backward(KeptTensors& kt, const NormKept& ids, T* dinp, const T* dout,
                                     const T* inp, ParamSlot* w, ParamSlot* b) {
    const float* rstd = kept<float>(kt, ids.rstd);
    if (cfg_.norm == NormKind::layernorm) {
        k_.layernorm_backward({.dinp = dinp,
                               .dweight = w->grad.template data<T>(),
                               .dbias = b != nullptr ? b->grad.template data<T>() : nullptr,
                               .dout = dout,
                               .inp = inp,
                               .weight = w->weight.template data<T>(),
                               .mean = kept<float>(kt, ids.mean),
                               .rstd = rstd,
                               .N = N_,
                               .C = cfg_.d_model,
                               .scratch = mm_scratch_.template data<float>(),
                               .scratch_bytes = mm_scratch_.bytes()});
    } else {
        k_.rmsnorm_backward({.dinp = dinp,
                             .dweight = w->grad.template data<T>(),
                             .dout = dout,
                             .inp = inp,
                             .weight = w->weight.template data<T>(),
                             .rstd = rstd,
                             .N = N_,
                             .C = cfg_.d_model,
                             .scratch = mm_scratch_.template data<float>(),
                             .scratch_bytes = mm_scratch_.bytes()});
    }
}

// A GEMM on the kept input `inp` (bf16, or fp8 codes with their scale pair: gpt_fp8.h).
template <class Kernels>
void GptImpl<Kernels>::matmul(const PlanOp& op, T* out, KeptTensors& kt, KeptId inp, ParamSlot* w,
                              ParamSlot* b, profiler::KernelScope& kernel) {
    const auto& s = std::get<MatmulShape>(op.shape);
    const Tensor& x = kt.get(inp);
    const T* bias = b != nullptr ? b->weight.template data<T>() : nullptr;
    if (gpt_detail::is_fp8(x)) {
        fp8_.forward(k_, ranges(kernel), s, out, x, kt.get(kept_scale(inp)),
                     w->weight.template data<T>(), bias, mm_scratch_.template data<float>(),
                     {layer_of(kt), inp});
        return;
    }
    const T* weight = lora_.weight(k_, ranges(kernel), *w);
    if (rec_ != nullptr) kernel_range(kernel, gpt_detail::kernel_name(op, false, cfg_), op.fwd);
    k_.matmul_forward({.out = out,
                       .inp = x.template data<T>(),
                       .weight = weight,
                       .bias = bias,
                       .M = s.M,
                       .N = s.N,
                       .K = s.K,
                       .scratch = mm_scratch_.template data<float>()});
}

template <class Kernels>
template <class Launch>
void GptImpl<Kernels>::matmul_back(const PlanOp& op, T* dinp, const T* dout, KeptTensors& kt,
                                   KeptId inp, ParamSlot* w, ParamSlot* b,
                                   profiler::KernelScope& kernel, Launch&& launch) {
    const auto& s = std::get<MatmulShape>(op.shape);
    const Tensor& x = kt.get(inp);
    T* dbias = b != nullptr ? b->grad.template data<T>() : nullptr;
    if (gpt_detail::is_fp8(x)) {
        fp8_.backward(k_, ranges(kernel), s, dinp, w->grad.template data<T>(), dbias, dout, x,
                      kt.get(kept_scale(inp)), w->weight.template data<T>(),
                      mm_scratch_.template data<float>(), {layer_of(kt), inp});
        return;
    }
    const T* weight = lora_.weight(k_, ranges(kernel), *w);
    launch();
    k_.matmul_backward({.dinp = dinp,
                        .dweight = w->grad.template data<T>(),
                        .dbias = dbias,
                        .dout = dout,
                        .inp = x.template data<T>(),
                        .weight = weight,
                        .M = s.M,
                        .N = s.N,
                        .K = s.K,
                        .scratch = mm_scratch_.template data<float>(),
                        .bias_grad_epilogue = plan_.fusions.bias_grad});
}

// A linear layer's adapter (op "<linear>.lora", gpt_lora.h): the base GEMM's output
// out += scale * (inp @ A^T) @ B^T, keeping h.
template <class Kernels>
void GptImpl<Kernels>::lora_forward(const PlanOp& op, const gpt_detail::LoraSlots& slots,
                                    KeptTensors& kt, KeptId inp, T* out, KeptId h) {
    lora_.forward(k_, op, slots, kept<T>(kt, inp), kept<T>(kt, h), out,
                  mm_scratch_.template data<float>());
}

// The adapter's gradients from dout, the base GEMM's output gradient (dwide_, or for a
// projection into the residual stream the branch's), and its share of the input gradient, which
// starts dnarrow_ (N, K); the base GEMM's backward then adds its own.
template <class Kernels>
template <class Launch>
void GptImpl<Kernels>::lora_backward(const PlanOp& op, const gpt_detail::LoraSlots& slots,
                                     KeptTensors& kt, KeptId inp, const T* dout, KeptId h,
                                     Launch&& launch) {
    const auto& s = std::get<LoraShape>(op.shape);
    zero(dnarrow_.template data<T>(), s.M * s.K);
    launch();
    lora_.backward(k_, op, slots, dnarrow_.template data<T>(), dout, kept<T>(kt, inp),
                   kept<T>(kt, h), mm_scratch_.template data<float>());
}

template <class Kernels>
void GptImpl<Kernels>::activation_forward(KeptTensors& kt, profiler::KernelScope& kernel) {
    T* out = output_of(kt.get(KeptId::mlp_act_out));
    const T* inp = kept<T>(kt, KeptId::mlp_fc_out);
    if (cfg_.mlp == MlpKind::gelu)
        k_.gelu_forward({.out = out, .inp = inp, .n = N_ * cfg_.d_ff});
    else
        k_.swiglu_forward({.out = out, .inp = inp, .N = N_, .F = cfg_.d_ff});
    finish_output(kt, KeptId::mlp_act_out, kernel);
}

// mlp.fc and GELU in one GEMM (plan_.fusions.gelu): mlp.act.out = gelu(ln_2.out @ fc^T + b),
// and mlp.fc.out keeps the pre-activation for the backward's DGELU.
template <class Kernels>
void GptImpl<Kernels>::fc_gelu_forward(const PlanOp& op, int l, KeptTensors& kt,
                                       profiler::KernelScope& kernel) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    const auto& s = std::get<MatmulShape>(op.shape);
    if (rec_ != nullptr) kernel_range(kernel, "matmul_gelu_forward", op.fwd);
    k_.matmul_gelu_forward(
        {.out = kept<T>(kt, KeptId::mlp_act_out),
         .pre_gelu = kept<T>(kt, KeptId::mlp_fc_out),
         .inp = kept<T>(kt, KeptId::ln_2_out),
         .weight = lp.fc_w->weight.template data<T>(),
         .bias = lp.fc_b != nullptr ? lp.fc_b->weight.template data<T>() : nullptr,
         .M = s.M,
         .N = s.N,
         .K = s.K,
         .scratch = mm_scratch_.template data<float>()});
}

// mlp.proj's backward with GELU's (plan_.fusions.gelu): dwide_ (N, F) = the fc's output
// gradient straight from the branch's, overwritten (no zeroing, no dnarrow_ in between); the
// proj's gradients and the fc's bias gradient accumulate.
template <class Kernels>
void GptImpl<Kernels>::proj_gelu_backward(const PlanOp& op, int l, KeptTensors& kt,
                                          profiler::KernelScope& kernel) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    const auto& s = std::get<MatmulShape>(op.shape);
    KernelCost cost = op.bwd_input;
    cost += op.bwd_weight;
    kernel_range(kernel, "matmul_gelu_backward", cost);
    const auto grad = [](ParamSlot* p) {
        return p != nullptr ? p->grad.template data<T>() : nullptr;
    };
    k_.matmul_gelu_backward({.dpre = dwide_.template data<T>(),
                             .dpre_bias = grad(lp.fc_b),
                             .dweight = grad(lp.down_w),
                             .dbias = grad(lp.down_b),
                             .dout = branch_grad(),
                             .inp = kept<T>(kt, KeptId::mlp_act_out),
                             .weight = lp.down_w->weight.template data<T>(),
                             .pre_gelu = kept<T>(kt, KeptId::mlp_fc_out),
                             .M = s.M,
                             .N = s.N,
                             .K = s.K,
                             .scratch = mm_scratch_.template data<float>()});
}

// dwide_ (N, fc rows) = the activation's input gradient from dnarrow_ (N, F).
template <class Kernels>
template <class Launch>
void GptImpl<Kernels>::activation_backward(KeptTensors& kt, Launch&& launch) {
    T* dwide = dwide_.template data<T>();
    T* dnarrow = dnarrow_.template data<T>();
    const std::int64_t cols = cfg_.mlp == MlpKind::swiglu ? 2 * cfg_.d_ff : cfg_.d_ff;
    zero(dwide, N_ * cols);
    launch();
    const T* inp = kept<T>(kt, KeptId::mlp_fc_out);
    if (cfg_.mlp == MlpKind::gelu)
        k_.gelu_backward({.dinp = dwide, .inp = inp, .dout = dnarrow, .n = N_ * cfg_.d_ff});
    else
        k_.swiglu_backward({.dinp = dwide, .inp = inp, .dout = dnarrow, .N = N_, .F = cfg_.d_ff});
}

// probabilities_only: rebuilding naive attention's P for the backward (selective
// checkpointing); its output, still kept, is written to scratch (branch_).
template <class Kernels>
void GptImpl<Kernels>::attention_forward(KeptTensors& kt, const PlanOp& op, int l,
                                         bool probabilities_only, profiler::KernelScope& kernel) {
    const auto& s = std::get<AttentionShape>(op.shape);
    const T* qkv = kept<T>(kt, KeptId::attn_qkv_out);
    if (s.impl == AttentionImpl::naive) {
        T* out =
            probabilities_only ? branch_.template data<T>() : output_of(kt.get(KeptId::attn_out));
        const AttentionDropout<T> drop =
            dropout_.on() ? dropout_.attention(kt, l) : AttentionDropout<T>{};
        k_.attention_naive_forward({.out = out,
                                    .p = kept<T>(kt, KeptId::attn_p),
                                    .qkv = qkv,
                                    .dims = {s.B, s.T, s.NH, s.KVH, s.HD},
                                    .dropout = dropout_.on() ? &drop : nullptr});
    } else {
        const AttentionDropout<T> drop = dropout_.flash_attention(l);
        k_.attention_flash_forward({.out = output_of(kt.get(KeptId::attn_out)),
                                    .lse = kept<float>(kt, KeptId::attn_lse),
                                    .qkv = qkv,
                                    .dims = {s.B, s.T, s.NH, s.KVH, s.HD},
                                    .dropout = dropout_.on() ? &drop : nullptr});
    }
    if (!probabilities_only) finish_output(kt, KeptId::attn_out, kernel);
}

// dwide_ (N, qkv) = the attention's input gradient from dnarrow_ (N, C).
template <class Kernels>
template <class Launch>
void GptImpl<Kernels>::attention_backward(const PlanOp& op, int l, KeptTensors& kt,
                                          profiler::KernelScope& kernel, Launch&& launch) {
    const auto& s = std::get<AttentionShape>(op.shape);
    T* dwide = dwide_.template data<T>();
    zero(dwide, N_ * cfg_.qkv_dim());
    const T* qkv = kept<T>(kt, KeptId::attn_qkv_out);
    if (s.impl == AttentionImpl::naive) {
        launch();
        const AttentionDropout<T> drop =
            dropout_.on() ? dropout_.attention(kt, l) : AttentionDropout<T>{};
        k_.attention_naive_backward({.dqkv = dwide,
                                     .scratch = attn_scratch_.template data<float>(),
                                     .dout = dnarrow_.template data<T>(),
                                     .qkv = qkv,
                                     .p = kept<T>(kt, KeptId::attn_p),
                                     .dims = {s.B, s.T, s.NH, s.KVH, s.HD},
                                     .dropout = dropout_.on() ? &drop : nullptr});
        return;
    }
    // Flash reads its output O; fp8-amp keeps it as codes: dequantized into branch_ (N, C), free
    // during the backward.
    const Tensor& o = kt.get(KeptId::attn_out);
    const T* out = gpt_detail::is_fp8(o)
                       ? fp8_.dequantized(k_, ranges(kernel), o, kt.get(KeptId::attn_out_scale),
                                          branch_.template data<T>())
                       : o.template data<T>();
    launch();
    const AttentionDropout<T> drop = dropout_.flash_attention(l);
    k_.attention_flash_backward({.dqkv = dwide,
                                 .dout = dnarrow_.template data<T>(),
                                 .out = out,
                                 .qkv = qkv,
                                 .lse = kept<float>(kt, KeptId::attn_lse),
                                 .dims = {s.B, s.T, s.NH, s.KVH, s.HD},
                                 .dropout = dropout_.on() ? &drop : nullptr});
}

}  // namespace napkin
