// Optimizers over the engine's parameters: SGD, momentum, AdaGrad, RMSprop, Adam, AdamW, and
// AdamW over 8-bit states. Their state is allocated as optimizer_state (fp32, bf16 under pure
// bf16, or for adamw-8bit one byte per element plus an fp32 absmax per 2048: kernels/optimizer.h)
// so its memory is measured. Mixed precision updates the fp32 master copy and rounds it into the working weights.
// Also: decoupled weight decay (AdamW) or L2 (the others), clipping by global gradient norm,
// warmup + cosine learning-rate schedule.
// On a device (EngineDevice, core/engine/engine_device.h) the state lives in device memory and
// the two passes (global norm, update) run as the multi-tensor kernels of kernels/optimizer.h;
// the schedule, clipping and bias corrections are this file's on either side.
#pragma once

#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "core/engine/gpt.h"
#include "core/half.h"
#include "core/recipe.h"
#include "kernels/cost.h"
#include "kernels/optimizer.h"

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

// One update of n contiguous fp32 values from fp32 gradients (multiplied by scale first), the
// moments in fp32 or bf16 (null where the optimizer keeps fewer). Optimizer::step applies it
// per parameter; the ZeRO engine (core/engine/zero.h) per shard.
struct UpdateHyper {
    OptimizerKind kind;
    float lr, b1, b2, eps, wd, bc1, bc2, scale;  // bc1, bc2: Adam's bias corrections 1 - beta^t
};
void optimizer_update(const UpdateHyper& h, float* w, const float* grad, float* m, float* v, std::int64_t n);
void optimizer_update(const UpdateHyper& h, float* w, const float* grad, bf16_t* m, bf16_t* v, std::int64_t n);

struct StepStats {
    float lr = 0;
    float grad_norm = 0;  // of the unscaled gradients, before clipping
    bool skipped = false;  // non-finite gradients (fp16 overflow): no update
};

class Optimizer {
public:
    // device: where the model's tensors live; null for host memory (the CPU).
    Optimizer(const OptimizerConfig& cfg, Gpt& model, AccountingAllocator& alloc, DType state_dtype,
              EngineDevice* device = nullptr);

    // One update from the accumulated gradients, which are first multiplied by grad_scale
    // (1 / loss scale under fp16). Skips the update when the gradients are not finite.
    StepStats step(int step_index, float grad_scale);

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
    // The device's tensors for the kernels: gradients, fp32 values to update, states, and the
    // working copy to round into under mixed precision.
    std::vector<OptimizerTensor> device_tensors() const;

    OptimizerConfig cfg_;
    Gpt& model_;
    AccountingAllocator& alloc_;
    EngineDevice* device_ = nullptr;
    DType state_dtype_;
    std::vector<Tensor> m_, v_;  // per parameter; v_ unused by one-state optimizers
    std::vector<Tensor> m_absmax_, v_absmax_;  // adamw-8bit: per parameter, the block scales
    std::vector<float> grad_buf_, master_buf_;
    int t_ = 0;  // Adam's bias-correction step count (updates actually applied)
};

}  // namespace napkin
