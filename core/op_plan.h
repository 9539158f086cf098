// The op plan: the ordered ops of one training step (one micro-batch) of a model config under a
// recipe. It is the single description that the estimator's detailed model sums and that the
// engine executes, so predicted and measured can be compared op by op.
//
// Layout: prologue (embedding), a block that repeats n_layers times (norm, qkv, [rope],
// attention, projection, residual, norm, fc, activation, projection, residual, plus LoRA
// adapters when fine-tuning), epilogue (final norm, head, loss). Inside a block, op and tensor
// names are relative ("attn.qkv"); the engine prefixes "h.<layer>.".
//
// What is kept for backward: each op lists the tensors it *produces* that a backward needs
// (its `saved` list), so every kept tensor is counted exactly once. The block input is kept
// by the op that produced it (the embedding, or the previous block's last residual).
// Activation checkpointing marks tensors `recomputed`: they are not kept through the forward
// but rebuilt, one block at a time, during the backward (docs/ESTIMATOR.md, "Activations").
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "core/enum_names.h"
#include "core/model_config.h"
#include "core/recipe.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cost.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/residual.h"
#include "kernels/rope.h"

namespace napkin {

enum class OpKind : std::uint8_t {
    embedding,
    norm,
    matmul,
    rope,
    attention,
    activation,
    residual,
    lora,
    cross_entropy,
};
inline constexpr std::array kOpKindNames = {
    EnumName<OpKind>{OpKind::embedding, "embedding"},
    EnumName<OpKind>{OpKind::norm, "norm"},
    EnumName<OpKind>{OpKind::matmul, "matmul"},
    EnumName<OpKind>{OpKind::rope, "rope"},
    EnumName<OpKind>{OpKind::attention, "attention"},
    EnumName<OpKind>{OpKind::activation, "activation"},
    EnumName<OpKind>{OpKind::residual, "residual"},
    EnumName<OpKind>{OpKind::lora, "lora"},
    EnumName<OpKind>{OpKind::cross_entropy, "cross_entropy"},
};

// What an op is in the model, and its name. The engine dispatches on the role with switches that
// name every role (no default: -Wswitch, an error under NAPKIN_WERROR, catches a role a switch
// forgets); the name, for traces and reports, comes from the same line of the list. Inside a
// block the names are relative ("attn.qkv"); the engine prefixes "h.<layer>.".
// clang-format off
#define NAPKIN_OP_ROLES(X)               \
    X(embedding, "embedding")            \
    X(ln_1, "ln_1")                      \
    X(attn_qkv, "attn.qkv")              \
    X(attn_qkv_lora, "attn.qkv.lora")    \
    X(attn_rope, "attn.rope")            \
    X(attn_core, "attn.core")            \
    X(attn_proj, "attn.proj")            \
    X(attn_proj_lora, "attn.proj.lora")  \
    X(attn_res, "attn.res")              \
    X(ln_2, "ln_2")                      \
    X(mlp_fc, "mlp.fc")                  \
    X(mlp_fc_lora, "mlp.fc.lora")        \
    X(mlp_act, "mlp.act")                \
    X(mlp_proj, "mlp.proj")              \
    X(mlp_proj_lora, "mlp.proj.lora")    \
    X(mlp_res, "mlp.res")                \
    X(ln_f, "ln_f")                      \
    X(lm_head, "lm_head")                \
    X(loss, "loss")
// clang-format on

// A tensor an op keeps from its forward for some backward, by id, and its name: the allocation's,
// so the trace's, the memory snapshot's and report.json's ("h.<l>.attn.qkv.out"). An fp8 GEMM
// input's scale pair is its own tensor (kept_scale).
// clang-format off
#define NAPKIN_KEPT_TENSORS(X)                 \
    X(embedding_out, "embedding.out")          \
    X(embedding_mask, "embedding.mask")        \
    X(ln_1_out, "ln_1.out")                    \
    X(ln_1_out_scale, "ln_1.out.scale")        \
    X(ln_1_mean, "ln_1.mean")                  \
    X(ln_1_rstd, "ln_1.rstd")                  \
    X(attn_qkv_out, "attn.qkv.out")            \
    X(attn_qkv_lora_h, "attn.qkv.lora.h")      \
    X(attn_p, "attn.p")                        \
    X(attn_p_mask, "attn.p.mask")              \
    X(attn_p_dropped, "attn.p.dropped")        \
    X(attn_lse, "attn.lse")                    \
    X(attn_out, "attn.out")                    \
    X(attn_out_scale, "attn.out.scale")        \
    X(attn_proj_mask, "attn.proj.mask")        \
    X(attn_proj_lora_h, "attn.proj.lora.h")    \
    X(attn_res_out, "attn.res.out")            \
    X(ln_2_out, "ln_2.out")                    \
    X(ln_2_out_scale, "ln_2.out.scale")        \
    X(ln_2_mean, "ln_2.mean")                  \
    X(ln_2_rstd, "ln_2.rstd")                  \
    X(mlp_fc_out, "mlp.fc.out")                \
    X(mlp_fc_lora_h, "mlp.fc.lora.h")          \
    X(mlp_act_out, "mlp.act.out")              \
    X(mlp_act_out_scale, "mlp.act.out.scale")  \
    X(mlp_proj_mask, "mlp.proj.mask")          \
    X(mlp_proj_lora_h, "mlp.proj.lora.h")      \
    X(mlp_res_out, "mlp.res.out")              \
    X(ln_f_out, "ln_f.out")                    \
    X(ln_f_mean, "ln_f.mean")                  \
    X(ln_f_rstd, "ln_f.rstd")                  \
    X(lm_head_dinp, "lm_head.dinp")
// clang-format on

#define NAPKIN_ENUMERATOR(id, name) id,
enum class OpRole : std::uint8_t { NAPKIN_OP_ROLES(NAPKIN_ENUMERATOR) };
enum class KeptId : std::uint8_t { NAPKIN_KEPT_TENSORS(NAPKIN_ENUMERATOR) };
#undef NAPKIN_ENUMERATOR
#define NAPKIN_ROLE_NAME(id, name) EnumName<OpRole>{OpRole::id, name},
#define NAPKIN_KEPT_NAME(id, name) EnumName<KeptId>{KeptId::id, name},
inline constexpr std::array kOpRoleNames = {NAPKIN_OP_ROLES(NAPKIN_ROLE_NAME)};
inline constexpr std::array kKeptNames = {NAPKIN_KEPT_TENSORS(NAPKIN_KEPT_NAME)};
#undef NAPKIN_ROLE_NAME
#undef NAPKIN_KEPT_NAME

// Each table lists its enum in order (one line of one list each), so a value indexes its name.
constexpr std::string_view op_role_name(OpRole r) {
    return kOpRoleNames[static_cast<std::size_t>(r)].name;
}
constexpr std::string_view kept_name(KeptId t) {
    return kKeptNames[static_cast<std::size_t>(t)].name;
}

// The tensors each norm keeps (rmsnorm: no mean).
struct NormKept {
    KeptId out, mean, rstd;
};
inline constexpr NormKept kLn1Kept{KeptId::ln_1_out, KeptId::ln_1_mean, KeptId::ln_1_rstd};
inline constexpr NormKept kLn2Kept{KeptId::ln_2_out, KeptId::ln_2_mean, KeptId::ln_2_rstd};
inline constexpr NormKept kLnfKept{KeptId::ln_f_out, KeptId::ln_f_mean, KeptId::ln_f_rstd};

// The scale pair kept beside an fp8 GEMM input (core/engine/gpt_fp8.h): ln_1.out,
// attn.out, ln_2.out, mlp.act.out.
KeptId kept_scale(KeptId gemm_input);

// A tensor kept from an op's forward for some backward.
struct PlanTensor {
    KeptId id = KeptId::embedding_out;
    std::int64_t numel = 0;
    DType dtype = DType::f32;
    bool recomputed = false;  // rebuilt during backward (checkpointing), not kept through forward
    std::uint64_t bytes() const { return storage_bytes(dtype, static_cast<std::uint64_t>(numel)); }
    std::string_view name() const { return kept_name(id); }  // "attn.qkv.out"
};

using OpShape = std::variant<EmbeddingShape, NormShape, MatmulShape, RopeShape, AttentionShape,
                             ActivationShape, ResidualShape, LoraShape, CrossEntropyShape>;

struct PlanOp {
    OpRole role = OpRole::embedding;
    OpKind kind = OpKind::matmul;
    OpShape shape;
    KernelCost fwd;
    KernelCost bwd_input;   // gradients with respect to the op's inputs
    KernelCost bwd_weight;  // gradients with respect to its parameters (none when frozen)
    // FLOPs counted in model FLOPs (MFU): matmuls, attention's two products, LoRA adapters.
    bool model_flops = false;
    // Extra hardware FLOPs in backward: re-running this op's forward under checkpointing, and
    // flash attention's recomputation of S inside its backward kernel.
    std::uint64_t recompute_flops = 0;
    std::array<PlanTensor, 5> saved{};
    int n_saved = 0;

    std::string_view name() const { return op_role_name(role); }  // "attn.qkv"
    void keep(KeptId tensor, std::int64_t numel, DType dt) {
        saved[static_cast<std::size_t>(n_saved++)] = PlanTensor{tensor, numel, dt, false};
    }
};

struct PlanInputs {
    std::int64_t micro_batch = 1;  // B
    std::int64_t seq_len = 0;      // T
    Precision precision = Precision::bf16_amp;
    OptimizerKind optimizer = OptimizerKind::adamw;  // only its gradient dtype matters here
    bool grads_fp32 = false;
    Checkpointing checkpointing = Checkpointing::none;
    AttentionImpl attention = AttentionImpl::flash;
    Finetune finetune = Finetune::full;
    std::int64_t lora_rank = 0;
    // LoRA's alpha: the adapters' output is scaled by alpha / r (0: alpha = r, a scale of 1).
    // The engine's only; costs do not depend on it.
    float lora_alpha = 0.0f;
    std::int64_t loss_chunk_rows = 1024;  // rows of fp32 logits alive at once (0: all B*T)
    // Attention FLOPs count only the (query, key) pairs the causal mask keeps (llm.c, recent
    // Megatron); false counts all T*T pairs as PaLM's MFU definition does.
    bool causal_flops = true;
    // napkin train --detect-anomaly (core/engine/anomaly.h): the engine checks every op's
    // outputs into a buffer of slots the buffer plan adds (anomaly_slot_count).
    bool detect_anomaly = false;
    // napkin train --fusion on (its default) on the CUDA backend: cuBLASLt's epilogues may take
    // the MLP's GELU into its GEMMs and the linears' bias gradients into their weight-gradient
    // GEMMs. A request: the plan decides where it applies (epilogue_fusions below).
    bool gemm_epilogues = false;
    // fp8-amp's scaling (kernels/quantize.h): the length H of each cast site's amax history
    // (delayed scaling, Transformer Engine's default recipe); 0: current scaling. The histories
    // and scale pairs are buffers of the buffer plan (fp8_slots below).
    std::int64_t fp8_amax_history = 16;
};

// What in.gemm_epilogues turns on for a model and recipe. Only for 16-bit storage (bf16-amp,
// fp16-amp, bf16): the epilogues round where the unfused kernels do not (GELU of the fp32
// product; bias gradients rounded before their add), which fp32 would show as changed bits and
// fp8-amp's GEMMs do not offer.
//   gelu: a GELU MLP, fully trained (an fc adapter adds between the GEMM and GELU), d_ff a
//     multiple of 8 (cuBLASLt's AUX leading dimension). mlp.fc runs matmul_gelu_forward and
//     keeps mlp.act.out too; mlp.act launches nothing, forward or backward, and keeps GELU's
//     FLOPs only; mlp.proj's backward runs matmul_gelu_backward (DGELU, and the fc's bias
//     gradient by DGELU_BGRAD).
//   bias_grad: the other linears' bias gradients by BGRADB on their weight-gradient GEMMs (the
//     costs already count a bias gradient without a second read of dout).
struct EpilogueFusions {
    bool gelu = false;
    bool bias_grad = false;
};
EpilogueFusions epilogue_fusions(const ModelConfig& cfg, const PlanInputs& in);

struct OpPlan {
    const ModelConfig* config = nullptr;
    PlanInputs in;
    std::vector<PlanOp> prologue;
    std::vector<PlanOp> block;  // one transformer block; repeats config->n_layers times
    std::vector<PlanOp> epilogue;
    int n_layers = 0;
    EpilogueFusions fusions;  // epilogue_fusions(*config, in)
};

// Builds the plan into `out`, reusing its vectors' capacity (the estimator's sweep builds
// millions of plans). The config must outlive the plan. Throws UsageError on a bad shape.
void build_op_plan(const ModelConfig& cfg, const PlanInputs& in, OpPlan& out);
OpPlan build_op_plan(const ModelConfig& cfg, const PlanInputs& in);

// fp8-amp: the elements the engine casts to fp8 around one block GEMM at a time, transient
// temporaries sized for the largest: a weight (N K, E4M3) and an output gradient (M N, E5M2),
// each with its scale pair (core/engine/gpt_impl.h). Zeros when the GEMMs are not fp8.
struct Fp8CastNumel {
    std::int64_t weight = 0;
    std::int64_t grad = 0;
};
Fp8CastNumel fp8_cast_numel(const OpPlan& plan);

// fp8-amp's delayed scaling (in.fp8_amax_history H > 0): one slot (an amax history of H fp32 and
// a scale pair) per cast site: in layer l, for the block's fp8 GEMM g of G (qkv, attention
// projection, MLP up, MLP down, in plan order), its input and its weight (E4M3), its output
// gradient (E5M2). Rows: the E4M3 slots first, input 2 (l G + g), weight 2 (l G + g) + 1; then
// the E5M2 slots, 2 L G + l G + g. All zero without fp8 GEMMs or with H = 0.
struct Fp8Slots {
    std::int64_t gemms = 0;  // G, per block
    std::int64_t e4m3 = 0;   // 2 L G
    std::int64_t e5m2 = 0;   // L G
    std::int64_t total() const { return e4m3 + e5m2; }
};
Fp8Slots fp8_slots(const OpPlan& plan);

// Sums over the plan (block ops counted n_layers times). All FLOPs per micro-batch step.
struct PlanTotals {
    std::uint64_t model_flops_fwd = 0;  // matmul-class forward FLOPs
    std::uint64_t model_flops_bwd = 0;  // their backward (input + weight gradients)
    std::uint64_t other_flops = 0;      // elementwise work, forward + backward
    std::uint64_t recompute_flops = 0;  // checkpointing and flash recompute
    std::uint64_t kept_bytes = 0;       // activations kept through the forward (all layers)
    std::uint64_t block_kept_bytes = 0;        // of which one block
    std::uint64_t block_recomputed_bytes = 0;  // one block's recomputed tensors (backward only)
    std::uint64_t epilogue_kept_bytes = 0;     // freed once the head's backward is done
    std::uint64_t max_workspace_bytes = 0;     // largest per-call scratch
    std::uint64_t model_flops() const { return model_flops_fwd + model_flops_bwd; }
    // Peak activation bytes: everything kept at the end of the forward, or, when the last block
    // is rebuilt for its backward (checkpointing), everything kept but the epilogue's (already
    // consumed) plus that block's recomputed tensors, whichever is larger.
    std::uint64_t activation_peak_bytes() const {
        const std::uint64_t rebuilding = kept_bytes - epilogue_kept_bytes + block_recomputed_bytes;
        return rebuilding > kept_bytes ? rebuilding : kept_bytes;
    }
};

PlanTotals plan_totals(const OpPlan& plan);

}  // namespace napkin
