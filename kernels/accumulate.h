// accumulate: dst (n) += src (n) in one storage type, the sum in fp32 and rounded once into dst.
// 1 FLOP per element; reads both, writes dst. ZeRO stages 2-3 add each micro-batch's reduced
// gradient chunk into the rank's gradient shard with it (core/engine/zero.cpp); nothing is kept
// for backward. CPU: kernels/cpu/accumulate.cpp (the spec, the arithmetic the ZeRO engine has
// always done on the host); CUDA: kernels/cuda/accumulate.cu, tested against the CPU in
// tests/kernels_cuda/accumulate_test.cpp.
#pragma once

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct AccumulateShape {
    std::int64_t n = 0;
    DType dt = DType::f32;
};

inline KernelCost accumulate_cost(const AccumulateShape& s) {
    return {static_cast<std::uint64_t>(s.n), 2 * nbytes(s.dt, s.n), nbytes(s.dt, s.n), 0};
}

// dst (n) = round_T(float(dst) + float(src)), T float, bf16_t or f16_t. src may not alias dst.
template <class T>
struct AccumulateArgs {
    T* dst = nullptr;        // (n)
    const T* src = nullptr;  // (n)
    std::int64_t n = 0;
};

namespace cpu {
template <class T>
void accumulate(const AccumulateArgs<T>& args);
}  // namespace cpu

namespace cuda {
// The same on device pointers, queued on launch.stream.
template <class T>
void accumulate(const AccumulateArgs<T>& args, const Launch& launch);
}  // namespace cuda

}  // namespace napkin
