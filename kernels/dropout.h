// dropout (Srivastava et al. 2014), as GPT-2 applies it to the embedding output, the attention
// probabilities and each residual branch:
//   forward   mask = keep(seed, i); out = mask ? inp / (1 - p) : 0        (in place allowed)
//   backward  dinp = mask ? dout / (1 - p) : 0                            (in place allowed)
// The mask is kept for backward, one byte per element (0 or 1), as the op plan counts it
// (core/op_plan.cpp: Korthikanti's 1-byte masks). keep() is a counter-based hash of (seed,
// element index), not a generator's stream: the same bits on every backend and thread count,
// and rebuilt exactly when checkpointing recomputes a block, with no state to save. Each site's
// seed (one micro-batch, one layer, one place) is dropout_site_seed's.
// Cost: 1 FLOP per element forward and backward (the scaling multiply), the mask written once.
// CPU: kernels/cpu/dropout.cpp, tests/kernels/dropout_test.cpp. CUDA: kernels/cuda/dropout.cu,
// tests/kernels_cuda/dropout_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/cost.h"
#include "kernels/launch.h"

#if defined(__CUDACC__)
#define NAPKIN_DROPOUT_HD __host__ __device__
#else
#define NAPKIN_DROPOUT_HD
#endif

namespace napkin {

struct DropoutShape {
    std::int64_t n = 0;
    DType dt = DType::f32;
};

inline KernelCost dropout_forward_cost(const DropoutShape& s) {
    KernelCost c;
    c.flops = static_cast<std::uint64_t>(s.n);
    c.bytes_read = nbytes(s.dt, s.n);
    c.bytes_written = nbytes(s.dt, s.n) + nbytes(DType::i8, s.n);
    return c;
}

inline KernelCost dropout_backward_cost(const DropoutShape& s) {
    KernelCost c;
    c.flops = static_cast<std::uint64_t>(s.n);
    c.bytes_read = nbytes(s.dt, s.n) + nbytes(DType::i8, s.n);
    c.bytes_written = nbytes(s.dt, s.n);
    return c;
}

// SplitMix64's finalizer over seed and index: 64 well-mixed bits per element.
NAPKIN_DROPOUT_HD inline std::uint64_t dropout_hash(std::uint64_t seed, std::uint64_t index) {
    std::uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The integer threshold for probability p in [0, 1): an element is dropped when the hash's top
// 32 bits are below it, so P(drop) = threshold / 2^32, p to within 2^-32.
inline std::uint32_t dropout_threshold(double p) {
    return static_cast<std::uint32_t>(p * 4294967296.0);
}

NAPKIN_DROPOUT_HD inline bool dropout_keep(std::uint64_t seed, std::uint64_t index,
                                           std::uint32_t threshold) {
    return static_cast<std::uint32_t>(dropout_hash(seed, index) >> 32) >= threshold;
}

// The seed of one dropout site: a micro-batch's seed (the engine's, per step and micro-batch),
// the layer (-1 outside the blocks) and the place in it.
enum class DropoutSite : std::uint8_t { embedding, attention, attention_residual, mlp_residual };
NAPKIN_DROPOUT_HD inline std::uint64_t dropout_site_seed(std::uint64_t micro_batch_seed, int layer,
                                                         DropoutSite site) {
    return dropout_hash(micro_batch_seed, static_cast<std::uint64_t>(layer + 1) * 4 +
                                              static_cast<std::uint64_t>(site));
}

// out (n), mask (n) bytes, inp (n); out may be inp. p in [0, 1).
template <class T>
struct DropoutForwardArgs {
    T* out = nullptr;              // (n)
    std::uint8_t* mask = nullptr;  // (n)
    const T* inp = nullptr;        // (n)
    std::int64_t n = 0;
    float p = 0.0f;
    std::uint64_t seed = 0;  // the site's (dropout_site_seed)
};

// dinp (n) = dout (n) through mask (n) / (1 - p); dinp may be dout. Overwrites dinp.
template <class T>
struct DropoutBackwardArgs {
    T* dinp = nullptr;                   // (n)
    const T* dout = nullptr;             // (n)
    const std::uint8_t* mask = nullptr;  // (n)
    std::int64_t n = 0;
    float p = 0.0f;
};

namespace cpu {

template <class T>
void dropout_forward(const DropoutForwardArgs<T>& args);
template <class T>
void dropout_backward(const DropoutBackwardArgs<T>& args);

}  // namespace cpu

namespace cuda {

// The same on device pointers, queued on launch.stream; masks bit for bit the CPU's.
template <class T>
void dropout_forward(const DropoutForwardArgs<T>& args, const Launch& launch);
template <class T>
void dropout_backward(const DropoutBackwardArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
