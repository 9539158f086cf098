// The reference GPT engine: forward and backward written out (no autograd), executing the op
// plan (core/op_plan.h) op by op on a backend's kernels. Every tensor it allocates goes through
// the accounting allocator with the category and name the estimator uses, so measured memory
// can be compared with the prediction category by category:
//   parameters / master_weights / gradients  one tensor per parameter (param_tensors())
//   activations   exactly the tensors the plan's ops keep (and, under checkpointing, rebuild)
//   temporaries   gradient buffers of the backward, the head/loss chunk, GEMM scratch
// The working storage type follows the precision recipe: fp32, bf16 (bf16-amp, pure bf16,
// fp8-amp, whose block GEMMs read fp8 copies: core/engine/gpt_fp8.h) or fp16 (fp16-amp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/model_config.h"
#include "core/op_plan.h"
#include "core/tensor.h"

namespace napkin {

namespace profiler {
class Recorder;
class KernelTagger;
}
struct StepScalars;  // kernels/step_scalars.h

// One parameter tensor with its gradient and (mixed precision) its fp32 master copy. When
// fine-tuning with LoRA/QLoRA only the adapters are trainable: a frozen parameter has neither
// gradient nor master copy, and under QLoRA a block linear weight is NF4 (kernels/nf4.h): its
// codes in `weight` (dtype nf4) and its scales in `quant`.
struct ParamSlot {
    std::string name;  // "h.3.attn.qkv.weight"
    std::int64_t numel = 0;
    bool decay = false;     // weight decay applies (matrices, not biases and norms)
    bool trainable = true;  // false: frozen (the base model under LoRA/QLoRA)
    bool adapter = false;   // a LoRA adapter (param_tensors(cfg, r)); weight files do not hold them
    Tensor weight;          // working copy, recipe dtype (nf4 codes for a QLoRA linear)
    Tensor grad;            // recipe gradient dtype; empty when frozen
    Tensor master;          // fp32, only under mixed precision and only when trainable
    Tensor quant;           // QLoRA: the NF4 state (steps, absmax codes; nf4_state_bytes)
};

// Called around every region of a micro-batch that reads a unit's parameters (units as in
// core/comm/shard_layout.h: 0 the embeddings, 1 + l block l, L + 1 the head); backward regions
// (and the fused head) also write the unit's gradients. The ZeRO engine gathers and frees
// parameters and gradient buckets here (core/engine/zero.h); with no hooks nothing happens.
// Regions come in this order in every micro-batch (the ZeRO engine prefetches by it):
// (0, forward), (1, forward) ... (L, forward), (L + 1, backward) (with (0, backward) inside it
// when the head is tied to the embeddings), (L, backward) ... (1, backward), (0, backward).
class GptHooks {
public:
    virtual ~GptHooks() = default;
    virtual void enter(int unit, bool backward) = 0;
    virtual void leave(int unit, bool backward) = 0;
};

class Gpt {
public:
    // The model on the CPU (GptImpl<CpuKernels>, core/engine/gpt_impl.h); on CUDA see
    // EngineDevice::create_gpt. Throws UsageError for what the engine does not run yet
    // (fp32 gradients beside a 16-bit model, LoRA under fp8-amp).
    static std::unique_ptr<Gpt> create(const ModelConfig& cfg, const PlanInputs& in, AccountingAllocator& alloc,
                                       std::uint64_t seed);
    virtual ~Gpt() = default;

    // One micro-batch: forward, loss and backward; parameter gradients ACCUMULATE (the caller
    // zeroes them per step). dloss scales the gradient of the mean loss (1/G for accumulation,
    // times the loss scale under fp16). inputs, targets: (B, T) token ids in the model's memory
    // (host on the CPU, device on CUDA: core/engine/engine_device.h). Returns the mean loss.
    virtual float forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float dloss) = 0;
    // CUDA: the step's scalars in device memory (kernels/step_scalars.h), where each
    // micro-batch's mean loss is also added into loss_sum; null on the CPU.
    virtual StepScalars* step_scalars() { return nullptr; }
    // On (CUDA only): forward_backward queues its work without waiting and returns NaN; the
    // mean losses are summed in step_scalars()->loss_sum, which the caller zeroes and reads.
    virtual void defer_loss(bool on) { NAPKIN_ASSERT(!on, "this model cannot defer its loss"); }

    // Called once per step after its micro-batches: fp8-amp's delayed scaling rolls its amax
    // histories into the next step's scale pairs on the device (core/engine/gpt_fp8.h).
    virtual void end_step() {}
    // fp8-amp's delayed-scaling state in the model's memory, fp32, for checkpoints: the amax
    // histories (slots, H) and the scale pairs (slots, 8); empty tensors (or null) without it.
    virtual Tensor* fp8_amax_history() { return nullptr; }
    virtual Tensor* fp8_scales() { return nullptr; }
    // After a checkpoint wrote them, with the steps it had done.
    virtual void fp8_state_restored(int /*steps_done*/) {}

    virtual std::vector<ParamSlot>& params() = 0;
    virtual void zero_grads() = 0;
    // Copies master weights into the working copies (after an optimizer step).
    virtual const OpPlan& plan() const = 0;
    virtual DType storage() const = 0;
    // Records forward, backward, layer and op ranges (with each op's analytic cost) into
    // `recorder`; null (the default) records nothing.
    virtual void set_recorder(profiler::Recorder* recorder) = 0;
    // GPU profiling: each kernel call's launches tagged with its name and analytic cost
    // (profiler/host_range.h, KernelTagger); null (the default) tags nothing.
    virtual void set_kernel_tagger(profiler::KernelTagger*) {}
    virtual void set_hooks(GptHooks* hooks) = 0;
    // The seed of the next micro-batches' dropout masks (kernels/dropout.h: each site's seed
    // derives from it); the trainer sets one per step and micro-batch. No effect without dropout.
    virtual void set_dropout_seed(std::uint64_t seed) = 0;
    // --detect-anomaly: the check launches of the last micro-batch, one per op (and direction)
    // whose tensors were checked (core/engine/anomaly_check.h); 0 without the flag.
    virtual std::size_t anomaly_check_launches() const { return 0; }

    // Reads/writes one parameter's values as fp32 (tests, weight import): an NF4 weight is
    // quantized on the way in and dequantized on the way out. A frozen parameter's gradient
    // reads as zeros.
    virtual void get_param(std::size_t i, float* out) const = 0;
    virtual void set_param(std::size_t i, const float* values) = 0;
    virtual void get_grad(std::size_t i, float* out) const = 0;
};

}  // namespace napkin
