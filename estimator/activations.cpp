// Activations: the closed form (Korthikanti et al. 2022) beside the op plan's kept tensors, for
// the whole model or one pipeline stage of one tensor-parallel rank (estimate_steps.h).
// docs/ESTIMATOR.md, section 4 and "3D parallelism".
#include <algorithm>

#include "estimator/estimate_steps.h"

namespace napkin::estimate_steps {

namespace {

// Whether a kept tensor is one that tensor parallelism leaves whole on every rank (Korthikanti
// et al.'s 10 s b h of section 4.2.1): the norms' inputs, outputs and statistics, the residual
// stream, the embedding's output and the dropout masks after the row-parallel GEMMs, and the
// head's input gradient. The rest (Q, K, V, the scores, the attention output, the MLP's hidden
// units) is split across the ranks by heads or hidden units; the rank's op plan already holds
// only its share of those. Sequence parallelism splits the whole ones along the sequence.
bool whole_on_every_rank(const PlanOp& op, const PlanTensor& t) {
    switch (op.kind) {
        case OpKind::norm:
        case OpKind::residual:
        case OpKind::embedding:
        case OpKind::cross_entropy:
            return true;
        case OpKind::matmul:
            // A row-parallel GEMM's dropout mask (after its all-reduce), or the head's input
            // gradient; a column-parallel GEMM's output is split.
            return t.dtype == DType::i8 || op.role == OpRole::lm_head;
        default:
            return false;
    }
}

// Bytes kept through the forward by some ops (and, for a block, rebuilt in its backward), the
// whole-on-every-rank ones divided by `split` (T under sequence parallelism, else 1).
struct Kept {
    double kept = 0;
    double recomputed = 0;
};
Kept kept_bytes(const std::vector<PlanOp>& ops, double split) {
    std::uint64_t kept[2] = {0, 0}, recomputed[2] = {0, 0};  // [split, whole]
    for (const PlanOp& op : ops) {
        for (int i = 0; i < op.n_saved; ++i) {
            const PlanTensor& t = op.saved[static_cast<std::size_t>(i)];
            const int whole = whole_on_every_rank(op, t) ? 1 : 0;
            (t.recomputed ? recomputed : kept)[whole] += t.bytes();
        }
    }
    // Whole bytes summed first, so that without a split the sums are the plan's exactly.
    if (split == 1.0) {
        return {static_cast<double>(kept[0] + kept[1]),
                static_cast<double>(recomputed[0] + recomputed[1])};
    }
    return {static_cast<double>(kept[0]) + static_cast<double>(kept[1]) / split,
            static_cast<double>(recomputed[0]) + static_cast<double>(recomputed[1]) / split};
}

}  // namespace

StageView whole_model(const Terms& x) {
    StageView v;
    v.layers = x.c.n_layers;
    return v;
}

StageView pipeline_stage(const Terms& x, int stage) {
    StageView v;
    v.stage = stage;
    v.layers = stage_layers(x.par, stage);
    v.in_flight = in_flight_micro_batches(x.par, stage);
    v.first = stage == 0;
    v.last = stage == x.par.pp - 1;
    return v;
}

// Activations: both views, per GPU. Data parallelism does not shard them; tensor parallelism
// splits the heads' and hidden units' tensors (and, with sequence parallelism, the rest); a
// pipeline stage holds its layers for each micro-batch in flight.
void activations(Terms& x, const StageView& v, Estimate& e) {
    const EstimateInputs& in = x.in;
    const ModelConfig& c = x.c;
    formulas::LayerActivationTerms terms{};
    terms.s = static_cast<double>(x.T);
    terms.b = static_cast<double>(in.micro_batch);
    terms.h = static_cast<double>(c.d_model);
    terms.a = c.n_heads;
    terms.q_width = static_cast<double>(c.q_dim());
    terms.qkv_width = static_cast<double>(c.qkv_dim());
    terms.ff_width = static_cast<double>(c.d_ff);
    terms.fc_width = static_cast<double>(c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff);
    terms.p = bytes_of(x.pd.activations);
    terms.dropout = c.dropout > 0;
    terms.t = x.par.tp;
    terms.sequence_parallel = x.par.sp;
    const bool flash = in.attention == AttentionImpl::flash;
    if (flash && in.checkpointing == Checkpointing::selective) x.notes |= kNoteSelectiveFlash;
    e.act_closed_form_layer_bytes =
        formulas::korthikanti_layer_bytes(terms, in.checkpointing, flash);
    const double sbh = terms.s * terms.b * terms.h;
    const double split = x.par.sp ? static_cast<double>(x.par.tp) : 1.0;
    // Outside the blocks: the embedding output (and its dropout mask), and at the output the
    // final norm's output and the head's input gradient (the logits are chunked, not kept).
    const double embedding = v.first ? sbh * (terms.p + (terms.dropout ? 1.0 : 0.0)) / split : 0.0;
    const double output = v.last ? 2.0 * terms.p * sbh / split : 0.0;
    e.act_closed_form_bytes =
        v.in_flight * (v.layers * e.act_closed_form_layer_bytes + embedding) + output;

    // The op plan (of one tensor-parallel rank): kept through the forward, and the peak while the
    // last block is rebuilt for its backward (the epilogue's tensors then consumed).
    const OpPlan& plan = *x.rank_plan;
    const Kept block = kept_bytes(plan.block, split);
    const double prologue = v.first ? kept_bytes(plan.prologue, split).kept : 0.0;
    const double epilogue = v.last ? kept_bytes(plan.epilogue, split).kept : 0.0;
    const double kept = v.in_flight * (v.layers * block.kept + prologue) + epilogue;
    const double rebuilding = kept - epilogue + block.recomputed;
    e.act_detailed_kept_bytes = kept;
    e.act_detailed_bytes = std::max(kept, rebuilding);
    // One layer as the recipe keeps it through the forward, as closed_form_layer counts it.
    e.act_detailed_layer_bytes = block.kept;
}

}  // namespace napkin::estimate_steps
