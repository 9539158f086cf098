// The buffer plan against counts by hand: GPT-2's buffers on each backend, byte for byte, and
// what each recipe adds (naive attention's dS, LoRA's dh, QLoRA's dequantized weight, fp8-amp's
// casts and transposes, the CUDA optimizer step's global-norm scratch). The engine's own
// allocations are held against the plan in tests/engine/gpt_buffers_test.cpp (CPU) and
// tests/engine_cuda/gpt_buffers_cuda_test.cpp (CUDA).
#include "core/buffer_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace napkin {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

PlanInputs gpt2_inputs(Precision precision) {
    PlanInputs in;
    in.micro_batch = 4;
    in.seq_len = 1024;
    in.precision = precision;
    return in;
}

// (name, bytes) of every buffer, in order.
std::vector<std::pair<std::string, std::uint64_t>> listed(const BufferPlan& p) {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (const PlanBuffer& b : p.buffers)
        out.emplace_back(std::string(b.name), b.bytes());
    return out;
}

std::int64_t bytes_of(const BufferPlan& p, BufferRole role) {
    const PlanBuffer* b = p.find(role);
    return b == nullptr ? 0 : static_cast<std::int64_t>(b->bytes());
}

// GPT-2 (C 768, F 3072, Vp 50304), B T = 4096 rows, bf16: the gradient buffers 2 bytes a row
// element; the CUDA loss chunk (1024 rows) is fp32 logits, bf16 dlogits and the head gradient's
// fp32 sum (each a multiple of 256 bytes here); the cuBLASLt workspace 32 MiB; the row losses;
// the step's scalars (kernels/step_scalars.h), one padded block.
TEST(BufferPlan, Gpt2OnCudaByHand) {
    const ModelConfig& c = preset_or_throw("gpt2");
    const OpPlan plan = build_op_plan(c, gpt2_inputs(Precision::bf16_amp));
    const BufferPlan p = build_buffer_plan(plan, DeviceKind::cuda);
    const std::uint64_t N = 4096, C = 768, F = 3072, Vp = 50304;
    const std::vector<std::pair<std::string, std::uint64_t>> want = {
        {"grad.residual", N * C * 2},  {"grad.narrow", N * F * 2},
        {"grad.wide", N * F * 2},  // max(3C, F)
        {"branch.out", N * C * 2},     {"loss.scratch", 1024 * Vp * 4 + 1024 * Vp * 2 + Vp * C * 4},
        {"matmul.scratch", 32 * kMiB}, {"loss.rows", N * 4},
        {"step.scalars", 256}};
    EXPECT_EQ(listed(p), want);
    for (const PlanBuffer& b : p.buffers)
        EXPECT_EQ(b.category, MemCategory::temporaries) << b.name;
}

// The CPU: fp32 GEMMs and loss read the tensors themselves (no GEMM scratch, logits only), the
// row losses are host memory outside the accounting; bf16 widens the largest block GEMM's three
// operands (the fc: M K + N K + M N) and the head's (2 Vp C + 2 rows C) to fp32.
TEST(BufferPlan, Gpt2OnCpuByHand) {
    const ModelConfig& c = preset_or_throw("gpt2");
    const std::uint64_t N = 4096, C = 768, F = 3072, Vp = 50304;
    const BufferPlan fp32 =
        build_buffer_plan(build_op_plan(c, gpt2_inputs(Precision::fp32)), DeviceKind::cpu);
    const std::vector<std::pair<std::string, std::uint64_t>> want = {
        {"grad.residual", N * C * 4},
        {"grad.narrow", N * F * 4},
        {"grad.wide", N * F * 4},
        {"branch.out", N * C * 4},
        {"loss.scratch", 1024 * Vp * 4}};
    EXPECT_EQ(listed(fp32), want);
    const BufferPlan bf16 =
        build_buffer_plan(build_op_plan(c, gpt2_inputs(Precision::bf16_amp)), DeviceKind::cpu);
    EXPECT_EQ(bytes_of(bf16, BufferRole::loss_scratch),
              4 * (1024 * Vp + 2 * Vp * C + 2 * 1024 * C));
    EXPECT_EQ(bytes_of(bf16, BufferRole::matmul_scratch), 4 * (N * C + F * C + N * F));
    EXPECT_EQ(bf16.find(BufferRole::loss_rows), nullptr);
    EXPECT_EQ(bf16.find(BufferRole::step_scalars), nullptr);
}

TEST(BufferPlan, RecipesAddTheirBuffers) {
    ModelConfig c = preset_or_throw("llama2-7b");  // C 4096, F 11008, SwiGLU (F_fc 2F), 32 heads
    PlanInputs in;
    in.micro_batch = 2;
    in.seq_len = 512;
    in.precision = Precision::bf16_amp;
    in.attention = AttentionImpl::naive;
    in.finetune = Finetune::qlora;
    in.lora_rank = 16;
    const std::int64_t N = 1024, C = 4096, F = 11008;
    for (DeviceKind backend : {DeviceKind::cpu, DeviceKind::cuda}) {
        const BufferPlan p = build_buffer_plan(build_op_plan(c, in), backend);
        EXPECT_EQ(bytes_of(p, BufferRole::grad_wide), N * 2 * F * 2);  // max(3C, 2F)
        EXPECT_EQ(bytes_of(p, BufferRole::attention_scratch), 2 * 32 * 512 * 512 * 4);  // B NH T^2
        EXPECT_EQ(bytes_of(p, BufferRole::lora_dh), N * 3 * 16 * 2);
        EXPECT_EQ(bytes_of(p, BufferRole::nf4_dequantized), 2 * F * C * 2);  // gate and up
    }
    in.finetune = Finetune::lora;  // the weights stay in bf16: nothing to dequantize
    EXPECT_EQ(
        build_buffer_plan(build_op_plan(c, in), DeviceKind::cuda).find(BufferRole::nf4_dequantized),
        nullptr);
}

// fp8-amp on GPT-2 (B T = 4096): the largest weight cast is the fc's or the proj's N K = F C,
// the largest output gradient the fc's M N = 4096 F; on CUDA the GEMM scratch adds, behind the
// 32 MiB workspace, the largest GEMM's transposed output gradient and input (M N + M K; the
// weight's backward cast writes its transpose into fp8.weight).
TEST(BufferPlan, Fp8CastsAndTransposes) {
    const ModelConfig& c = preset_or_throw("gpt2");
    const OpPlan plan = build_op_plan(c, gpt2_inputs(Precision::fp8_amp));
    const std::int64_t N = 4096, C = 768, F = 3072;
    for (DeviceKind backend : {DeviceKind::cpu, DeviceKind::cuda}) {
        const BufferPlan p = build_buffer_plan(plan, backend);
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_weight), F * C);
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_weight_scale), 32);
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_grad), N * F);
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_grad_scale), 32);
        // Delayed scaling (H 16 by default): 12 layers x 4 GEMMs x 3 sites, (16 + 8) floats each.
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_amax_history), 12 * 4 * 3 * 16 * 4);
        EXPECT_EQ(bytes_of(p, BufferRole::fp8_scales), 12 * 4 * 3 * 8 * 4);
    }
    const BufferPlan cuda = build_buffer_plan(plan, DeviceKind::cuda);
    EXPECT_EQ(bytes_of(cuda, BufferRole::matmul_scratch), 32 * kMiB + N * F + N * C);
    PlanInputs current = gpt2_inputs(Precision::fp8_amp);
    current.fp8_amax_history = 0;  // current scaling keeps no state
    const BufferPlan none = build_buffer_plan(build_op_plan(c, current), DeviceKind::cuda);
    EXPECT_EQ(none.find(BufferRole::fp8_amax_history), nullptr);
    EXPECT_EQ(none.find(BufferRole::fp8_scales), nullptr);
}

// The global norm's scratch: 256 bytes for the result, 256 fp64 partial sums per tensor; on
// CUDA only, last, and only when asked for (the model alone allocates none).
TEST(BufferPlan, GradNormScratchOnTheDeviceStepOnly) {
    EXPECT_EQ(grad_norm_scratch(148).bytes(), 256u + 148u * 256u * 8u);
    const OpPlan plan = build_op_plan(preset_or_throw("gpt2"), gpt2_inputs(Precision::bf16_amp));
    const BufferPlan model = build_buffer_plan(plan, DeviceKind::cuda);
    const BufferPlan step = build_buffer_plan(plan, DeviceKind::cuda, 148);
    ASSERT_EQ(step.buffers.size(), model.buffers.size() + 1);
    EXPECT_EQ(step.buffers.back().name, "optimizer.grad_norm.scratch");
    EXPECT_EQ(step.bytes(MemCategory::temporaries),
              model.bytes(MemCategory::temporaries) + grad_norm_scratch(148).bytes());
    EXPECT_EQ(build_buffer_plan(plan, DeviceKind::cpu, 148).find(BufferRole::grad_norm_scratch),
              nullptr);
}

// --detect-anomaly's slots: 24 bytes for each of 8 checks per op (4 tensors, forward and
// backward) and one more. GPT-2's plan has 124 ops (a prologue and epilogue op each, 10 per
// block): 24 (8 x 124 + 1) = 23,832 bytes, the difference the H200 session measured between runs
// with and without the flag (bench/results/2026-11-27-h200/runs/memdiff.txt). None without it.
TEST(BufferPlan, AnomalySlotsOnlyWithTheFlag) {
    const ModelConfig& c = preset_or_throw("gpt2");
    PlanInputs in = gpt2_inputs(Precision::bf16_amp);
    const OpPlan off = build_op_plan(c, in);
    EXPECT_EQ(anomaly_slot_count(off), 0u);
    EXPECT_EQ(build_buffer_plan(off, DeviceKind::cuda).find(BufferRole::anomaly_slots), nullptr);
    in.detect_anomaly = true;
    const OpPlan on = build_op_plan(c, in);
    ASSERT_EQ(on.prologue.size() + on.epilogue.size() + 12 * on.block.size(), 124u);
    EXPECT_EQ(anomaly_slot_count(on), 993u);
    for (DeviceKind backend : {DeviceKind::cpu, DeviceKind::cuda}) {
        const BufferPlan p = build_buffer_plan(on, backend);
        EXPECT_EQ(bytes_of(p, BufferRole::anomaly_slots), 23832);
        EXPECT_EQ(p.bytes(MemCategory::temporaries),
                  build_buffer_plan(off, backend).bytes(MemCategory::temporaries) + 23832u);
    }
}

TEST(BufferPlan, LossChunkRows) {
    PlanInputs in = gpt2_inputs(Precision::fp32);
    EXPECT_EQ(loss_chunk_rows(in), 1024);
    in.loss_chunk_rows = 0;  // all rows
    EXPECT_EQ(loss_chunk_rows(in), 4096);
    in.loss_chunk_rows = 10000;  // at most B T
    EXPECT_EQ(loss_chunk_rows(in), 4096);
}

}  // namespace
}  // namespace napkin
