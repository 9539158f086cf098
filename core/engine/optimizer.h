// Optimizers over the engine's parameters: SGD, momentum, AdaGrad, RMSprop, Adam, AdamW, and
// AdamW over 8-bit states. Their state is allocated as optimizer_state (fp32, bf16 under pure
// bf16, or for adamw-8bit one byte per element plus an fp32 absmax per 2048: kernels/optimizer.h)
// so its memory is measured. Mixed precision updates the fp32 master copy and rounds it into the
// working weights. Also: decoupled weight decay (AdamW) or L2 (the others), clipping by global
// gradient norm, warmup + cosine learning-rate schedule. On a device (EngineDevice,
// core/engine/engine_device.h) the state lives in device memory and the two passes (global norm,
// update) run as the multi-tensor kernels of kernels/optimizer.h; the schedule and bias corrections
// are this file's on either side, the clip factor and the skip kernels/step_scalars_rule.h's (on
// the device too, when the trainer passes a gate, which then also carries the schedule's values to
// the update: kernels/step_scalars.h). Paged (napkin train --paged-optimizer, QLoRA's paged
// optimizer): the state comes from a second allocator over the device's paged memory
// (EngineDevice::paged_memory, CUDA managed memory preferred on the host) and is prefetched to the
// device before the update and back after it, so forward and backward run without it on the device.
// The same arithmetic on other memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/engine/gpt.h"
#include "core/half.h"
#include "core/recipe.h"
#include "kernels/cost.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"

namespace napkin {

class EngineDevice;

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::adamw;
    float lr = 1e-3f;          // peak learning rate
    float min_lr_frac = 0.1f;  // cosine decays to lr * min_lr_frac
    int warmup_steps = 0;
    int total_steps = 1;
    float beta1 = 0.9f;  // Adam, and momentum's coefficient
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;  // on matrices only (ParamSlot::decay)
    float grad_clip = 1.0f;     // global norm; 0 disables
};

// The learning rate at `step` (0-based): linear warmup to lr, then cosine to lr * min_lr_frac.
float learning_rate(const OptimizerConfig& c, int step);

struct StepStats {
    float lr = 0;
    float grad_norm = 0;   // of the unscaled gradients, before clipping
    bool skipped = false;  // non-finite gradients (fp16 overflow): no update
};

// The one optimizer step, in two calls that Optimizer::step and the ZeRO engine's sharded step
// (core/engine/zero.h) share; they differ only in which gradients they sum and which pieces
// (whole parameters, or a shard's slices of them) they update.
//
// begin_update: from the gradients' sum of squares (every rank's, summed), the norm of the
// unscaled gradients, sqrt(sumsq) x grad_scale, into st with the schedule's lr. When the norm
// is finite, counts one more update in `t` and returns its hyperparameters: Adam's bias
// corrections 1 - beta^t and grad_scale x clip, clip = min(1, grad_clip / norm). Non-finite
// (fp16 overflow): st.skipped, no update, nullopt.
std::optional<OptimizerHyper> begin_update(const OptimizerConfig& cfg, int step_index, double sumsq,
                                           float grad_scale, int& t, StepStats& st);

// One piece of the update on the host: `n` fp32 values w (master copy, fp32 weights, or a
// widened copy) from fp32 gradients g, the states at m and v in state_dtype (null where the
// optimizer keeps fewer; 8-bit states with their block scales, the piece on a block boundary).
// The CPU optimizer kernel (kernels/cpu/optimizer.cpp) does the arithmetic.
struct HostPiece {
    float* w = nullptr;
    const float* g = nullptr;
    void* m = nullptr;
    void* v = nullptr;
    float* m_absmax = nullptr;
    float* v_absmax = nullptr;
    std::int64_t n = 0;
    float weight_decay = 0.0f;
};
void host_update(const OptimizerHyper& h, const HostPiece& piece, DType state_dtype);

class Optimizer {
public:
    // device: where the model's tensors live; null for host memory (the CPU). paged: where the
    // state goes instead of `alloc` (an allocator over device->paged_memory()); null: alloc.
    Optimizer(const OptimizerConfig& cfg, Gpt& model, AccountingAllocator& alloc, DType state_dtype,
              EngineDevice* device = nullptr, AccountingAllocator* paged = nullptr);

    // One update from the accumulated gradients, which are first multiplied by grad_scale
    // (1 / loss scale under fp16). Skips the update when the gradients are not finite.
    // With `gate` (the model's step scalars in device memory, kernels/step_scalars.h) the norm,
    // clip factor and skip stay on the device and the whole step is queued without a wait: the
    // returned stats hold the learning rate only, and finish_step completes them from the
    // scalars once the caller has read them back.
    StepStats step(int step_index, float grad_scale, StepScalars* gate = nullptr);
    // The gated step in its two parts, which the trainer splits around a CUDA graph of the
    // second (docs/CUDA.md "CUDA graphs"): schedule_into queues this step's lr and bias
    // corrections into gate->schedule (EngineDevice::step_schedule) and returns the stats with
    // the lr; queue_gated_update queues the norm, the gate and an update that reads the
    // gradient scale, the skip and the schedule from the gate (OptimizerHyper::
    // schedule_from_gate), so its launches' arguments are the same at every step.
    StepStats schedule_into(int step_index, StepScalars* gate);
    void queue_gated_update(float grad_scale, StepScalars* gate);
    void finish_step(const StepScalars& read, StepStats& st);

    // The state, for checkpoints: per parameter (in Gpt::params() order) its first and second
    // moments (empty tensors where the optimizer keeps fewer), and Adam's update count.
    std::vector<Tensor>& first_moments() { return m_; }
    std::vector<Tensor>& second_moments() { return v_; }
    // adamw-8bit: the moments' block absmax, per parameter as the moments (empty otherwise).
    std::vector<Tensor>& first_moment_absmax() { return m_absmax_; }
    std::vector<Tensor>& second_moment_absmax() { return v_absmax_; }
    DType state_dtype() const { return state_dtype_; }
    int update_count() const { return t_; }
    // The work of one step (the profiler's optimizer range, the report's roofline): the global
    // norm pass over the gradients plus the update, FLOPs counted per element as the update
    // code does them (adamw: 19), bytes as the compulsory traffic of gradients, weights, master
    // copy and state.
    KernelCost step_cost() const;
    void set_update_count(int t) { t_ = t; }
    const OptimizerConfig& config() const { return cfg_; }

private:
    double host_grad_sum_squares();
    // Parameter i's piece of the host update (master, fp32 weight or widened copy; its states).
    HostPiece host_piece(std::size_t i);
    // The device's tensors for the kernels: gradients, fp32 values to update, states, and the
    // working copy to round into under mixed precision.
    std::vector<OptimizerTensor> device_tensors() const;
    // Paged: every state tensor prefetched to the device or back to the host, one timed batch.
    void page_states(bool to_device);
    // The device's multi-tensor update, the paged states brought in around it.
    void device_update(const OptimizerHyper& h, const std::vector<OptimizerTensor>& dev);

    OptimizerConfig cfg_;
    Gpt& model_;
    AccountingAllocator& alloc_;
    EngineDevice* device_ = nullptr;
    bool paged_ = false;
    DType state_dtype_;
    std::vector<Tensor> m_, v_;                // per parameter; v_ unused by one-state optimizers
    std::vector<Tensor> m_absmax_, v_absmax_;  // adamw-8bit: per parameter, the block scales
    std::vector<float> grad_buf_, master_buf_;
    int t_ = 0;  // Adam's bias-correction step count (updates actually applied)
};

}  // namespace napkin
