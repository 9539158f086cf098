// The element rule of every optimizer (kernels/optimizer.h's formulas), written once for the CPU
// kernel (kernels/cpu/optimizer.cpp, the spec) and its CUDA twin (kernels/cuda/optimizer.cu), so
// the two run the same statement and cannot drift apart. Each caller loads and stores in its
// own way (host halves or CUDA intrinsics); only the arithmetic is here.
#pragma once

#include <cmath>
#include <cstdint>

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

// ---- 8-bit states: dynamic tree quantization (Dettmers et al. 2022, section 2) ----
// A code's bits, after the sign bit (signed map) or from the top (unsigned): a run of e zeros
// (the decimal exponent), an indicator 1, then k fraction bits f (k = what is left). Its
// magnitude is 10^-e (0.1 + 0.9 (f + 1) / 2^k): each exponent covers (0.1, 1] x 10^-e, the top
// code is exactly 1 and the all-zero code 0. Unsigned (v >= 0): 256 codes over [0, 1], down to
// 1e-7; signed (m): 127 magnitudes down to 1e-6, each with both signs, and 0: 255 codes. The
// maps list the values in ascending order and a code is the index, so quantizing is a search.
struct DynamicMap {
    int size = 0;
    float value[256] = {};
};

inline DynamicMap dynamic_map(bool is_signed) {
    const int bits = is_signed ? 7 : 8;  // magnitude bits
    const int count = 1 << bits;
    double mag[256] = {};
    for (int u = 1; u < count; ++u) {
        int e = 0;
        while (((u >> (bits - 1 - e)) & 1) == 0) ++e;  // leading zeros
        const int k = bits - 1 - e;
        const int f = u & ((1 << k) - 1);
        mag[u] = std::pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / static_cast<double>(1 << k));
    }
    DynamicMap m;
    if (is_signed) {
        for (int u = count - 1; u >= 1; --u) m.value[m.size++] = static_cast<float>(-mag[u]);
    }
    for (int u = 0; u < count; ++u) m.value[m.size++] = static_cast<float>(mag[u]);
    return m;
}

// The code of the map value nearest to x (x / absmax, in the map's range): a binary search for
// the last value <= x, then the nearer of it and the next (a tie to the larger). The same
// comparisons on every backend, so the same code.
NAPKIN_HOST_DEVICE inline std::uint8_t dynamic_quantize(float x, const DynamicMap& map) {
    int lo = 0, hi = map.size - 1;
    if (!(x > map.value[lo])) return 0;
    if (x >= map.value[hi]) return static_cast<std::uint8_t>(hi);
    while (hi - lo > 1) {  // value[lo] < x < value[hi]
        const int mid = (lo + hi) / 2;
        if (map.value[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return static_cast<std::uint8_t>(x - map.value[lo] < map.value[hi] - x ? lo : hi);
}

}  // namespace napkin
