// The buffer plan, beside the op plan: every buffer the engine allocates besides the parameters,
// their optimizer states and the op plan's kept activations, for one backend. The backward's
// gradient buffers, the kernels' scratch, LoRA's and fp8's transients, fp8's delayed-scaling
// state (kept across steps, saved in checkpoints), and the CUDA optimizer step's global-norm
// scratch: name (the allocator's), memory category, dtype, elements.
//
// It is the one place that sizes them: the engine allocates its entries in order
// (core/engine/gpt_buffers.h) and the CUDA optimizer step its global-norm scratch
// (core/engine/cuda_device.cpp), and the estimator sums them into its temporaries
// (estimator/estimate.cpp), so the measured temporaries equal the prediction by construction.
// The kernels' scratch-size functions (kernels/<op>.h) have no other caller outside the kernels
// and their tests.
//
// Not in it: ZeRO's gathered units and gradient buckets (the `communication` category, allocated
// unit by unit as the shard layout lays them out, core/comm/shard_layout.h); and the CPU's
// per-row losses, host memory outside the accounting.
// Tests: tests/core/buffer_plan_test.cpp (sizes), tests/engine/gpt_buffers_test.cpp and
// tests/engine_cuda/gpt_buffers_cuda_test.cpp (the engine's allocations, CPU and CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/op_plan.h"

namespace napkin {

// What a buffer is for; the engine hands each to the member that uses it, the estimator
// itemizes its temporaries by it.
enum class BufferRole : std::uint8_t {
    grad_residual,   // the residual stream's gradient (N, C)
    grad_narrow,     // the backward's narrow ping-pong buffer (N, max(C, F))
    grad_wide,       // its wide one (N, max(QKV, F_fc))
    branch_out,      // a branch's output or gradient (N, C)
    loss_scratch,    // the chunked head + loss's scratch
    matmul_scratch,  // CPU: widened GEMM operands; CUDA: the cuBLASLt workspace [+ fp8 transposes]
    attention_scratch,  // naive attention's dS (B, NH, T, T) fp32
    lora_dh,            // the adapters' backward intermediate (N, 3r)
    nf4_dequantized,    // QLoRA: one NF4 linear weight dequantized for its GEMM
    loss_rows,          // CUDA: the per-row losses (N) on the device
    fp8_weight,         // fp8-amp: a block weight cast to E4M3, and its scale pair
    fp8_weight_scale,
    fp8_grad,  // fp8-amp: an output gradient cast to E5M2, and its scale pair
    fp8_grad_scale,
    fp8_amax_history,   // fp8-amp, delayed scaling: every cast site's amax history (slots, H)
    fp8_scales,         // and its scale pair for the step (slots, kFp8ScaleFloats)
    anomaly_slots,      // --detect-anomaly: one NonfiniteSlot per checked tensor, and one more
    grad_norm_scratch,  // CUDA optimizer step: the global norm's result and partial sums
    step_scalars,  // CUDA: the step's loss, norm, clip factor and skip (kernels/step_scalars.h)
};
inline constexpr std::size_t kBufferRoleCount =
    static_cast<std::size_t>(BufferRole::step_scalars) + 1;

struct PlanBuffer {
    BufferRole role = BufferRole::grad_residual;
    std::string_view name;  // as the allocator records it: "grad.residual"
    MemCategory category = MemCategory::temporaries;
    DType dtype = DType::f32;
    std::int64_t numel = 0;  // > 0
    // Every buffer's dtype is whole bytes (no NF4): numel times the element size, which stays
    // exact as far as a 64-bit count does.
    std::uint64_t bytes() const {
        return static_cast<std::uint64_t>(numel) * (dtype_bits(dtype) / 8);
    }
};

struct BufferPlan {
    std::vector<PlanBuffer> buffers;                // in allocation order
    const PlanBuffer* find(BufferRole role) const;  // null when the plan has none
    std::uint64_t bytes(MemCategory category) const;
};

// --detect-anomaly's slots (kernels/nonfinite.h, 24 bytes each): at most 4 checked tensors per op
// and direction of the plan, and one to measure an op's inputs in; none without the flag.
std::size_t anomaly_slot_count(const OpPlan& plan);

// Rows of fp32 logits the chunked loss holds at once: --loss-chunk rows, at most B T (0: all).
std::int64_t loss_chunk_rows(const PlanInputs& in);

// The buffers for `plan` on `backend`. The model's (every entry but the last below), allocated
// once when the model is built and kept; then, when `grad_norm_tensors` > 0 on CUDA, the
// optimizer step's global-norm scratch for that many tensors, allocated at each step the device
// steps (none on the CPU, whose step runs on the host). Reuses out's capacity (the estimator's
// sweeps build millions).
void build_buffer_plan(const OpPlan& plan, DeviceKind backend, int grad_norm_tensors,
                       BufferPlan& out);
BufferPlan build_buffer_plan(const OpPlan& plan, DeviceKind backend, int grad_norm_tensors = 0);

// The CUDA optimizer step's global-norm scratch over `tensors` tensors: the fp64 result padded
// to cuda::kGradNormResultBytes, then kGradNormBlocks fp64 partial sums per tensor
// (kernels/optimizer.h): 256 + 2048 n bytes.
PlanBuffer grad_norm_scratch(int tensors);

// napkin generate: B prompts of Tp tokens, G new tokens each.
struct GenerateShape {
    std::int64_t batch = 1;       // B sequences
    std::int64_t prompt_len = 1;  // Tp tokens per prompt
    std::int64_t gen_len = 1;     // G tokens generated per sequence (the first by the prefill)
    // Flash-decoding: the CUDA engine's decode steps split each sequence's keys across blocks
    // (kernels/decode_attention.h) in a workspace of their own; the CPU engine ignores it.
    bool flash_decoding = true;
    std::int64_t positions() const { return prompt_len + gen_len; }  // S, the cache's length
};

// napkin generate's buffers (core/engine/generate.h), those not one row per token:
//   kv_cache_numel           the cache, L 2 B S KVH HD
//   arena_numel              B Tp W, W the widest op's in + out: ln (C, C), qkv (C, qkv),
//                            attention (qkv, NH HD), proj (NH HD, C), fc (C, F or 2F),
//                            activation (F or 2F, F), down (F, C)
//   matmul_scratch_floats    the GEMM scratch (CPU: 16-bit operands widened, the largest GEMM's;
//                            none in fp32; CUDA: cuBLASLt's workspace)
//   decode_workspace_floats  flash-decoding's partials (CUDA with flash_decoding, a shape
//                            decode_attention_can_split): decode_attention_workspace_floats at
//                            Tq = 1 and S keys, B NH ceil(S / kDecodeAttentionChunk) (HD + 2)
struct GenerateBuffers {
    std::int64_t kv_cache_numel = 0, arena_numel = 0, matmul_scratch_floats = 0;
    std::int64_t decode_workspace_floats = 0;
};
GenerateBuffers generate_buffers(const ModelConfig& cfg, const GenerateShape& shape, DType storage,
                                 DeviceKind device);

}  // namespace napkin
