// The op plan against independent counts: FLOPs against 6 N_matmul + the attention term, and
// the kept tensors against Korthikanti et al.'s per-layer terms, exactly.
#include "core/op_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/check.h"

namespace napkin {
namespace {

PlanInputs inputs(std::int64_t B, std::int64_t T) {
    PlanInputs in;
    in.micro_batch = B;
    in.seq_len = T;
    return in;
}

// Model FLOPs of one micro-batch counted from the shape alone: each linear weight does
// 6 FLOPs per token (2 forward, 4 backward), each bias 2 (forward add, backward sum), and
// attention 12 * HD per (query, key) pair per head (4 forward, 8 backward).
std::uint64_t independent_model_flops(const ModelConfig& c, std::int64_t B, std::int64_t T) {
    const ParamCounts p = count_params(c);
    const std::uint64_t tokens = static_cast<std::uint64_t>(B * T);
    const std::uint64_t head = static_cast<std::uint64_t>(c.padded_vocab_size * c.d_model);
    const std::uint64_t blocks = static_cast<std::uint64_t>(c.n_layers * p.linear_per_layer);
    const std::int64_t fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    const std::uint64_t biases =
        c.bias       ? static_cast<std::uint64_t>(c.n_layers *
                                            (c.qkv_dim() + c.d_model + fc_rows + c.d_model))
        : c.qkv_bias ? static_cast<std::uint64_t>(c.n_layers * c.qkv_dim())
                     : 0;
    const std::uint64_t pairs = static_cast<std::uint64_t>(T * (T + 1) / 2);
    return 6 * tokens * (blocks + head) + 2 * tokens * biases +
           12ull * B * c.n_heads * c.head_dim() * pairs * c.n_layers;
}

TEST(OpPlan, Gpt2ModelFlopsMatchIndependentCount) {
    const ModelConfig& c = preset_or_throw("gpt2");
    const PlanTotals t = plan_totals(build_op_plan(c, inputs(4, 1024)));
    EXPECT_EQ(t.model_flops(), independent_model_flops(c, 4, 1024));
    // And the napkin closed form 6N + 6LTC per token within 1% (N: parameters in matmuls).
    const double per_token = static_cast<double>(t.model_flops()) / (4 * 1024);
    const double napkin = 6.0 * count_params(c).matmul + 6.0 * 12 * 1024 * 768;
    EXPECT_NEAR(per_token / napkin, 1.0, 0.01);
}

TEST(OpPlan, RandomShapesModelFlopsMatchIndependentCount) {
    std::mt19937 rng(std::random_device{}());
    for (int trial = 0; trial < 50; ++trial) {
        ModelConfig c;
        const int hd = 8 << (rng() % 4);
        c.n_kv_heads = 1 << (rng() % 3);
        c.n_heads = c.n_kv_heads * static_cast<int>(1 + rng() % 4);
        c.d_model = static_cast<std::int64_t>(c.n_heads) * hd;
        c.n_layers = static_cast<int>(1 + rng() % 6);
        c.d_ff = 16 * static_cast<std::int64_t>(1 + rng() % 64);
        c.vocab_size = static_cast<std::int64_t>(1 + rng() % 5000);
        c.padded_vocab_size = pad_vocab(c.vocab_size);
        c.context_length = 512;
        c.norm = rng() % 2 ? NormKind::layernorm : NormKind::rmsnorm;
        c.mlp = rng() % 2 ? MlpKind::gelu : MlpKind::swiglu;
        c.positions = rng() % 2 ? PositionKind::learned : PositionKind::rope;
        c.bias = rng() % 2;
        c.tied_embeddings = rng() % 2;
        validate(c);
        const std::int64_t B = 1 + rng() % 4, T = 1 + rng() % 512;
        const PlanTotals t = plan_totals(build_op_plan(c, inputs(B, T)));
        EXPECT_EQ(t.model_flops(), independent_model_flops(c, B, T)) << "trial " << trial;
    }
}

// One GPT-2 block at 2-byte activations keeps, per Korthikanti et al. 2022 (section 4.1),
// 34 sbh + 5 as^2 b bytes with dropout and 32 sbh + 2 as^2 b without; the plan adds the two
// LayerNorms' fp32 mean and rstd, 16 sb bytes.
TEST(OpPlan, Gpt2BlockKeepsKorthikantiTerms) {
    ModelConfig c = preset_or_throw("gpt2");
    const std::uint64_t s = 1024, b = 2, h = 768, a = 12;
    PlanInputs in = inputs(static_cast<std::int64_t>(b), static_cast<std::int64_t>(s));
    in.attention = AttentionImpl::naive;
    EXPECT_EQ(plan_totals(build_op_plan(c, in)).block_kept_bytes, 32 * s * b * h + 2 * a * s * s * b + 16 * s * b);
    c.dropout = 0.1;
    EXPECT_EQ(plan_totals(build_op_plan(c, in)).block_kept_bytes, 34 * s * b * h + 5 * a * s * s * b + 16 * s * b);
    // Flash: no scores; a (B, NH, T) fp32 logsumexp instead.
    in.attention = AttentionImpl::flash;
    EXPECT_EQ(plan_totals(build_op_plan(c, in)).block_kept_bytes, 34 * s * b * h + 4 * a * s * b + 16 * s * b);
}

// Qwen2's q/k/v-only biases and an explicit head dim (Mistral Nemo's 32 heads of 128 over
// d_model 5120): the attention works at NH HD = 4096 and its projection maps 4096 -> 5120.
TEST(OpPlan, QkvBiasAndExplicitHeadDim) {
    ModelConfig c = preset_or_throw("llama3-8b");
    c.d_model = 5120;
    c.explicit_head_dim = 128;
    c.qkv_bias = true;
    const OpPlan plan = build_op_plan(c, inputs(2, 256));
    EXPECT_EQ(plan_totals(plan).model_flops(), independent_model_flops(c, 2, 256));
    for (const PlanOp& op : plan.block) {
        if (op.role == OpRole::attn_proj) {
            EXPECT_EQ(std::get<MatmulShape>(op.shape).K, 4096);
            EXPECT_EQ(std::get<MatmulShape>(op.shape).N, 5120);
        }
        if (op.role == OpRole::attn_qkv) {
            EXPECT_TRUE(std::get<MatmulShape>(op.shape).bias);
        }
        if (op.role == OpRole::attn_core) {
            EXPECT_EQ(op.saved[1].numel, 2 * 256 * 4096);  // attn.out
        }
    }
}

TEST(OpPlan, FullCheckpointingKeepsOnlyBlockInputs) {
    const ModelConfig& c = preset_or_throw("gpt2");
    PlanInputs in = inputs(1, 1024);
    const PlanTotals none = plan_totals(build_op_plan(c, in));
    in.checkpointing = Checkpointing::full;
    const PlanTotals full = plan_totals(build_op_plan(c, in));
    const std::uint64_t sbh2 = 2ull * 1024 * 768;
    EXPECT_EQ(full.block_kept_bytes, sbh2);
    EXPECT_EQ(full.block_kept_bytes + full.block_recomputed_bytes, none.block_kept_bytes);
    EXPECT_EQ(full.model_flops(), none.model_flops());
    // Recompute: one more forward of the block except its last residual, flash's S included.
    std::uint64_t block_fwd = 0;
    std::uint64_t flash = 0;
    for (const PlanOp& op : build_op_plan(c, in).block) {
        if (op.role != OpRole::mlp_res) block_fwd += op.fwd.flops;
        if (op.kind == OpKind::attention) flash = attention_backward_recompute_flops(std::get<AttentionShape>(op.shape));
    }
    EXPECT_EQ(full.recompute_flops, 12 * (block_fwd + flash));
}

TEST(OpPlan, SelectiveRecomputesOnlyScores) {
    const ModelConfig& c = preset_or_throw("gpt2");
    PlanInputs in = inputs(1, 1024);
    in.attention = AttentionImpl::naive;
    in.checkpointing = Checkpointing::selective;
    const PlanTotals t = plan_totals(build_op_plan(c, in));
    EXPECT_EQ(t.block_recomputed_bytes, 2ull * 12 * 1024 * 1024);  // P, bf16
    EXPECT_EQ(t.block_kept_bytes, 32ull * 1024 * 768 + 16 * 1024);
    // What is dropped is rebuilt by rerunning the core attention forward, Q K^T and P V over the
    // 1024 * 1025 / 2 causal pairs of each of the 12 heads (HD 64) in each of the 12 blocks.
    EXPECT_EQ(t.recompute_flops, 12ull * 4 * 12 * 64 * (1024 * 1025 / 2));
}

TEST(OpPlan, LoraFreezesBaseAndAddsAdapters) {
    const ModelConfig& c = preset_or_throw("llama2-7b");
    PlanInputs in = inputs(1, 512);
    in.finetune = Finetune::qlora;
    in.lora_rank = 64;
    const OpPlan plan = build_op_plan(c, in);
    int adapters = 0;
    std::int64_t adapter_params = 0;
    for (const PlanOp& op : plan.block) {
        if (op.kind == OpKind::matmul) {
            EXPECT_EQ(op.bwd_weight.flops, 0u) << op.name();
            EXPECT_EQ(std::get<MatmulShape>(op.shape).weight, DType::nf4) << op.name();
        }
        if (op.kind == OpKind::lora) {
            ++adapters;
            adapter_params += lora_params(std::get<LoraShape>(op.shape));
            EXPECT_GT(op.bwd_weight.flops, 0u);
        }
    }
    EXPECT_EQ(adapters, 4);
    // PEFT's count for Llama-2-7B, r = 64 on every linear: 159,907,840 over 32 layers.
    EXPECT_EQ(adapter_params * 32, 159907840);
}

TEST(OpPlan, LlamaHasRopeAndSwiglu) {
    const ModelConfig& c = preset_or_throw("llama3-8b");
    const OpPlan plan = build_op_plan(c, inputs(1, 128));
    bool rope = false;
    for (const PlanOp& op : plan.block) {
        if (op.kind == OpKind::rope) rope = true;
        if (op.role == OpRole::mlp_fc) {
            EXPECT_EQ(std::get<MatmulShape>(op.shape).N, 2 * 14336);
        }
    }
    EXPECT_TRUE(rope);
}

// The ops' and kept tensors' names (the trace's, the memory snapshot's, report.json's) come from
// their typed roles and ids, as they always read.
TEST(OpPlan, RolesAndKeptIdsKeepTheirNames) {
    const ModelConfig& c = preset_or_throw("gpt2");
    PlanInputs in = inputs(2, 64);
    in.attention = AttentionImpl::naive;
    in.finetune = Finetune::lora;
    in.lora_rank = 4;
    const OpPlan plan = build_op_plan(c, in);
    std::vector<std::string> ops, kept;
    for (const auto* part : {&plan.prologue, &plan.block, &plan.epilogue}) {
        for (const PlanOp& op : *part) {
            ops.emplace_back(op.name());
            for (int i = 0; i < op.n_saved; ++i)
                kept.emplace_back(op.saved[static_cast<std::size_t>(i)].name());
        }
    }
    EXPECT_EQ(ops, (std::vector<std::string>{
                       "embedding", "ln_1", "attn.qkv", "attn.qkv.lora", "attn.core", "attn.proj",
                       "attn.proj.lora", "attn.res", "ln_2", "mlp.fc", "mlp.fc.lora", "mlp.act",
                       "mlp.proj", "mlp.proj.lora", "mlp.res", "ln_f", "lm_head", "loss"}));
    EXPECT_EQ(kept, (std::vector<std::string>{
                        "embedding.out",    "ln_1.out",        "ln_1.mean",     "ln_1.rstd",
                        "attn.qkv.out",     "attn.qkv.lora.h", "attn.p",        "attn.out",
                        "attn.proj.lora.h", "attn.res.out",    "ln_2.out",      "ln_2.mean",
                        "ln_2.rstd",        "mlp.fc.out",      "mlp.fc.lora.h", "mlp.act.out",
                        "mlp.proj.lora.h",  "mlp.res.out",     "ln_f.out",      "ln_f.mean",
                        "ln_f.rstd",        "lm_head.dinp"}));
    EXPECT_EQ(op_role_name(OpRole::attn_rope), "attn.rope");
    EXPECT_EQ(kept_name(KeptId::attn_p_dropped), "attn.p.dropped");
    EXPECT_EQ(kept_scale(KeptId::mlp_act_out), KeptId::mlp_act_out_scale);
    EXPECT_EQ(kept_name(kept_scale(KeptId::attn_out)), "attn.out.scale");
    EXPECT_THROW(kept_scale(KeptId::attn_p), InternalError);
}

TEST(OpPlan, RejectsBadInputs) {
    const ModelConfig& c = preset_or_throw("gpt2");
    EXPECT_THROW(build_op_plan(c, inputs(0, 1024)), UsageError);
    EXPECT_THROW(build_op_plan(c, inputs(1, -1)), UsageError);
    EXPECT_THROW(build_op_plan(c, inputs(1, 2048)), UsageError);  // past the learned positions
    PlanInputs in = inputs(1, 64);
    in.finetune = Finetune::lora;
    in.lora_rank = 0;
    EXPECT_THROW(build_op_plan(c, in), UsageError);
}

TEST(OpPlan, CostsAreNonzeroAndFinite) {
    for (const auto& c : model_presets()) {
        const OpPlan plan = build_op_plan(c, inputs(1, std::min<std::int64_t>(c.context_length, 256)));
        for (const auto* ops : {&plan.prologue, &plan.block, &plan.epilogue}) {
            for (const PlanOp& op : *ops) {
                EXPECT_GT(op.fwd.bytes(), 0u) << c.name << " " << op.name();
            }
        }
    }
}

}  // namespace
}  // namespace napkin
