// optimizer: one update of a parameter's fp32 values from its gradient, for every optimizer the
// engine offers (SGD, momentum, AdaGrad, RMSprop, Adam, AdamW), plus the two passes around it:
// the global gradient norm (clipping) and, for fp16 loss scaling, the unscale + inf/NaN check.
// The update is the engine's (core/engine/optimizer.cpp, Optimizer::step), element for element:
//   g = grad * grad_scale (1 / loss scale, times the clip factor)
//   adamw: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//          w -= lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd w)          (wd: decoupled)
//   adam: as adamw with wd folded into g (L2); sgd, momentum, adagrad, rmsprop likewise L2.
// Per element the update reads grad, w and the states and writes w and the states (and the
// rounded working copy under mixed precision); Optimizer::step_cost counts it.
// adamw-8bit is adamw over 8-bit states (Dettmers et al. 2022, "8-bit Optimizers via Block-wise
// Quantization"): m and v are one byte per element, a code into a dynamic-tree map (signed for
// m, unsigned for v: kernels/optimizer_rule.h), times one fp32 absmax per block of
// kOptimizer8bitBlock = 2048 elements (core/recipe.h). Each step dequantizes a block, applies
// the rule, and quantizes the new m and v against the block's new absmax (nearest code), so a
// block is read and written once; the arithmetic of the rule is adamw's.
// CPU: kernels/cpu/optimizer.cpp (the reference the CUDA twin is tested against);
// CUDA: kernels/cuda/optimizer.cu, multi-tensor (up to 32 parameters per launch).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/recipe.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (op headers compile in any build)

namespace napkin {

struct StepScalars;  // kernels/step_scalars.h

struct OptimizerHyper {
    OptimizerKind kind = OptimizerKind::adamw;
    float lr = 0.0f;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    float bias_correction1 = 1.0f;  // 1 - beta1^t (Adam family)
    float bias_correction2 = 1.0f;  // 1 - beta2^t
    float grad_scale = 1.0f;        // every gradient is multiplied by this first
    // Null: grad_scale as given. Else the step's scalars in the kernel's memory (device memory
    // for cuda::, host for cpu::), written by optimizer_gate before the update runs: every
    // gradient is multiplied by gate->update_scale instead, and gate->skip != 0 makes the update
    // a no-op, so the host queues the update without reading the norm first.
    const StepScalars* gate = nullptr;
    // With a gate: lr and the two bias corrections are read from gate->schedule (step_schedule)
    // and the three above are ignored, so that an update captured in a CUDA graph, whose
    // arguments the graph freezes, still follows the schedule (docs/CUDA.md "CUDA graphs").
    bool schedule_from_gate = false;
};

// One parameter. The states m and v are in the state dtype of the call (f32 or bf16) and null
// where the optimizer keeps fewer (sgd none, momentum/adagrad/rmsprop m only).
struct OptimizerTensor {
    float* master = nullptr;  // (n) fp32 values updated in place: master copy or fp32 weights;
                              //     null when the weight itself holds the values (pure bf16)
    void* grad = nullptr;     // (n) in grad_dtype (f32, bf16, f16); only the unscale writes it
    void* m = nullptr;        // (n) first state
    void* v = nullptr;        // (n) second state
    void* weight = nullptr;   // (n) in weight_dtype: the working copy the result is rounded
                              //     into (null when master is the fp32 weight itself), or,
                              //     without a master, the values read widened and written
                              //     back rounded to nearest even
    std::int64_t n = 0;
    float weight_decay = 0.0f;  // 0 for parameters without decay (ParamSlot::decay)
    DType grad_dtype = DType::f32;
    DType weight_dtype = DType::f32;
    float* m_absmax = nullptr;  // 8-bit states only: (optimizer_8bit_blocks(n)) block scales of m
    float* v_absmax = nullptr;  //                    and of v
};

// Blocks of an 8-bit state of n elements: one fp32 absmax each.
inline std::int64_t optimizer_8bit_blocks(std::int64_t n) {
    return (n + static_cast<std::int64_t>(kOptimizer8bitBlock) - 1) /
           static_cast<std::int64_t>(kOptimizer8bitBlock);
}

namespace cpu {

// The update of each tensor (host pointers), the engine's arithmetic. state_dtype: f32, bf16,
// or i8 (8-bit states with their block absmax: adamw-8bit).
void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                      DType state_dtype);

// Sum of squares of every gradient in fp64, each tensor summed in 64 fixed blocks then in
// order (the engine's scheme): multiply by grad_scale after the sqrt for the norm.
double grad_sum_squares(const OptimizerTensor* tensors, int count);

// grad *= scale in place for every tensor; returns true when any gradient is inf or NaN.
bool grad_unscale_check(const OptimizerTensor* tensors, int count, float scale);

}  // namespace cpu

namespace cuda {

// The same on device pointers (the OptimizerTensor array itself is host memory), queued on
// `stream`. Tensors go 32 to a launch in the kernel's parameters (no descriptor upload).

void optimizer_update(const OptimizerHyper& h, const OptimizerTensor* tensors, int count,
                      DType state_dtype, CUstream_st* stream);

// *sumsq (a device double) = the sum of squares of every gradient, summed in fp64 in a fixed
// order (per tensor up to kGradNormBlocks partial sums, as many as its size calls for, then one
// block adds them): deterministic.
// scratch: grad_sum_squares_scratch_bytes(count) bytes of device memory (inline: the estimator
// predicts the engine's scratch with it, which adds kGradNormResultBytes for *sumsq in front).
inline constexpr int kGradNormBlocks = 256;
inline constexpr std::size_t kGradNormResultBytes = 256;  // the result double, padded
inline std::size_t grad_sum_squares_scratch_bytes(int count) {
    return static_cast<std::size_t>(count > 1 ? count : 1) * kGradNormBlocks * sizeof(double);
}
void grad_sum_squares(double* sumsq, const OptimizerTensor* tensors, int count, void* scratch,
                      CUstream_st* stream);

// grad *= scale in place; *found_nonfinite (a device int) is set to 1 when any gradient is inf
// or NaN, and left alone otherwise (the caller zeroes it before the first call of a step).
void grad_unscale_check(int* found_nonfinite, const OptimizerTensor* tensors, int count,
                        float scale, CUstream_st* stream);

}  // namespace cuda

}  // namespace napkin
