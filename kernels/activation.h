// activation: the MLP nonlinearity.
//   gelu   (tanh approximation): inp (N, F) -> out (N, F)
//   swiglu: inp (N, 2F) = [gate | up] -> out (N, F) = silu(gate) * up
// FLOPs per output element: gelu forward 8, backward 14; swiglu forward 5, backward 10.
// Backward needs inp (the fc matmul's kept output).
#pragma once

#include "core/model_config.h"
#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct ActivationShape {
    std::int64_t N = 0;  // rows: B*T
    std::int64_t F = 0;  // output features
    MlpKind kind = MlpKind::gelu;
    DType dt = DType::f32;
    DType out = DType::f32;  // the kept output may be narrower (fp8 under fp8-amp)
};

inline std::int64_t activation_in_cols(const ActivationShape& s) {
    return s.kind == MlpKind::swiglu ? 2 * s.F : s.F;
}

inline KernelCost activation_forward_cost(const ActivationShape& s) {
    KernelCost c;
    c.flops = (s.kind == MlpKind::gelu ? 8ull : 5ull) * s.N * s.F;
    c.bytes_read = nbytes(s.dt, s.N * activation_in_cols(s));
    c.bytes_written = nbytes(s.out, s.N * s.F);
    return c;
}

inline KernelCost activation_backward_cost(const ActivationShape& s) {
    KernelCost c;
    c.flops = (s.kind == MlpKind::gelu ? 14ull : 10ull) * s.N * s.F;
    c.bytes_read = nbytes(s.dt, s.N * activation_in_cols(s)) + nbytes(s.dt, s.N * s.F);
    c.bytes_written = nbytes(s.dt, s.N * activation_in_cols(s));
    return c;
}

// The argument structs of the calls below (kernels/launch.h). Backward ACCUMULATES (+=) into dinp
// (callers zero it).

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu_new; out may be inp.
template <class T>
struct GeluForwardArgs {
    T* out = nullptr;        // (n)
    const T* inp = nullptr;  // (n)
    std::int64_t n = 0;
};

// dinp (n) += gelu'(inp) * dout
template <class T>
struct GeluBackwardArgs {
    T* dinp = nullptr;        // (n)
    const T* inp = nullptr;   // (n)
    const T* dout = nullptr;  // (n)
    std::int64_t n = 0;
};

// out (N, F) = silu(gate) * up with each row of inp (N, 2F) laid out [gate (F) | up (F)];
// silu(g) = g * sigmoid(g).
template <class T>
struct SwigluForwardArgs {
    T* out = nullptr;        // (N, F)
    const T* inp = nullptr;  // (N, 2F)
    std::int64_t N = 0, F = 0;
};

// dinp (N, 2F) += [dout * up * silu'(gate) | dout * silu(gate)], dout (N, F);
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <class T>
struct SwigluBackwardArgs {
    T* dinp = nullptr;        // (N, 2F)
    const T* inp = nullptr;   // (N, 2F)
    const T* dout = nullptr;  // (N, F)
    std::int64_t N = 0, F = 0;
};

namespace cpu {

// CPU kernels (kernels/cpu/activation.cpp, tested in tests/kernels/activation_test.cpp),
// templated on the storage type T (float, bf16_t, f16_t from core/half.h), arithmetic in fp32.
template <class T>
void gelu_forward(const GeluForwardArgs<T>& args);
template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args);
template <class T>
void swiglu_forward(const SwigluForwardArgs<T>& args);
template <class T>
void swiglu_backward(const SwigluBackwardArgs<T>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/activation.cu, tested against the CPU in
// tests/kernels_cuda/activation_test.cpp), same storage types and semantics as the CPU's above
// (arithmetic in fp32; backward ACCUMULATES into dinp). Device pointers, queued on launch.stream.
template <class T>
void gelu_forward(const GeluForwardArgs<T>& args, const Launch& launch);
template <class T>
void gelu_backward(const GeluBackwardArgs<T>& args, const Launch& launch);
template <class T>
void swiglu_forward(const SwigluForwardArgs<T>& args, const Launch& launch);
template <class T>
void swiglu_backward(const SwigluBackwardArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
