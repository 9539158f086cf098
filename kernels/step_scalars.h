// step_scalars: the few numbers of a training step that the host reads back (the loss, the
// gradient norm, whether the update was skipped) and the one the update reads (its gradient
// multiplier), kept together in one small block of device memory. A CUDA step then queues all
// its work without waiting, and the host reads the block once, after the update is queued
// (core/engine/trainer.cpp; docs/ENGINE.md, "One host synchronization per step").
//   loss_mean       after each micro-batch's head_cross_entropy, over its M per-row losses:
//                     loss_mean = fp32(sum_r losses[r] / M), the sum in fp64 in row order
//                     loss_sum += loss_mean                                   (fp64)
//   optimizer_gate  after grad_sum_squares (sumsq: the gradients' fp64 sum of squares):
//                     norm = sqrt(sumsq) * grad_scale                         (fp64)
//                     skip = norm is not finite (fp16 overflow): the update does nothing
//                     clip = grad_clip / norm when grad_clip > 0 and norm > grad_clip, else 1
//                     update_scale = grad_scale * clip                        (fp32)
//   step_schedule   before the update: the host's learning rate and Adam's bias corrections for
//                     this step, written as given (kernel arguments on CUDA), which an update
//                     with OptimizerHyper::schedule_from_gate reads instead of its own: a CUDA
//                     graph of the update freezes its arguments, not this memory
// Both are the host's arithmetic, statement for statement (step_scalars_rule.h is shared by
// the two backends and by begin_update, core/engine/optimizer.cpp), so the numbers are the bits
// the host computed when it read the per-row losses and the sum of squares itself.
// The update kernels read update_scale and skip through OptimizerHyper::gate
// (kernels/optimizer.h). CPU: kernels/cpu/step_scalars.cpp; CUDA: kernels/cuda/step_scalars.cu,
// one thread block each (the loss's fixed order is a sequential fp64 sum: about M dependent adds).
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t, without the CUDA headers

namespace napkin {

// The schedule's values for one update (core/engine/optimizer.cpp computes them on the host).
struct StepSchedule {
    float lr = 0.0f;
    float bias_correction1 = 1.0f;  // 1 - beta1^t
    float bias_correction2 = 1.0f;  // 1 - beta2^t
};

struct StepScalars {
    double loss_sum = 0.0;   // the step's micro-batch mean losses, summed (the trainer zeroes it)
    float loss_mean = 0.0f;  // the last micro-batch's mean loss
    float grad_norm = 0.0f;  // of the unscaled gradients, before clipping
    float update_scale = 1.0f;  // what the update multiplies every gradient by
    std::int32_t skip = 0;      // 1: the gradients are not finite, the update does nothing
    StepSchedule schedule;      // this step's lr and bias corrections (step_schedule)
};

// The buffer plan's step.scalars (core/buffer_plan.h): one StepScalars, padded (40 bytes used).
inline constexpr std::size_t kStepScalarsBytes = 256;
static_assert(sizeof(StepScalars) <= kStepScalarsBytes, "StepScalars outgrew its buffer");

namespace cpu {

// The same on host memory (the reference of the CUDA twin, and the test device's kernels).
void loss_mean(StepScalars* s, const float* losses, std::int64_t M);
void optimizer_gate(StepScalars* s, const double* sumsq, float grad_scale, float grad_clip);
void step_schedule(StepScalars* s, StepSchedule schedule);

}  // namespace cpu

namespace cuda {

// s, losses and sumsq are device memory; queued on `stream`, nothing read back.
void loss_mean(StepScalars* s, const float* losses, std::int64_t M, CUstream_st* stream);
void optimizer_gate(StepScalars* s, const double* sumsq, float grad_scale, float grad_clip,
                    CUstream_st* stream);
// s->schedule = schedule, from the launch's arguments: no host memory to keep alive.
void step_schedule(StepScalars* s, StepSchedule schedule, CUstream_st* stream);

}  // namespace cuda

}  // namespace napkin
