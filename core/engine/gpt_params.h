// The GPT engine's parameters, whatever the backend (core/engine/gpt_impl.h uses these): one
// ParamSlot per tensor of param_tensors(cfg, r), allocated as the recipe stores it, GPT-2's
// initial values, and each block's slots by name.
//   full fine-tuning  every parameter trainable: working weights, gradients, fp32 master copies
//                     under mixed precision
//   LoRA / QLoRA      the base frozen (working weights only; QLoRA's block linear weights as NF4
//                     codes plus their state, kernels/nf4.h), the adapters trainable
// Allocation goes through the accounting allocator with the estimator's categories and names.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/engine/gpt.h"
#include "core/engine/gpt_detail.h"
#include "core/model_config.h"
#include "core/op_plan.h"

namespace napkin::gpt_detail {

// Every parameter in param_tensors(cfg, in.lora_rank when fine-tuning with adapters) order.
// `storage` is the working dtype; `master` adds fp32 master copies of the trainable ones.
std::vector<ParamSlot> allocate_params(AccountingAllocator& alloc, const ModelConfig& cfg,
                                       const PlanInputs& in, DType storage, bool master);

// The initial values of p, drawn from rng (called for every parameter in order, so a LoRA run's
// base is the full run's from the same seed): N(0, 0.02) for matrices, 0.02 / sqrt(2 L) for
// the projections into the residual stream, zero biases, unit norm weights, zero padded
// vocabulary rows; LoRA's A uniform in +-1/sqrt(in_features) (PEFT's Kaiming-uniform bound) and
// B zero, so the adapted model starts as the base model. `out` is resized to p.numel.
void initial_values(const ParamSlot& p, const ModelConfig& cfg, std::mt19937_64& rng,
                    std::vector<float>& out);

// Every parameter's initial values, drawn in order from one generator seeded with `seed`
// (initial_values), each handed to set(i, values): how both engines start from the same weights.
template <class Set>
void initialize(const std::vector<ParamSlot>& params, const ModelConfig& cfg, std::uint64_t seed,
                Set&& set) {
    std::mt19937_64 rng(seed);
    std::vector<float> buf;
    for (std::size_t i = 0; i < params.size(); ++i) {
        initial_values(params[i], cfg, rng, buf);
        set(i, buf.data());
    }
}

// The slot named `name`, or null.
ParamSlot* find_param(std::vector<ParamSlot>& params, const std::string& name);

// Block l's slots (null where the config has none: biases, LayerNorm's bias, adapters).
LayerParams layer_params(std::vector<ParamSlot>& params, int l);

}  // namespace napkin::gpt_detail
