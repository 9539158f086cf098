// The arithmetic of kernels/step_scalars.h, written once for the host (begin_update in
// core/engine/optimizer.cpp, the CPU kernels) and the CUDA kernels, so that the clip factor,
// the skip decision and the mean loss are the same bits wherever they are computed. Plain
// IEEE operations only (sqrt and the divisions are correctly rounded in both compilers; no
// product here feeds an add, so no contraction can change a bit).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"

#if defined(__CUDACC__)
#define NAPKIN_STEP_HD __host__ __device__
#else
#define NAPKIN_STEP_HD
#endif

namespace napkin {

// norm, skip, update_scale of *s from the gradients' fp64 sum of squares (step_scalars.h).
NAPKIN_STEP_HD inline void optimizer_gate_rule(StepScalars& s, double sumsq, float grad_scale,
                                               float grad_clip) {
    const double norm = std::sqrt(sumsq) * grad_scale;
    s.grad_norm = static_cast<float>(norm);
    s.skip = std::isfinite(norm) ? 0 : 1;
    const float clip =
        grad_clip > 0 && norm > grad_clip ? static_cast<float>(grad_clip / norm) : 1.0f;
    s.update_scale = grad_scale * clip;
}

// The mean of a micro-batch's losses from their fp64 row-order sum, and the step's running sum.
NAPKIN_STEP_HD inline void loss_mean_rule(StepScalars& s, double total, std::int64_t M) {
    s.loss_mean = static_cast<float>(total / static_cast<double>(M));
    s.loss_sum += s.loss_mean;
}

// What the update kernels multiply each gradient by, and whether they update at all: the
// host's h.grad_scale, or with a gate the device's update_scale and skip (optimizer_gate).
NAPKIN_STEP_HD inline bool optimizer_skips(const OptimizerHyper& h) {
    return h.gate != nullptr && h.gate->skip != 0;
}
NAPKIN_STEP_HD inline float optimizer_grad_scale(const OptimizerHyper& h) {
    return h.gate != nullptr ? h.gate->update_scale : h.grad_scale;
}

// The hyperparameters the update applies: h's own, or with h.schedule_from_gate its learning
// rate and bias corrections from the gate's schedule (step_schedule). The same floats either
// way, so the two modes give the same bits.
NAPKIN_STEP_HD inline OptimizerHyper optimizer_scheduled(const OptimizerHyper& h) {
    OptimizerHyper r = h;
    if (h.schedule_from_gate && h.gate != nullptr) {
        r.lr = h.gate->schedule.lr;
        r.bias_correction1 = h.gate->schedule.bias_correction1;
        r.bias_correction2 = h.gate->schedule.bias_correction2;
    }
    return r;
}

}  // namespace napkin
