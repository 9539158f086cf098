// GELU (tanh approximation) and SwiGLU on the CPU (declared in kernels/activation.h):
// elementwise, OpenMP over elements (gelu) or rows (swiglu) once the work pays for threads.
#include "kernels/activation.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/half.h"
#include "kernels/cpu/gelu.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 15;  // elements below which threads cost more than they save

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}  // exp overflow gives 0, not NaN

}  // namespace

// GPT-2's gelu and its derivative: kernels/cpu/gelu.h.
template <class T>
void gelu_forward(const GeluForwardArgs<T>& args) {
    const auto& [out, inp, n] = args;
#pragma omp parallel for if (n > kParallelMin)
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = from_float<T>(gelu_value(to_float(inp[i])));
}

template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args) {
    const auto& [dinp, inp, dout, n] = args;
#pragma omp parallel for if (n > kParallelMin)
    for (std::int64_t i = 0; i < n; ++i) {
        const float local = gelu_grad(to_float(inp[i]));
        dinp[i] = from_float<T>(to_float(dinp[i]) + local * to_float(dout[i]));
    }
}

template <class T>
void swiglu_forward(const SwigluForwardArgs<T>& args) {
    const auto& [out, inp, N, F] = args;
    NAPKIN_ASSERT(N >= 0 && F >= 0, "swiglu_forward: N " << N << ", F " << F);
#pragma omp parallel for if (N * F > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* gate = inp + n * 2 * F;  // (F)
        const T* up = gate + F;           // (F)
        T* y = out + n * F;               // (F)
        for (std::int64_t f = 0; f < F; ++f) {
            const float g = to_float(gate[f]);
            y[f] = from_float<T>(g * sigmoid(g) * to_float(up[f]));
        }
    }
}

template <class T>
void swiglu_backward(const SwigluBackwardArgs<T>& args) {
    const auto& [dinp, inp, dout, N, F] = args;
    NAPKIN_ASSERT(N >= 0 && F >= 0, "swiglu_backward: N " << N << ", F " << F);
#pragma omp parallel for if (N * F > kParallelMin)
    for (std::int64_t n = 0; n < N; ++n) {
        const T* gate = inp + n * 2 * F;  // (F)
        const T* up = gate + F;           // (F)
        const T* dy = dout + n * F;       // (F)
        T* dgate = dinp + n * 2 * F;      // (F)
        T* dup = dgate + F;               // (F)
        for (std::int64_t f = 0; f < F; ++f) {
            const float g = to_float(gate[f]);
            const float sg = sigmoid(g);
            const float d = to_float(dy[f]);
            const float dsilu = sg * (1.0f + g * (1.0f - sg));
            dgate[f] = from_float<T>(to_float(dgate[f]) + d * to_float(up[f]) * dsilu);
            dup[f] = from_float<T>(to_float(dup[f]) + d * g * sg);
        }
    }
}

#define NAPKIN_ACTIVATION_INSTANTIATE(T)                          \
    template void gelu_forward<T>(const GeluForwardArgs<T>&);     \
    template void gelu_backward<T>(const GeluBackwardArgs<T>&);   \
    template void swiglu_forward<T>(const SwigluForwardArgs<T>&); \
    template void swiglu_backward<T>(const SwigluBackwardArgs<T>&);
NAPKIN_ACTIVATION_INSTANTIATE(float)
NAPKIN_ACTIVATION_INSTANTIATE(bf16_t)
NAPKIN_ACTIVATION_INSTANTIATE(f16_t)
#undef NAPKIN_ACTIVATION_INSTANTIATE

}  // namespace napkin::cpu
