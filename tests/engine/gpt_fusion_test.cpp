// The epilogue fusions as the op plan decides them (core/op_plan.h, EpilogueFusions) and as the
// engine runs them (core/engine/gpt_block.h), on the CPU engine: its kernels are the CUDA
// epilogues' twins (kernels/cpu/matmul.cpp), so the plan, the ranges and the numbers are checked
// without a GPU (tests/engine_cuda/gpt_cuda_test.cpp runs the CUDA engine against the CPU's
// unfused kernels; napkin train sets PlanInputs::gemm_epilogues on CUDA only).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/engine/gpt.h"
#include "core/op_plan.h"
#include "profiler/event.h"
#include "tests/engine/kernel_count.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

using test::Batch;
using test::random_batch;
using test::small_config;

PlanInputs fused_inputs(Precision precision, Checkpointing ck, bool epilogues) {
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 9;
    in.precision = precision;
    in.checkpointing = ck;
    in.gemm_epilogues = epilogues;
    return in;
}

const ModelConfig kGpt2 =
    small_config(NormKind::layernorm, PositionKind::learned, MlpKind::gelu, 4, true);

// Only 16-bit storage, GELU MLPs, fully trained, d_ff a multiple of 8 (GELU); the bias gradients
// under any 16-bit recipe but fp8-amp's.
TEST(EpilogueFusions, ApplyWhereTheEpiloguesRoundAsThePlanSays) {
    const auto fusions = [](ModelConfig c, PlanInputs in) { return epilogue_fusions(c, in); };
    PlanInputs in = fused_inputs(Precision::bf16_amp, Checkpointing::none, true);
    EXPECT_TRUE(fusions(kGpt2, in).gelu);
    EXPECT_TRUE(fusions(kGpt2, in).bias_grad);
    for (Precision p : {Precision::fp16_amp, Precision::bf16})
        EXPECT_TRUE(fusions(kGpt2, fused_inputs(p, Checkpointing::full, true)).gelu);
    EXPECT_FALSE(
        fusions(kGpt2, fused_inputs(Precision::bf16_amp, Checkpointing::none, false)).gelu);
    for (Precision p : {Precision::fp32, Precision::fp8_amp}) {
        const EpilogueFusions f = fusions(kGpt2, fused_inputs(p, Checkpointing::none, true));
        EXPECT_FALSE(f.gelu || f.bias_grad) << enum_name(kPrecisionNames, p);
    }
    ModelConfig odd = kGpt2;
    odd.d_ff = 36;  // cuBLASLt's AUX leading dimension must be a multiple of 8
    EXPECT_FALSE(fusions(odd, in).gelu);
    EXPECT_TRUE(fusions(odd, in).bias_grad);
    const ModelConfig llama =
        small_config(NormKind::rmsnorm, PositionKind::rope, MlpKind::swiglu, 2, false);
    EXPECT_FALSE(fusions(llama, in).gelu);
    PlanInputs lora = in;
    lora.finetune = Finetune::lora;
    lora.lora_rank = 4;
    EXPECT_FALSE(fusions(kGpt2, lora).gelu);
}

const PlanOp& op_of(const OpPlan& plan, OpRole role) {
    for (const PlanOp& op : plan.block)
        if (op.role == role) return op;
    ADD_FAILURE() << "no " << op_role_name(role);
    return plan.block.front();
}

// Fusing moves bytes, not FLOPs or memory: the totals' FLOPs and kept bytes are the unfused
// plan's; GELU's passes (a read and a write of N F forward, two reads and a write backward) are
// gone, and the fused GEMMs read and write what they add (the pre-activation).
TEST(EpilogueFusions, PlanMovesGelusBytesIntoTheGemms) {
    for (Checkpointing ck : {Checkpointing::none, Checkpointing::full}) {
        SCOPED_TRACE(std::string(enum_name(kCheckpointingNames, ck)));
        const OpPlan off = build_op_plan(kGpt2, fused_inputs(Precision::bf16_amp, ck, false));
        const OpPlan on = build_op_plan(kGpt2, fused_inputs(Precision::bf16_amp, ck, true));
        ASSERT_TRUE(on.fusions.gelu);
        const PlanTotals t_off = plan_totals(off), t_on = plan_totals(on);
        EXPECT_EQ(t_on.model_flops(), t_off.model_flops());
        EXPECT_EQ(t_on.other_flops, t_off.other_flops);
        EXPECT_EQ(t_on.recompute_flops, t_off.recompute_flops);
        EXPECT_EQ(t_on.kept_bytes, t_off.kept_bytes);
        EXPECT_EQ(t_on.activation_peak_bytes(), t_off.activation_peak_bytes());

        const std::uint64_t nf = 2ull * 18 * static_cast<std::uint64_t>(kGpt2.d_ff);  // bf16
        const PlanOp& act = op_of(on, OpRole::mlp_act);
        EXPECT_EQ(act.fwd.bytes(), 0u);
        EXPECT_EQ(act.bwd_input.bytes(), 0u);
        EXPECT_EQ(act.fwd.flops, op_of(off, OpRole::mlp_act).fwd.flops);
        EXPECT_EQ(act.n_saved, 0);
        const PlanOp& fc = op_of(on, OpRole::mlp_fc);
        ASSERT_EQ(fc.n_saved, 2);
        EXPECT_EQ(fc.saved[1].id, KeptId::mlp_act_out);
        EXPECT_EQ(fc.saved[1].recomputed, ck == Checkpointing::full);
        EXPECT_EQ(fc.fwd.bytes(), op_of(off, OpRole::mlp_fc).fwd.bytes() + nf);
        const PlanOp& proj = op_of(on, OpRole::mlp_proj);
        const PlanOp& proj_off = op_of(off, OpRole::mlp_proj);
        EXPECT_EQ(proj.bwd_input.bytes_read, proj_off.bwd_input.bytes_read + nf);
        // The fc bias's gradient: computed in mlp.proj's backward now.
        const PlanOp& fc_off = op_of(off, OpRole::mlp_fc);
        EXPECT_EQ(fc.bwd_weight.flops + proj.bwd_input.flops,
                  fc_off.bwd_weight.flops + proj_off.bwd_input.flops);
        EXPECT_EQ(fc.bwd_weight.bytes() + proj.bwd_input.bytes(),
                  fc_off.bwd_weight.bytes() + proj_off.bwd_input.bytes() + nf);
    }
}

// The kernels of one forward and backward of m, by op (tests/engine/kernel_count.h).
std::map<std::string, int> kernels_by_op(Gpt& m, const Batch& batch) {
    profiler::Recorder rec;
    m.set_recorder(&rec);
    m.zero_grads();
    m.forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
    m.set_recorder(nullptr);
    return test::kernels_by_op(rec);
}

// Each block's fc launches matmul_gelu_forward (again in the recompute under full
// checkpointing), mlp.act nothing either way, mlp.proj's backward matmul_gelu_backward; and the
// loss and gradients stay within bf16's reach of the unfused engine's.
TEST(EpilogueFusions, GeluRunsInTheMlpsGemmsAndFollowsTheUnfusedEngine) {
    for (Checkpointing ck : {Checkpointing::none, Checkpointing::full}) {
        SCOPED_TRACE(std::string(enum_name(kCheckpointingNames, ck)));
        const Batch batch = random_batch(2 * 9, kGpt2.vocab_size, 7);
        HostMemory host;
        AccountingAllocator alloc(host);
        auto fused = Gpt::create(kGpt2, fused_inputs(Precision::bf16_amp, ck, true), alloc, 7);
        auto plain = Gpt::create(kGpt2, fused_inputs(Precision::bf16_amp, ck, false), alloc, 7);
        std::map<std::string, int> count = kernels_by_op(*fused, batch);
        const int L = kGpt2.n_layers, runs = ck == Checkpointing::full ? 2 : 1;
        EXPECT_EQ(count["mlp.fc matmul_gelu_forward"], L * runs);
        EXPECT_EQ(count["mlp.fc matmul_forward"], 0);
        EXPECT_EQ(count["mlp.act gelu_forward"], 0);
        EXPECT_EQ(count["mlp.proj backward matmul_gelu_backward"], L);
        EXPECT_EQ(count["mlp.act backward gelu_backward"], 0);
        EXPECT_EQ(count["mlp.act backward memset"], 0) << "dwide_ is overwritten, not zeroed";
        count = kernels_by_op(*plain, batch);
        EXPECT_EQ(count["mlp.act gelu_forward"], L * runs);
        EXPECT_EQ(count["mlp.fc matmul_gelu_forward"], 0);

        fused->zero_grads();
        plain->zero_grads();
        const float loss_fused =
            fused->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
        const float loss_plain =
            plain->forward_backward(batch.inputs.data(), batch.targets.data(), 1.0f);
        EXPECT_NEAR(loss_fused, loss_plain, 1e-2 * std::fabs(loss_plain));
        bool any_differs = false;
        for (std::size_t i = 0; i < fused->params().size(); ++i) {
            const ParamSlot& p = fused->params()[i];
            std::vector<float> a(static_cast<std::size_t>(p.numel)), b(a.size());
            fused->get_grad(i, a.data());
            plain->get_grad(i, b.data());
            double scale = 0.0;
            for (float g : b)
                scale = std::max(scale, static_cast<double>(std::fabs(g)));
            for (std::size_t k = 0; k < a.size(); ++k) {
                EXPECT_NEAR(a[k], b[k], 1e-4 + 5e-2 * scale) << p.name << "[" << k << "]";
                any_differs |= a[k] != b[k];
            }
        }
        EXPECT_TRUE(any_differs) << "the fused engine rounds where the unfused one does not";
    }
}

}  // namespace
}  // namespace napkin
