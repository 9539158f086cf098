// zero: many buffers set to zero bytes at once. The engine zeroes every parameter gradient at the
// start of a step: on GPT-2 124M, 148 tensors, which as one cudaMemsetAsync each were 148
// launches with ~1.5 us of idle stream between them (traces/h200-gpt2). One launch takes up to
// kZeroSpansPerLaunch buffers, each block row of the grid one buffer. Cost: the bytes written.
// CPU: kernels/cpu/zero.cpp (memset, the spec); CUDA: kernels/cuda/zero.cu, tested against it in
// tests/kernels_cuda/zero_test.cpp.
#pragma once

#include <cstddef>

#include "kernels/cost.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (op headers compile in any build)

namespace napkin {

struct ZeroSpan {
    void* data = nullptr;
    std::size_t bytes = 0;
};

inline constexpr int kZeroSpansPerLaunch = 64;

inline KernelCost zero_cost(const ZeroSpan* spans, int count) {
    KernelCost c;
    for (int i = 0; i < count; ++i)
        c.bytes_written += spans[i].bytes;
    return c;
}

namespace cpu {

// Each span's bytes set to 0 (spans may be empty; they may not overlap).
void zero(const ZeroSpan* spans, int count);

}  // namespace cpu

namespace cuda {

// The same on device memory, queued on `stream` (ceil(count / kZeroSpansPerLaunch) launches;
// the span list itself is host memory, passed by value).
void zero(const ZeroSpan* spans, int count, CUstream_st* stream);

}  // namespace cuda

}  // namespace napkin
