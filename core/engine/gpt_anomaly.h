// napkin train --detect-anomaly inside the GPT engine (core/engine/anomaly.h has the design):
// GptImpl's members that say, per op role and direction, which tensors an op wrote (checked)
// and which it read (measured when a check fails); the slots are gpt_detail::AnomalyCheck
// (core/engine/anomaly_check.h). Part of core/engine/gpt_impl.h, included after the class.
//
// Names are the op plan's, relative inside a block ("attn.qkv.out"; the block input is the
// previous block's "h.<l-1>.mlp.res.out"); a gradient is "d <tensor>"; shapes are (B, T, cols)
// for activations and the parameter's own for weights. fp8 codes (fp8-amp's kept GEMM inputs)
// are not read as inputs; their producers' outputs are checked in the bf16 staging buffer
// before the cast.
#pragma once

#include "core/engine/gpt_impl.h"

namespace napkin {

// "attn.proj.weight" for block l's "h.<l>.attn.proj.weight".
template <class Kernels>
std::string GptImpl<Kernels>::relative(const std::string& name, int l) {
    const std::string prefix = "h." + std::to_string(l) + ".";
    return l >= 0 && name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}

// An activation or activation gradient (N, cols) as (B, T, cols).
template <class Kernels>
auto GptImpl<Kernels>::act(std::string name, const T* p, std::int64_t cols) const -> Checked {
    return {std::move(name), p, N_ * cols, {B_, T_, cols}};
}

// A kept tensor as an op's input (fp8 codes are not read: null).
template <class Kernels>
auto GptImpl<Kernels>::kept_in(KeptTensors& kt, KeptId id) -> Checked {
    Tensor& t = kt.get(id);
    return act(std::string(kept_name(id)), gpt_detail::is_fp8(t) ? nullptr : t.template data<T>(),
               t.numel() / N_);
}

// A kept tensor an op just produced: under fp8-amp, the staging buffer it was cast from.
template <class Kernels>
auto GptImpl<Kernels>::kept_out(KeptTensors& kt, KeptId id) -> Checked {
    Tensor& t = kt.get(id);
    return act(std::string(kept_name(id)), output_of(t), t.numel() / N_);
}

// A parameter's weight (NF4 codes are not read) or gradient (none when frozen).
template <class Kernels>
auto GptImpl<Kernels>::weight_of(const ParamSlot* p, int l) const -> Checked {
    if (p == nullptr || p->weight.dtype() == DType::nf4) return {};
    return {relative(p->name, l), p->weight.template data<T>(), p->numel,
            param_shapes_[static_cast<std::size_t>(p - params_.data())]};
}
template <class Kernels>
auto GptImpl<Kernels>::grad_of(const ParamSlot* p, int l) const -> Checked {
    if (p == nullptr || !p->trainable) return {};
    Checked c = weight_of(p, l);
    c.name = "d " + relative(p->name, l);
    c.data = p->grad.template data<T>();
    return c;
}

template <class Kernels>
auto GptImpl<Kernels>::block_input_in(int l) -> Checked {
    return act(l == 0 ? "embedding.out" : "h." + std::to_string(l - 1) + ".mlp.res.out",
               block_input(l), cfg_.d_model);
}

// The embedding's output, or its tables' gradients.
template <class Kernels>
void GptImpl<Kernels>::check_embedding(bool backward) {
    const OpSite site{plan_.prologue.front().name(), -1, backward};
    const std::int64_t C = cfg_.d_model;
    if (!backward) {
        return anomaly_.op(k_, site, {act("embedding.out", block_input(0), C)},
                           {weight_of(p_wte_, -1), weight_of(p_wpe_, -1)});
    }
    anomaly_.op(k_, site, {grad_of(p_wte_, -1), grad_of(p_wpe_, -1)},
                {act("d embedding.out", dres_.template data<T>(), C)});
}

// ln_f's output, or its input gradient (the last block's output's) and parameter gradients.
template <class Kernels>
void GptImpl<Kernels>::check_ln_f(bool backward) {
    const OpSite site{plan_.epilogue[0].name(), -1, backward};
    const std::int64_t C = cfg_.d_model;
    const Checked last = act("h." + std::to_string(cfg_.n_layers - 1) + ".mlp.res.out",
                             block_output(cfg_.n_layers - 1), C);
    if (!backward) {
        return anomaly_.op(k_, site, {kept_out(epilogue_, KeptId::ln_f_out)},
                           {last, weight_of(p_lnf_w_, -1), weight_of(p_lnf_b_, -1)});
    }
    Checked dlast = last;
    dlast.name = "d " + last.name;
    dlast.data = dres_.template data<T>();
    anomaly_.op(k_, site, {dlast, grad_of(p_lnf_w_, -1), grad_of(p_lnf_b_, -1)},
                {act("d ln_f.out", epilogue_.get(KeptId::lm_head_dinp).template data<T>(), C), last,
                 weight_of(p_lnf_w_, -1)});
}

// The fused head and loss: the mean loss (forward), then the head's gradients (backward).
template <class Kernels>
void GptImpl<Kernels>::check_head(float loss, const ParamSlot* head) {
    const std::string_view op = "lm_head+loss";
    anomaly_.host_value(k_, {op, -1, false}, "loss", loss,
                        {kept_in(epilogue_, KeptId::ln_f_out), weight_of(head, -1)});
    if (!check_backward_) return;
    anomaly_.op(
        k_, {op, -1, true},
        {act("d ln_f.out", epilogue_.get(KeptId::lm_head_dinp).template data<T>(), cfg_.d_model),
         grad_of(head, -1)},
        {kept_in(epilogue_, KeptId::ln_f_out), weight_of(head, -1)});
}

// An op that read x and a pair of parameters (a linear's weight and bias, a norm's, an adapter's
// A and B; either may be null) and wrote out; its backward wrote dx and the pair's gradients
// from dout.
template <class Kernels>
void GptImpl<Kernels>::check_reads(const OpSite& site, Checked out, Checked x, const ParamSlot* p,
                                   const ParamSlot* q) {
    anomaly_.op(k_, site, {std::move(out)},
                {std::move(x), weight_of(p, site.layer), weight_of(q, site.layer)});
}
template <class Kernels>
void GptImpl<Kernels>::check_reads_back(const OpSite& site, Checked dx, Checked dout, Checked x,
                                        const ParamSlot* p, const ParamSlot* q) {
    const int l = site.layer;
    anomaly_.op(k_, site, {std::move(dx), grad_of(p, l), grad_of(q, l)},
                {std::move(dout), std::move(x), weight_of(p, l), weight_of(q, l)});
}

// After op's forward in block l.
template <class Kernels>
void GptImpl<Kernels>::check_forward(const PlanOp& op, int l, KeptTensors& kt) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    const OpSite site{op.name(), l, false};
    const std::int64_t C = cfg_.d_model;
    const T* branch = branch_.template data<T>();
    const bool attn_branch = op.role == OpRole::attn_proj || op.role == OpRole::attn_proj_lora;
    const Checked branch_out = act(attn_branch ? "attn.proj.out" : "mlp.proj.out", branch, C);
    auto in = [&](KeptId id) { return kept_in(kt, id); };
    auto out = [&](KeptId id) { return kept_out(kt, id); };
    switch (op.role) {
        case OpRole::embedding:
        case OpRole::ln_f:
        case OpRole::lm_head:
        case OpRole::loss:
            return not_in_block(op);
        case OpRole::ln_1:
            return check_reads(site, out(KeptId::ln_1_out), block_input_in(l), lp.ln1_w, lp.ln1_b);
        case OpRole::attn_qkv:
            return check_reads(site, out(KeptId::attn_qkv_out), in(KeptId::ln_1_out), lp.qkv_w,
                               lp.qkv_b);
        case OpRole::attn_qkv_lora:
            return check_reads(site, out(KeptId::attn_qkv_out), in(KeptId::ln_1_out), lp.qkv_lora.a,
                               lp.qkv_lora.b);
        case OpRole::attn_rope:
            return anomaly_.op(k_, site, {out(KeptId::attn_qkv_out)}, {});
        case OpRole::attn_core:
            return check_reads(site, out(KeptId::attn_out), in(KeptId::attn_qkv_out), nullptr,
                               nullptr);
        case OpRole::attn_proj:
            return check_reads(site, branch_out, in(KeptId::attn_out), lp.proj_w, lp.proj_b);
        case OpRole::attn_proj_lora:
            return check_reads(site, branch_out, in(KeptId::attn_out), lp.proj_lora.a,
                               lp.proj_lora.b);
        case OpRole::attn_res:
            if (fuse_residual_norm_) return;  // in ln_2's kernel, checked there
            return anomaly_.op(k_, site, {out(KeptId::attn_res_out)},
                               {block_input_in(l), act("attn.proj.out", branch, C)});
        case OpRole::ln_2:
            if (fuse_residual_norm_) {
                return anomaly_.op(k_, site, {out(KeptId::attn_res_out), out(KeptId::ln_2_out)},
                                   {block_input_in(l), act("attn.proj.out", branch, C),
                                    weight_of(lp.ln2_w, l), weight_of(lp.ln2_b, l)});
            }
            return check_reads(site, out(KeptId::ln_2_out), in(KeptId::attn_res_out), lp.ln2_w,
                               lp.ln2_b);
        case OpRole::mlp_fc:
            if (plan_.fusions.gelu) {  // the fc's GEMM wrote GELU's output as well
                return anomaly_.op(
                    k_, site, {out(KeptId::mlp_fc_out), out(KeptId::mlp_act_out)},
                    {in(KeptId::ln_2_out), weight_of(lp.fc_w, l), weight_of(lp.fc_b, l)});
            }
            return check_reads(site, out(KeptId::mlp_fc_out), in(KeptId::ln_2_out), lp.fc_w,
                               lp.fc_b);
        case OpRole::mlp_fc_lora:
            return check_reads(site, out(KeptId::mlp_fc_out), in(KeptId::ln_2_out), lp.fc_lora.a,
                               lp.fc_lora.b);
        case OpRole::mlp_act:
            if (plan_.fusions.gelu) return;  // in mlp.fc's GEMM, checked there
            return check_reads(site, out(KeptId::mlp_act_out), in(KeptId::mlp_fc_out), nullptr,
                               nullptr);
        case OpRole::mlp_proj:
            return check_reads(site, branch_out, in(KeptId::mlp_act_out), lp.down_w, lp.down_b);
        case OpRole::mlp_proj_lora:
            return check_reads(site, branch_out, in(KeptId::mlp_act_out), lp.down_lora.a,
                               lp.down_lora.b);
        case OpRole::mlp_res:
            return anomaly_.op(k_, site, {out(KeptId::mlp_res_out)},
                               {in(KeptId::attn_res_out), act("mlp.proj.out", branch, C)});
    }
}

// After op's backward in block l: its input gradient (in dres_, dnarrow_, dwide_ or branch_) and
// its parameters' gradients.
template <class Kernels>
void GptImpl<Kernels>::check_backward(const PlanOp& op, int l, KeptTensors& kt) {
    const LayerParams& lp = layer_params_[static_cast<std::size_t>(l)];
    const OpSite site{op.name(), l, true};
    const std::int64_t C = cfg_.d_model, F = cfg_.d_ff, Q = cfg_.qkv_dim();
    const std::int64_t fc_cols = cfg_.mlp == MlpKind::swiglu ? 2 * F : F;
    const T* dres = dres_.template data<T>();
    const T* dnarrow = dnarrow_.template data<T>();
    const T* dwide = dwide_.template data<T>();
    const bool attn_branch = op.role <= OpRole::attn_res;
    const Checked dbranch =
        act(attn_branch ? "d attn.proj.out" : "d mlp.proj.out", branch_grad(), C);
    auto in = [&](KeptId id) { return kept_in(kt, id); };
    switch (op.role) {  // the roles in the backward's order
        case OpRole::loss:
        case OpRole::lm_head:
        case OpRole::ln_f:
        case OpRole::embedding:
            return not_in_block(op);
        case OpRole::mlp_res:
        case OpRole::attn_res:
            if (!dropout_.on()) return;  // nothing ran
            return anomaly_.op(k_, site, {dbranch},
                               {act(attn_branch ? "d attn.res.out" : "d mlp.res.out", dres, C)});
        case OpRole::mlp_proj_lora:
            return check_reads_back(site, act("d mlp.act.out", dnarrow, F), dbranch,
                                    in(KeptId::mlp_act_out), lp.down_lora.a, lp.down_lora.b);
        case OpRole::mlp_proj:
            if (plan_.fusions.gelu) {  // through GELU: the fc's output and bias gradients
                return anomaly_.op(k_, site,
                                   {act("d mlp.fc.out", dwide, fc_cols), grad_of(lp.down_w, l),
                                    grad_of(lp.down_b, l), grad_of(lp.fc_b, l)},
                                   {dbranch, in(KeptId::mlp_act_out), in(KeptId::mlp_fc_out),
                                    weight_of(lp.down_w, l)});
            }
            return check_reads_back(site, act("d mlp.act.out", dnarrow, F), dbranch,
                                    in(KeptId::mlp_act_out), lp.down_w, lp.down_b);
        case OpRole::mlp_act:
            if (plan_.fusions.gelu) return;  // in mlp.proj's backward, checked there
            return check_reads_back(site, act("d mlp.fc.out", dwide, fc_cols),
                                    act("d mlp.act.out", dnarrow, F), in(KeptId::mlp_fc_out),
                                    nullptr, nullptr);
        case OpRole::mlp_fc_lora:
            return check_reads_back(site, act("d ln_2.out", dnarrow, C),
                                    act("d mlp.fc.out", dwide, fc_cols), in(KeptId::ln_2_out),
                                    lp.fc_lora.a, lp.fc_lora.b);
        case OpRole::mlp_fc:
            return check_reads_back(site, act("d ln_2.out", dnarrow, C),
                                    act("d mlp.fc.out", dwide, fc_cols), in(KeptId::ln_2_out),
                                    lp.fc_w, lp.fc_b);
        case OpRole::ln_2:
            return check_reads_back(site, act("d attn.res.out", dres, C),
                                    act("d ln_2.out", dnarrow, C), in(KeptId::attn_res_out),
                                    lp.ln2_w, lp.ln2_b);
        case OpRole::attn_proj_lora:
            return check_reads_back(site, act("d attn.out", dnarrow, C), dbranch,
                                    in(KeptId::attn_out), lp.proj_lora.a, lp.proj_lora.b);
        case OpRole::attn_proj:
            return check_reads_back(site, act("d attn.out", dnarrow, C), dbranch,
                                    in(KeptId::attn_out), lp.proj_w, lp.proj_b);
        case OpRole::attn_core:
            return check_reads_back(site, act("d attn.qkv.out", dwide, Q),
                                    act("d attn.out", dnarrow, C), in(KeptId::attn_qkv_out),
                                    nullptr, nullptr);
        case OpRole::attn_rope:
            return anomaly_.op(k_, site, {act("d attn.qkv.out", dwide, Q)}, {});
        case OpRole::attn_qkv_lora:
            return check_reads_back(site, act("d ln_1.out", dnarrow, C),
                                    act("d attn.qkv.out", dwide, Q), in(KeptId::ln_1_out),
                                    lp.qkv_lora.a, lp.qkv_lora.b);
        case OpRole::attn_qkv:
            return check_reads_back(site, act("d ln_1.out", dnarrow, C),
                                    act("d attn.qkv.out", dwide, Q), in(KeptId::ln_1_out), lp.qkv_w,
                                    lp.qkv_b);
        case OpRole::ln_1: {
            Checked dx = block_input_in(l);
            dx.name = "d " + dx.name;
            dx.data = dres;
            return check_reads_back(site, std::move(dx), act("d ln_1.out", dnarrow, C),
                                    block_input_in(l), lp.ln1_w, lp.ln1_b);
        }
    }
}

}  // namespace napkin
