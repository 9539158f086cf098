// The element rule of every optimizer (kernels/optimizer.h's formulas), written once for the CPU
// kernel (kernels/cpu/optimizer.cpp, the spec) and its CUDA twin (kernels/cuda/optimizer.cu), so
// the two run the same statement and cannot drift apart. Each caller loads and stores in its
// own way (host halves or CUDA intrinsics); only the arithmetic is here.
#pragma once

#include <cmath>

#include "kernels/optimizer.h"

#if defined(__CUDACC__)
#define NAPKIN_HOST_DEVICE __host__ __device__
#else
#define NAPKIN_HOST_DEVICE
#endif

namespace napkin {

// One element: g the gradient already times h.grad_scale, w the fp32 value, wd its decay; m and
// v the states the tensor keeps (OptimizerTensor's m, v where not null), read before and
// written back after by the caller. Returns the new w.
NAPKIN_HOST_DEVICE inline float optimizer_rule(const OptimizerHyper& h, float g, float w, float wd,
                                               float& m, float& v) {
    switch (h.kind) {
        case OptimizerKind::sgd:
            return w - h.lr * (g + wd * w);
        case OptimizerKind::momentum:
            g += wd * w;
            m = h.beta1 * m + g;
            return w - h.lr * m;
        case OptimizerKind::adagrad:
            g += wd * w;
            m = m + g * g;
            return w - h.lr * g / (sqrtf(m) + h.eps);
        case OptimizerKind::rmsprop:
            g += wd * w;
            m = h.beta2 * m + (1 - h.beta2) * g * g;
            return w - h.lr * g / (sqrtf(m) + h.eps);
        case OptimizerKind::adam:
        case OptimizerKind::adamw:
        case OptimizerKind::adamw_8bit: {
            const bool decoupled = h.kind != OptimizerKind::adam;
            if (!decoupled) g += wd * w;
            m = h.beta1 * m + (1 - h.beta1) * g;
            v = h.beta2 * v + (1 - h.beta2) * g * g;
            const float step = (m / h.bias_correction1) / (sqrtf(v / h.bias_correction2) + h.eps);
            return w - h.lr * (step + (decoupled ? wd * w : 0.0f));
        }
    }
    return w;
}

}  // namespace napkin
