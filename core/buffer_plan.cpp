#include "core/buffer_plan.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/decode_attention.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nonfinite.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"
#include "kernels/step_scalars.h"

namespace napkin {

namespace {

// The CPU's GEMM scratch in floats: with 16-bit or fp8 storage (`widen`) the operands of the
// block's largest matmul or LoRA adapter widened to fp32 (kernels/matmul.h, kernels/lora.h); none
// for fp32, whose GEMMs read the tensors themselves.
std::int64_t cpu_gemm_scratch_floats(const std::vector<PlanOp>& block, bool widen) {
    std::int64_t floats = 0;
    if (!widen) return floats;
    for (const PlanOp& op : block) {
        if (op.kind == OpKind::matmul) {
            const auto& s = std::get<MatmulShape>(op.shape);
            floats = std::max(floats, cpu::matmul_scratch_floats(s.M, s.N, s.K));
        } else if (op.kind == OpKind::lora) {
            floats =
                std::max(floats, cpu::lora_scratch_floats(std::get<LoraShape>(op.shape), true));
        }
    }
    return floats;
}

// The norms' backward borrows the GEMM scratch for its partials (kernels/norm.h): the one-pass
// kernel's largest, kNormBackwardBlocks blocks x 2 x the widest warp row's C in fp32, fits the
// workspace alone, so it never needs a byte more than the GEMMs.
static_assert(cuda::kNormBackwardBlocks * 2 * (cuda::kNormWarpRowBytes / 2) * sizeof(float) <=
              cuda::kMatmulWorkspaceBytes);

// The CUDA GEMM scratch in bytes: the cuBLASLt workspace, then, when the block's GEMMs are fp8,
// the fp8 backward's transposed output gradient and input for the largest of them
// (kernels/matmul.h; the weight's transpose is cast into fp8.weight).
std::size_t cuda_gemm_scratch_bytes(const std::vector<PlanOp>& block) {
    std::size_t transposes = 0;
    for (const PlanOp& op : block) {
        if (op.kind != OpKind::matmul) continue;
        const auto& s = std::get<MatmulShape>(op.shape);
        if (s.in == DType::f8e4m3)
            transposes =
                std::max(transposes, cuda::matmul_fp8_backward_scratch_bytes(s.M, s.N, s.K));
    }
    return cuda::kMatmulWorkspaceBytes + transposes;
}

// Device scratch sized in bytes, held as fp32 (the kernels take a float*): every size here is a
// multiple of 256 bytes.
std::int64_t floats_of(std::size_t bytes) {
    return static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
}

// QLoRA: the widest linear weight (N K of the block's largest GEMM), which each GEMM's NF4
// weight is dequantized into; none otherwise.
std::int64_t dequantized_numel(const OpPlan& plan) {
    if (plan.in.finetune != Finetune::qlora) return 0;
    std::int64_t numel = 0;
    for (const PlanOp& op : plan.block) {
        if (op.kind != OpKind::matmul) continue;
        const auto& s = std::get<MatmulShape>(op.shape);
        numel = std::max(numel, s.N * s.K);
    }
    return numel;
}

}  // namespace

const PlanBuffer* BufferPlan::find(BufferRole role) const {
    for (const PlanBuffer& b : buffers) {
        if (b.role == role) return &b;
    }
    return nullptr;
}

std::uint64_t BufferPlan::bytes(MemCategory category) const {
    std::uint64_t sum = 0;
    for (const PlanBuffer& b : buffers) {
        if (b.category == category) sum += b.bytes();
    }
    return sum;
}

std::int64_t loss_chunk_rows(const PlanInputs& in) {
    const std::int64_t rows = in.micro_batch * in.seq_len;
    return in.loss_chunk_rows > 0 ? std::min(in.loss_chunk_rows, rows) : rows;
}

std::size_t anomaly_slot_count(const OpPlan& plan) {
    if (!plan.in.detect_anomaly) return 0;
    const std::size_t ops = plan.prologue.size() + plan.epilogue.size() +
                            plan.block.size() * static_cast<std::size_t>(plan.n_layers);
    return 2 * 4 * ops + 1;
}

PlanBuffer grad_norm_scratch(int tensors) {
    const std::size_t bytes =
        cuda::kGradNormResultBytes + cuda::grad_sum_squares_scratch_bytes(tensors);
    return PlanBuffer{BufferRole::grad_norm_scratch, "optimizer.grad_norm.scratch",
                      MemCategory::temporaries, DType::i8, static_cast<std::int64_t>(bytes)};
}

void build_buffer_plan(const OpPlan& plan, DeviceKind backend, int grad_norm_tensors,
                       BufferPlan& out) {
    NAPKIN_ASSERT(plan.config != nullptr, "build_buffer_plan: the op plan has no config");
    out.buffers.clear();
    const ModelConfig& c = *plan.config;
    const PlanInputs& in = plan.in;
    // The engine's storage type: weights, activations and their gradients alike.
    const DType dt = precision_dtypes(in.precision, in.optimizer, in.grads_fp32).activations;
    const bool cuda = backend == DeviceKind::cuda;
    const bool widen = dt != DType::f32;  // the CPU's 16-bit (and fp8) kernels widen to fp32
    const std::int64_t N = in.micro_batch * in.seq_len, C = c.d_model, Vp = c.padded_vocab_size;
    const std::int64_t fc_rows = c.mlp == MlpKind::swiglu ? 2 * c.d_ff : c.d_ff;
    auto add = [&](BufferRole role, std::string_view name, DType dtype, std::int64_t numel) {
        if (numel > 0)
            out.buffers.push_back(PlanBuffer{role, name, MemCategory::temporaries, dtype, numel});
    };

    // The backward's gradients: the residual stream's and a branch's (N, C), and two ping-pong
    // buffers as wide as the block's narrow and wide sides.
    add(BufferRole::grad_residual, "grad.residual", dt, N * C);
    add(BufferRole::grad_narrow, "grad.narrow", dt, N * std::max(C, c.d_ff));
    add(BufferRole::grad_wide, "grad.wide", dt, N * std::max(c.qkv_dim(), fc_rows));
    add(BufferRole::branch_out, "branch.out", dt, N * C);
    // The head and loss over a chunk of rows: the CPU's fp32 logits (16-bit: with the head's
    // operands widened), or the CUDA kernel's (logits, dlogits in the storage type, dw's fp32 sum).
    const std::int64_t chunk = loss_chunk_rows(in);
    add(BufferRole::loss_scratch, "loss.scratch", DType::f32,
        cuda ? floats_of(cuda::head_cross_entropy_scratch_bytes(chunk, C, Vp, dt, true))
             : cpu::head_cross_entropy_scratch_floats(chunk, C, Vp, widen));
    add(BufferRole::matmul_scratch, "matmul.scratch", DType::f32,
        cuda ? floats_of(cuda_gemm_scratch_bytes(plan.block))
             : cpu_gemm_scratch_floats(plan.block, widen));
    if (in.attention == AttentionImpl::naive) {  // the same dS on both backends
        add(BufferRole::attention_scratch, "attention.scratch", DType::f32,
            cpu::attention_naive_backward_scratch_floats(in.micro_batch, in.seq_len, c.n_heads));
    }
    // LoRA's dh = scale dY B, sized for qkv's three adapters (kernels/lora.h).
    if (in.finetune != Finetune::full)
        add(BufferRole::lora_dh, "lora.dh", dt, N * 3 * in.lora_rank);
    add(BufferRole::nf4_dequantized, "nf4.dequantized", dt, dequantized_numel(plan));
    if (cuda) add(BufferRole::loss_rows, "loss.rows", DType::f32, N);
    // The step's scalars, which the host reads once per step (kernels/step_scalars.h).
    if (cuda) {
        add(BufferRole::step_scalars, "step.scalars", DType::i8,
            static_cast<std::int64_t>(kStepScalarsBytes));
    }
    // fp8-amp: one block GEMM's weight (E4M3) and output gradient (E5M2) casts at a time, each
    // with its scale pair, sized for the largest (core/engine/gpt_fp8.h).
    const Fp8CastNumel cast = fp8_cast_numel(plan);
    if (cast.weight > 0) {
        add(BufferRole::fp8_weight, "fp8.weight", DType::f8e4m3, cast.weight);
        add(BufferRole::fp8_weight_scale, "fp8.weight.scale", DType::f32, kFp8ScaleFloats);
        add(BufferRole::fp8_grad, "fp8.grad", DType::f8e5m2, cast.grad);
        add(BufferRole::fp8_grad_scale, "fp8.grad.scale", DType::f32, kFp8ScaleFloats);
    }
    // Delayed scaling: each cast site's amax history and scale pair (op_plan.h, fp8_slots).
    const Fp8Slots slots = fp8_slots(plan);
    add(BufferRole::fp8_amax_history, "fp8.amax_history", DType::f32,
        slots.total() * in.fp8_amax_history);
    add(BufferRole::fp8_scales, "fp8.scales", DType::f32, slots.total() * kFp8ScaleFloats);
    static_assert(sizeof(NonfiniteSlot) % 4 == 0, "slots are whole floats");
    add(BufferRole::anomaly_slots, "anomaly.slots", DType::f32,
        static_cast<std::int64_t>(anomaly_slot_count(plan) * sizeof(NonfiniteSlot) / 4));
    if (cuda && grad_norm_tensors > 0) out.buffers.push_back(grad_norm_scratch(grad_norm_tensors));
}

BufferPlan build_buffer_plan(const OpPlan& plan, DeviceKind backend, int grad_norm_tensors) {
    BufferPlan out;
    build_buffer_plan(plan, backend, grad_norm_tensors, out);
    return out;
}

GenerateBuffers generate_buffers(const ModelConfig& cfg, const GenerateShape& shape, DType storage,
                                 DeviceKind device) {
    const std::int64_t C = cfg.d_model, F = cfg.d_ff, q = cfg.q_dim(), qkv = cfg.qkv_dim();
    const std::int64_t fc_rows = cfg.mlp == MlpKind::swiglu ? 2 * F : F;
    const std::int64_t M = shape.batch * shape.prompt_len;
    GenerateBuffers b;
    b.kv_cache_numel = 2 * cfg.n_layers * shape.batch * shape.positions() * cfg.kv_dim();
    const std::int64_t widths[] = {C + C, C + qkv, qkv + q, q + C, C + fc_rows, fc_rows + F, F + C};
    b.arena_numel = M * *std::max_element(std::begin(widths), std::end(widths));
    if (device == DeviceKind::cuda) {
        b.matmul_scratch_floats = static_cast<std::int64_t>(cuda::kMatmulWorkspaceBytes / 4);
        if (shape.flash_decoding &&
            decode_attention_can_split(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim())) {
            b.decode_workspace_floats =
                decode_attention_workspace_floats(shape.batch, 1, cfg.n_heads, cfg.head_dim(),
                                                  shape.positions(), kDecodeAttentionChunk);
        }
    } else if (storage != DType::f32) {
        const std::int64_t shapes[][3] = {{M, qkv, C},
                                          {M, C, q},
                                          {M, fc_rows, C},
                                          {M, C, F},
                                          {shape.batch, cfg.padded_vocab_size, C}};
        for (const auto& s : shapes)
            b.matmul_scratch_floats =
                std::max(b.matmul_scratch_floats, cpu::matmul_scratch_floats(s[0], s[1], s[2]));
    }
    return b;
}

}  // namespace napkin
