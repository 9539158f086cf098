// Builds the op plan of one training step. The kept tensors follow Korthikanti et al. 2022
// ("Reducing Activation Recomputation in Large Transformer Models", section 4.1) term by term,
// so that the plan's per-layer total reproduces their closed form (docs/ESTIMATOR.md,
// "Activations"): with dropout a GPT-2 block keeps 34*s*b*h + 5*a*s^2*b bytes at 2 bytes per
// element, without dropout 32*s*b*h + 2*a*s^2*b, plus the norms' fp32 statistics.
#include "core/op_plan.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "kernels/quantize.h"

namespace napkin {

namespace {

struct Dims {
    std::int64_t B, T, N, C, F, qkv, fc_rows, HD, Q;  // Q = NH HD: the attention's width
    int NH, KVH;
};

Dims dims_of(const ModelConfig& c, const PlanInputs& in) {
    Dims d{};
    d.B = in.micro_batch;
    d.T = in.seq_len;
    d.N = d.B * d.T;
    d.C = c.d_model;
    d.F = c.d_ff;
    d.qkv = c.qkv_dim();
    d.fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    d.HD = c.head_dim();
    d.Q = c.q_dim();
    d.NH = c.n_heads;
    d.KVH = c.n_kv_heads;
    return d;
}

PlanOp make_op(OpRole role, OpKind kind) {
    PlanOp op;
    op.role = role;
    op.kind = kind;
    return op;
}

// A GEMM input, kept by the op that produces it for the GEMM's weight gradient, in
// pd.gemm_saved; fp8 codes (fp8-amp) carry their scale pair (kernels/quantize.h) as a tensor of
// their own, so the plan counts every byte the engine keeps.
void keep_gemm_input(PlanOp& op, KeptId tensor, std::int64_t numel, const PrecisionDTypes& pd) {
    op.keep(tensor, numel, pd.gemm_saved);
    if (pd.gemm_saved == DType::f8e4m3) op.keep(kept_scale(tensor), kFp8ScaleFloats, DType::f32);
}

PlanOp norm_op(OpRole role, const ModelConfig& c, const Dims& d, const PrecisionDTypes& pd,
               const NormKept& kept) {
    PlanOp op = make_op(role, OpKind::norm);
    NormShape s{d.N, d.C, c.norm, c.bias, pd.activations, pd.gemm_saved};
    op.shape = s;
    op.fwd = norm_forward_cost(s);
    op.bwd_input = norm_backward_cost(s);
    keep_gemm_input(op, kept.out, d.N * d.C, pd);
    if (c.norm == NormKind::layernorm) op.keep(kept.mean, d.N, DType::f32);
    op.keep(kept.rstd, d.N, DType::f32);
    return op;
}

PlanOp matmul_op(OpRole role, const Dims& d, std::int64_t n, std::int64_t k, bool bias, DType out,
                 DType weight, bool trainable, const PrecisionDTypes& pd) {
    PlanOp op = make_op(role, OpKind::matmul);
    MatmulShape s{d.N, n, k, bias, pd.gemm_compute, out, weight};
    op.shape = s;
    op.fwd = matmul_forward_cost(s);
    op.bwd_input = matmul_backward_input_cost(s);
    if (trainable) op.bwd_weight = matmul_backward_weight_cost(s, pd.grads);
    op.model_flops = true;
    return op;
}

// n_first: the rows of the first part's B (q of qkv, gate of swiglu's fc); the others share the
// rest equally.
PlanOp lora_op(OpRole role, const Dims& d, std::int64_t n, std::int64_t k, int parts,
               std::int64_t n_first, std::int64_t rank, KeptId h, const PrecisionDTypes& pd) {
    PlanOp op = make_op(role, OpKind::lora);
    LoraShape s{d.N, n, k, rank, parts, pd.activations, pd.grads, n_first};
    op.shape = s;
    op.fwd = lora_forward_cost(s);
    op.bwd_input = lora_backward_input_cost(s);
    op.bwd_weight = lora_backward_weight_cost(s);
    op.model_flops = true;
    op.keep(h, d.N * parts * rank, pd.activations);
    return op;
}

PlanOp residual_op(OpRole role, KeptId out, const Dims& d, const PrecisionDTypes& pd) {
    PlanOp op = make_op(role, OpKind::residual);
    ResidualShape s{d.N, d.C, pd.activations};
    op.shape = s;
    op.fwd = residual_forward_cost(s);
    op.bwd_input = residual_backward_cost(s);
    op.keep(out, d.N * d.C, pd.activations);
    return op;
}

void build_block(const ModelConfig& c, const PlanInputs& in, const Dims& d,
                 const PrecisionDTypes& pd, std::vector<PlanOp>& block) {
    const bool adapters = in.finetune != Finetune::full;
    const bool base_trainable = !adapters;
    const DType linear_w = in.finetune == Finetune::qlora ? DType::nf4 : pd.weights;
    const bool dropout = c.dropout > 0.0;
    const int fc_parts = c.mlp == MlpKind::swiglu ? 2 : 1;

    block.push_back(norm_op(OpRole::ln_1, c, d, pd, kLn1Kept));

    PlanOp qkv = matmul_op(OpRole::attn_qkv, d, d.qkv, d.C, c.bias || c.qkv_bias, pd.activations,
                           linear_w, base_trainable, pd);
    qkv.keep(KeptId::attn_qkv_out, d.N * d.qkv, pd.activations);
    block.push_back(qkv);
    if (adapters) {
        block.push_back(lora_op(OpRole::attn_qkv_lora, d, d.qkv, d.C, 3, d.NH * d.HD, in.lora_rank,
                                KeptId::attn_qkv_lora_h, pd));
    }

    if (c.positions == PositionKind::rope) {
        PlanOp rope = make_op(OpRole::attn_rope, OpKind::rope);
        RopeShape s{d.B, d.T, d.NH, d.KVH, d.HD, pd.activations};
        rope.shape = s;
        rope.fwd = rope_forward_cost(s);
        rope.bwd_input = rope_backward_cost(s);
        block.push_back(rope);
    }

    PlanOp attn = make_op(OpRole::attn_core, OpKind::attention);
    AttentionShape as{d.B, d.T, d.NH, d.KVH, d.HD, in.causal_flops, in.attention, pd.activations};
    attn.shape = as;
    attn.fwd = attention_forward_cost(as);
    attn.bwd_input = attention_backward_cost(as);
    attn.model_flops = true;
    attn.recompute_flops = attention_backward_recompute_flops(as);
    const std::int64_t scores = d.B * d.NH * d.T * d.T;
    if (in.attention == AttentionImpl::naive) {
        attn.keep(KeptId::attn_p, scores, pd.activations);  // softmax output
        if (dropout) {
            attn.keep(KeptId::attn_p_mask, scores, DType::i8);
            attn.keep(KeptId::attn_p_dropped, scores, pd.activations);  // the matmul with V's input
        }
    } else {
        // Flash regenerates the dropout mask from the RNG state; it keeps the logsumexp.
        attn.keep(KeptId::attn_lse, d.B * d.NH * d.T, DType::f32);
    }
    keep_gemm_input(attn, KeptId::attn_out, d.N * d.Q, pd);  // the projection's input
    block.push_back(attn);

    PlanOp proj = matmul_op(OpRole::attn_proj, d, d.C, d.Q, c.bias, pd.activations, linear_w,
                            base_trainable, pd);
    if (dropout) proj.keep(KeptId::attn_proj_mask, d.N * d.C, DType::i8);
    block.push_back(proj);
    if (adapters) {
        block.push_back(lora_op(OpRole::attn_proj_lora, d, d.C, d.Q, 1, d.C, in.lora_rank,
                                KeptId::attn_proj_lora_h, pd));
    }
    block.push_back(residual_op(OpRole::attn_res, KeptId::attn_res_out, d, pd));

    block.push_back(norm_op(OpRole::ln_2, c, d, pd, kLn2Kept));

    PlanOp fc = matmul_op(OpRole::mlp_fc, d, d.fc_rows, d.C, c.bias, pd.activations, linear_w,
                          base_trainable, pd);
    fc.keep(KeptId::mlp_fc_out, d.N * d.fc_rows, pd.activations);
    block.push_back(fc);
    if (adapters) {
        block.push_back(lora_op(OpRole::mlp_fc_lora, d, d.fc_rows, d.C, fc_parts,
                                d.fc_rows / fc_parts, in.lora_rank, KeptId::mlp_fc_lora_h, pd));
    }

    PlanOp act = make_op(OpRole::mlp_act, OpKind::activation);
    ActivationShape acts{d.N, d.F, c.mlp, pd.activations, pd.gemm_saved};
    act.shape = acts;
    act.fwd = activation_forward_cost(acts);
    act.bwd_input = activation_backward_cost(acts);
    keep_gemm_input(act, KeptId::mlp_act_out, d.N * d.F, pd);  // the down projection's input
    block.push_back(act);

    PlanOp down = matmul_op(OpRole::mlp_proj, d, d.C, d.F, c.bias, pd.activations, linear_w,
                            base_trainable, pd);
    if (dropout) down.keep(KeptId::mlp_proj_mask, d.N * d.C, DType::i8);
    block.push_back(down);
    if (adapters) {
        block.push_back(lora_op(OpRole::mlp_proj_lora, d, d.C, d.F, 1, d.C, in.lora_rank,
                                KeptId::mlp_proj_lora_h, pd));
    }
    // The block output: the next block's input (and ln_f's), never recomputed.
    block.push_back(residual_op(OpRole::mlp_res, KeptId::mlp_res_out, d, pd));

    // Activation checkpointing: mark what the backward rebuilds and count the extra forward.
    if (in.checkpointing == Checkpointing::full) {
        for (PlanOp& op : block) {
            if (op.role == OpRole::mlp_res) continue;
            for (int i = 0; i < op.n_saved; ++i) op.saved[static_cast<std::size_t>(i)].recomputed = true;
            op.recompute_flops += op.fwd.flops;
        }
    } else if (in.checkpointing == Checkpointing::selective && in.attention == AttentionImpl::naive) {
        for (PlanOp& op : block) {
            if (op.kind != OpKind::attention) continue;
            for (int i = 0; i < op.n_saved; ++i) {
                PlanTensor& t = op.saved[static_cast<std::size_t>(i)];
                const bool probabilities = t.id == KeptId::attn_p || t.id == KeptId::attn_p_mask ||
                                           t.id == KeptId::attn_p_dropped;
                if (probabilities) t.recomputed = true;
            }
            // Rebuilding the output for the backward reruns the whole core attention forward,
            // as Megatron-LM's selective recomputation does (Korthikanti et al. 2022, sec. 5):
            // S = Q K^T, the softmax and its dropout, and P V: 4 B NH HD pairs matmul FLOPs.
            op.recompute_flops += op.fwd.flops;
        }
    }
}

// The MLP under EpilogueFusions::gelu (core/op_plan.h): the fc GEMM writes GELU's output as
// well, so it keeps mlp.act.out; GELU's passes over memory go, its FLOPs stay with mlp.act; the
// proj's input gradient reads the pre-activation and takes the fc's bias gradient along.
void fuse_gelu(std::vector<PlanOp>& block, const PrecisionDTypes& pd) {
    const auto find = [&](OpRole role) -> PlanOp& {
        const auto it = std::find_if(block.begin(), block.end(),
                                     [role](const PlanOp& op) { return op.role == role; });
        NAPKIN_ASSERT(it != block.end(), "fuse_gelu: no " << op_role_name(role));
        return *it;
    };
    PlanOp& fc = find(OpRole::mlp_fc);
    PlanOp& act = find(OpRole::mlp_act);
    PlanOp& proj = find(OpRole::mlp_proj);
    MatmulShape fc_shape = std::get<MatmulShape>(fc.shape);
    fc.fwd = matmul_gelu_forward_cost(fc_shape);
    for (int i = 0; i < act.n_saved; ++i)
        fc.saved[static_cast<std::size_t>(fc.n_saved++)] = act.saved[static_cast<std::size_t>(i)];
    act.n_saved = 0;
    act.fwd = KernelCost{act.fwd.flops, 0, 0, 0};
    act.bwd_input = KernelCost{act.bwd_input.flops, 0, 0, 0};
    const bool fc_bias = fc_shape.bias;
    if (fc_bias && fc.bwd_weight.flops > 0) {  // trainable: its bias gradient moves to proj's
        fc_shape.bias = false;
        fc.bwd_weight = matmul_backward_weight_cost(fc_shape, pd.grads);
    }
    proj.bwd_input =
        matmul_gelu_backward_input_cost(std::get<MatmulShape>(proj.shape), fc_bias, pd.grads);
}

}  // namespace

EpilogueFusions epilogue_fusions(const ModelConfig& c, const PlanInputs& in) {
    const DType storage = precision_dtypes(in.precision, in.optimizer, in.grads_fp32).activations;
    EpilogueFusions f;
    if (!in.gemm_epilogues || in.precision == Precision::fp8_amp || storage == DType::f32) return f;
    f.gelu = c.mlp == MlpKind::gelu && in.finetune == Finetune::full && c.d_ff % 8 == 0;
    f.bias_grad = true;
    return f;
}

void build_op_plan(const ModelConfig& c, const PlanInputs& in, OpPlan& out) {
    if (in.micro_batch <= 0) {
        throw UsageError("{micro_batch}: must be a positive integer (got " +
                         std::to_string(in.micro_batch) + ")");
    }
    if (in.seq_len <= 0) {
        throw UsageError("{seq_len}: must be a positive integer (got " +
                         std::to_string(in.seq_len) + ")");
    }
    if (c.positions == PositionKind::learned && in.seq_len > c.context_length) {
        throw UsageError("{seq_len}: " + std::to_string(in.seq_len) +
                         " exceeds the learned position table of " +
                         std::to_string(c.context_length) + " rows (the model's context length)");
    }
    // Keep every count inside int64: the largest tensor is naive attention's (B, NH, T, T).
    const double biggest = static_cast<double>(in.micro_batch) * c.n_heads * static_cast<double>(in.seq_len) *
                           static_cast<double>(in.seq_len) * 8.0;
    if (biggest > 4e18 || static_cast<double>(in.micro_batch) * static_cast<double>(in.seq_len) *
                                  static_cast<double>(c.padded_vocab_size) > 4e18) {
        throw UsageError("{micro_batch} x {seq_len}: " + std::to_string(in.micro_batch) + " x " +
                         std::to_string(in.seq_len) + " is too large to count in 64-bit integers");
    }
    if (in.finetune != Finetune::full && in.lora_rank <= 0) {
        throw UsageError("{lora_rank}: must be a positive integer (got " +
                         std::to_string(in.lora_rank) + ")");
    }
    // The adapters' counts, r (K + N) per linear and B T r per adapter input, stay inside int64:
    // r is bounded like d_model (model_config.cpp).
    if (in.finetune != Finetune::full) {
        constexpr std::int64_t kMaxLoraRank = std::int64_t{1} << 18;
        if (in.lora_rank > kMaxLoraRank) {
            throw UsageError("{lora_rank}: " + std::to_string(in.lora_rank) +
                             " is beyond napkin's limit of " + std::to_string(kMaxLoraRank));
        }
        if (static_cast<double>(in.micro_batch) * static_cast<double>(in.seq_len) *
                static_cast<double>(in.lora_rank) >
            4e18) {
            throw UsageError(
                "{micro_batch} x {seq_len} x {lora_rank}: " + std::to_string(in.micro_batch) +
                " x " + std::to_string(in.seq_len) + " x " + std::to_string(in.lora_rank) +
                " is too large to count in 64-bit integers");
        }
    }
    const Dims d = dims_of(c, in);
    const PrecisionDTypes pd = precision_dtypes(in.precision, in.optimizer, in.grads_fp32);
    const bool full_ft = in.finetune == Finetune::full;

    out.config = &c;
    out.in = in;
    out.n_layers = c.n_layers;
    out.prologue.clear();
    out.block.clear();
    out.epilogue.clear();

    PlanOp emb = make_op(OpRole::embedding, OpKind::embedding);
    EmbeddingShape es{d.B, d.T, d.C, c.positions == PositionKind::learned, pd.activations, pd.grads};
    emb.shape = es;
    emb.fwd = embedding_forward_cost(es);
    if (full_ft) emb.bwd_weight = embedding_backward_cost(es);
    emb.keep(KeptId::embedding_out, d.N * d.C, pd.activations);  // block 0's input
    if (c.dropout > 0.0) emb.keep(KeptId::embedding_mask, d.N * d.C, DType::i8);
    out.prologue.push_back(emb);

    build_block(c, in, d, pd, out.block);
    out.fusions = epilogue_fusions(c, in);
    if (out.fusions.gelu) fuse_gelu(out.block, pd);

    // The output layer runs in the activations' dtype under every recipe: fp8-amp casts the
    // blocks' linear layers only (as Transformer Engine's recipe is applied in Megatron-LM and
    // torchao: the logits, and so the loss, stay out of fp8).
    PrecisionDTypes head_pd = pd;
    head_pd.gemm_saved = pd.activations;
    head_pd.gemm_compute = pd.activations;

    // ln_f's output feeds the head only while the chunked loss runs, but it is alive at the
    // end of the forward (the activation peak), so it is counted as kept.
    out.epilogue.push_back(norm_op(OpRole::ln_f, c, d, head_pd, kLnfKept));

    // Head and loss run fused, chunk by chunk: logits for R rows (fp32), loss and dlogits in
    // place, then the head's input gradient (kept for the backward) and weight gradient.
    PlanOp head = matmul_op(OpRole::lm_head, d, c.padded_vocab_size, d.C, false, DType::f32,
                            pd.weights, full_ft, head_pd);
    head.keep(KeptId::lm_head_dinp, d.N * d.C, pd.activations);
    out.epilogue.push_back(head);

    PlanOp loss = make_op(OpRole::loss, OpKind::cross_entropy);
    const std::int64_t chunk = in.loss_chunk_rows > 0 && in.loss_chunk_rows < d.N ? in.loss_chunk_rows : d.N;
    CrossEntropyShape cs{d.N, c.vocab_size, c.padded_vocab_size, chunk};
    loss.shape = cs;
    loss.fwd = cross_entropy_forward_cost(cs);
    out.epilogue.push_back(loss);
}

KeptId kept_scale(KeptId gemm_input) {
    switch (gemm_input) {
        case KeptId::ln_1_out:
            return KeptId::ln_1_out_scale;
        case KeptId::attn_out:
            return KeptId::attn_out_scale;
        case KeptId::ln_2_out:
            return KeptId::ln_2_out_scale;
        case KeptId::mlp_act_out:
            return KeptId::mlp_act_out_scale;
        default:
            break;
    }
    NAPKIN_ASSERT(false, kept_name(gemm_input) << " is no GEMM input with a scale pair");
    return gemm_input;
}

OpPlan build_op_plan(const ModelConfig& cfg, const PlanInputs& in) {
    OpPlan plan;
    build_op_plan(cfg, in, plan);
    return plan;
}

Fp8CastNumel fp8_cast_numel(const OpPlan& plan) {
    Fp8CastNumel n;
    for (const PlanOp& op : plan.block) {
        if (op.kind != OpKind::matmul) continue;
        const auto& s = std::get<MatmulShape>(op.shape);
        if (s.in != DType::f8e4m3) continue;
        n.weight = std::max(n.weight, s.N * s.K);
        n.grad = std::max(n.grad, s.M * s.N);
    }
    return n;
}

Fp8Slots fp8_slots(const OpPlan& plan) {
    Fp8Slots n;
    if (plan.in.fp8_amax_history <= 0) return n;
    for (const PlanOp& op : plan.block) {
        if (op.kind == OpKind::matmul && std::get<MatmulShape>(op.shape).in == DType::f8e4m3)
            ++n.gemms;
    }
    n.e4m3 = 2 * plan.n_layers * n.gemms;
    n.e5m2 = plan.n_layers * n.gemms;
    return n;
}

PlanTotals plan_totals(const OpPlan& plan) {
    PlanTotals t;
    auto add_ops = [&](const std::vector<PlanOp>& ops, std::uint64_t times, bool is_block) {
        for (const PlanOp& op : ops) {
            const std::uint64_t fwd = op.fwd.flops * times;
            const std::uint64_t bwd = (op.bwd_input.flops + op.bwd_weight.flops) * times;
            if (op.model_flops) {
                t.model_flops_fwd += fwd;
                t.model_flops_bwd += bwd;
            } else {
                t.other_flops += fwd + bwd;
            }
            t.recompute_flops += op.recompute_flops * times;
            for (std::uint64_t w : {op.fwd.workspace_bytes, op.bwd_input.workspace_bytes,
                                    op.bwd_weight.workspace_bytes}) {
                if (w > t.max_workspace_bytes) t.max_workspace_bytes = w;
            }
            for (int i = 0; i < op.n_saved; ++i) {
                const PlanTensor& s = op.saved[static_cast<std::size_t>(i)];
                if (s.recomputed) {
                    if (is_block) t.block_recomputed_bytes += s.bytes();
                } else {
                    t.kept_bytes += s.bytes() * times;
                    if (is_block) t.block_kept_bytes += s.bytes();
                    if (&ops == &plan.epilogue) t.epilogue_kept_bytes += s.bytes();
                }
            }
        }
    };
    add_ops(plan.prologue, 1, false);
    add_ops(plan.block, static_cast<std::uint64_t>(plan.n_layers), true);
    add_ops(plan.epilogue, 1, false);
    return t;
}

}  // namespace napkin
