// activation: the MLP nonlinearity.
//   gelu   (tanh approximation): inp (N, F) -> out (N, F)
//   swiglu: inp (N, 2F) = [gate | up] -> out (N, F) = silu(gate) * up
// FLOPs per output element: gelu forward 8, backward 14; swiglu forward 5, backward 10.
// Backward needs inp (the fc matmul's kept output).
#pragma once

#include "core/model_config.h"
#include "kernels/cost.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (op headers compile in any build)

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

namespace cpu {

// CPU kernels (kernels/cpu/activation.cpp, tested in tests/kernels/activation_test.cpp),
// templated on the storage type T (float, bf16_t, f16_t from core/half.h), arithmetic in fp32.
// Backward ACCUMULATES (+=) into dinp (callers zero it).

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's gelu_new; out may be inp.
template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n);

// dinp (n) += gelu'(inp) * dout
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n);

// out (N, F) = silu(gate) * up with each row of inp (N, 2F) laid out [gate (F) | up (F)];
// silu(g) = g * sigmoid(g).
template <class T>
void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F);

// dinp (N, 2F) += [dout * up * silu'(gate) | dout * silu(gate)], dout (N, F);
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N, std::int64_t F);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/activation.cu, tested against the CPU in
// tests/kernels_cuda/activation_test.cpp), same storage types and semantics as the CPU's above
// (arithmetic in fp32; backward ACCUMULATES into dinp). Device pointers, queued on `stream`.

template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n, CUstream_st* stream);  // out, inp (n)

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n, CUstream_st* stream);
// dinp, inp, dout (n)

template <class T>
void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F, CUstream_st* stream);
// out (N, F), inp (N, 2F) = [gate | up]

template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N, std::int64_t F,
                     CUstream_st* stream);
// dinp (N, 2F), inp (N, 2F), dout (N, F)

}  // namespace cuda

}  // namespace napkin
