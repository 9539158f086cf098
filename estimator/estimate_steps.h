// The estimator's steps, shared by the files that implement them: estimate.cpp (the order, the
// parameters, FLOPs and time), model_states.cpp (model states, offload, temporaries) and
// activations.cpp. Internal to the estimator; estimate.h is its interface.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/buffer_plan.h"
#include "core/comm/shard_layout.h"
#include "core/op_plan.h"
#include "estimator/estimate.h"

namespace napkin::estimate_steps {

inline double bytes_of(DType t) {
    return dtype_bits(t) / 8.0;
}

inline double shard(double count, bool sharded, int gpus) {
    return sharded ? std::ceil(count / gpus) : count;
}

// The bytes per parameter, with QLoRA's fp32 optimizer states under --precision bf16.
formulas::BytesPerParam recipe_bytes_per_param(const EstimateInputs& in);

// What the steps of Estimator::run share: the model and its op plan, the recipe's dtypes, the
// parameter counts the memory terms use, and the data-parallel layout of the model states.
// With T P > 1 also the 3D layout and one tensor-parallel rank's config and op plan.
struct Terms {
    Terms(const EstimateInputs& in_, const ModelConfig& c_, const OpPlan& plan_, std::int64_t T_,
          std::uint32_t notes_)
        : in(in_),
          c(c_),
          plan(plan_),
          pt(plan_totals(plan_)),
          pd(recipe_dtypes(in_)),
          T(T_),
          W(in_.gpus),
          adapters(in_.finetune != Finetune::full),
          z1(in_.zero >= 1),
          z2(in_.zero >= 2),
          z3(in_.zero >= 3),
          notes(notes_) {}

    const EstimateInputs& in;
    const ModelConfig& c;
    const OpPlan& plan;
    PlanTotals pt;
    PlanTotals flops;               // the FLOPs counted: pt's, or one sequence's (estimate.cpp)
    std::int64_t flops_tokens = 0;  // the tokens they are for: B T, or T
    PrecisionDTypes pd;
    std::int64_t T;
    int W;
    bool adapters;            // LoRA/QLoRA: the base frozen, adapters trained
    bool z1, z2, z3;          // ZeRO shards the optimizer states, the gradients, the weights
    double n_total = 0;       // published parameters (napkin mode: N)
    double n_alloc = 0;       // as allocated, embedding padded to Vp rows (napkin mode: N)
    double lora_layer = 0;    // adapter parameters per block
    double train_alloc = 0;   // trainable parameters as allocated
    double linear_bytes = 0;  // bytes per frozen linear weight (NF4's under QLoRA)
    ShardLayout layout;
    std::vector<FrozenUnit> frozen;  // ZeRO-3 with adapters: the frozen base's storage per unit
    std::uint32_t notes;

    // 3D parallelism (estimator/parallel.h); with T = P = 1 the rank is the whole model.
    ParallelLayout par;
    const ModelConfig* rank = nullptr;  // one tensor-parallel rank's config
    const OpPlan* rank_plan = nullptr;  // and its op plan
    ParamCounts rank_counts;
    bool model_parallel() const { return par.model_parallel(); }
};

// The part of the model one GPU holds: all of it, or one pipeline stage.
struct StageView {
    int stage = 0;
    int layers = 0;        // blocks on it
    double in_flight = 1;  // micro-batches whose activations it holds at its peak
    bool first = true;     // holds the embedding
    bool last = true;      // holds the final norm, the head and the loss
};
StageView whole_model(const Terms& x);
StageView pipeline_stage(const Terms& x, int stage);

// Model states per GPU as the data-parallel engine lays them out (T P = 1), or (T P > 1) as
// Megatron-LM does: the stage's share of one tensor-parallel rank, ZeRO over DP.
MemoryBytes model_states(Terms& x, Estimate& e);
MemoryBytes megatron_model_states(const Terms& x, const StageView& v, Estimate& e,
                                  double& stage_params);
// --paged-optimizer: moves the optimizer state out of e.gpu into e.paged, with the update's
// resident peak and the page traffic over the host link (the profile's copy rates, else
// PCIe 4.0 x16 assumed). After the temporaries, which the peak compares against.
void page_optimizer(const Terms& x, Estimate& e);

// Moves the offloaded states from `gpu` to the host's share per GPU, returned.
MemoryBytes offload(const Terms& x, const Estimate& e, MemoryBytes& gpu);
// Activations of one micro-batch (times the stage's micro-batches in flight), both views.
void activations(Terms& x, const StageView& v, Estimate& e);
// The token batches the engine keeps (MemoryBytes::data): inputs and targets, int32, B x T each;
// two micro-batches' on the CUDA engine (its copy stream's double buffer), one on the CPU.
double batch_data(const Terms& x);
// The buffer plan's temporaries (of the rank's plan) and ZeRO-3's gathered units.
TemporaryBytes temporaries(const Terms& x, const StageView& v, const Estimate& e,
                           BufferPlan& buffers);

}  // namespace napkin::estimate_steps
