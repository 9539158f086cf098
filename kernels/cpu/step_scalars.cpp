// The step's scalars on the host (declared in kernels/step_scalars.h): the reference of the
// CUDA twin, and the kernels of the tests' host-memory device (tests/engine/host_device.h).
#include "kernels/step_scalars.h"

#include "core/check.h"
#include "kernels/step_scalars_rule.h"

namespace napkin::cpu {

void loss_mean(StepScalars* s, const float* losses, std::int64_t M) {
    NAPKIN_ASSERT(s != nullptr && M > 0, "loss_mean: " << M << " rows");
    double total = 0.0;
    for (std::int64_t r = 0; r < M; ++r)
        total += losses[r];
    loss_mean_rule(*s, total, M);
}

void optimizer_gate(StepScalars* s, const double* sumsq, float grad_scale, float grad_clip) {
    NAPKIN_ASSERT(s != nullptr && sumsq != nullptr, "optimizer_gate: null scalars");
    optimizer_gate_rule(*s, *sumsq, grad_scale, grad_clip);
}

void step_schedule(StepScalars* s, StepSchedule schedule) {
    NAPKIN_ASSERT(s != nullptr, "step_schedule: null scalars");
    s->schedule = schedule;
}

}  // namespace napkin::cpu
