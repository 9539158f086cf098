// residual: out (N, C) = a (N, C) + b (N, C). 1 FLOP per element forward; backward adds the
// incoming gradient into both branches' gradients (1 FLOP per element). Keeps nothing itself;
// its output is kept when the next norm needs it (core/op_plan.h).
#pragma once

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct ResidualShape {
    std::int64_t N = 0;
    std::int64_t C = 0;
    DType dt = DType::f32;
};

inline KernelCost residual_forward_cost(const ResidualShape& s) {
    return {static_cast<std::uint64_t>(s.N * s.C), 2 * nbytes(s.dt, s.N * s.C), nbytes(s.dt, s.N * s.C), 0};
}

inline KernelCost residual_backward_cost(const ResidualShape& s) {
    return {static_cast<std::uint64_t>(s.N * s.C), 2 * nbytes(s.dt, s.N * s.C), nbytes(s.dt, s.N * s.C), 0};
}

// out (n) = a (n) + b (n); out may be a or b (the residual stream updated in place).
template <class T>
struct ResidualForwardArgs {
    T* out = nullptr;      // (n)
    const T* a = nullptr;  // (n)
    const T* b = nullptr;  // (n)
    std::int64_t n = 0;
};

// da (n) += dout (n); db (n) += dout (n). ACCUMULATES (callers zero). Each dout element is read
// once before either update, so dout may be da or db.
template <class T>
struct ResidualBackwardArgs {
    T* da = nullptr;          // (n)
    T* db = nullptr;          // (n)
    const T* dout = nullptr;  // (n)
    std::int64_t n = 0;
};

namespace cpu {

// CPU kernels (kernels/cpu/residual.cpp, tested in tests/kernels/residual_test.cpp), templated
// on the storage type T (float, bf16_t, f16_t from core/half.h), arithmetic in fp32.
template <class T>
void residual_forward(const ResidualForwardArgs<T>& args);
template <class T>
void residual_backward(const ResidualBackwardArgs<T>& args);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/residual.cu, tested against the CPU in
// tests/kernels_cuda/residual_test.cpp): same storage types, semantics and aliasing as the
// CPU's above. Device pointers, queued on launch.stream.
template <class T>
void residual_forward(const ResidualForwardArgs<T>& args, const Launch& launch);
template <class T>
void residual_backward(const ResidualBackwardArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
