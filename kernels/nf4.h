// nf4: QLoRA's 4-bit NormalFloat storage of frozen weights (Dettmers et al. 2023, section 3),
// with double quantization of the block scales.
//   blocks    64 consecutive elements share one absmax; each element x is stored as the index
//             of the nearest of the 16 NF4 levels (kNf4Levels: quantiles of N(0, 1) scaled to
//             [-1, 1], with an exact 0) to x / absmax; two codes a byte, element 2i in the low
//             nibble.
//   absmax    double-quantized: 256 consecutive blocks share one fp32 step = (their largest
//             absmax) / 255, and each block stores ceil(absmax / step) in 8 bits. Rounding up
//             keeps the stored absmax at or above the true one, so no element clips.
//   storage   ceil(n/2) code bytes, then a state buffer of the steps (fp32, first, so they are
//             aligned) and the absmax codes: 4 + 8/64 + 32/(64*256) bits per element, the
//             estimator's kNf4BitsPerParam, exactly when 16384 divides n.
//   dequantize x = kNf4Levels[code] * (absmax_code * step), in fp32, rounded once into T.
// NaN or infinity anywhere in a group of 256 blocks makes its step NaN, so the whole group
// dequantizes to NaN and a training run stops on a non-finite loss rather than go on silently.
// The 8-bit absmax code differs from bitsandbytes (which subtracts the mean absmax and uses its
// dynamic 8-bit float map); the storage is the same size.
// Quantization happens once, when the weights are loaded (host fp32 in); the engine dequantizes
// one linear weight at a time into a temporary for its GEMM, in the forward and again in the
// backward (core/engine/gpt_impl.h).
// Cost of dequantize: 1 FLOP per element (the level times the block's absmax), reading the
// storage and writing n elements of T.
// CPU: kernels/cpu/nf4.cpp, tests/kernels/nf4_test.cpp. CUDA: kernels/cuda/nf4.cu,
// tests/kernels_cuda/nf4_test.cpp.
#pragma once

#include <cstdint>

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

inline constexpr std::int64_t kNf4Block = 64;        // elements per absmax
inline constexpr std::int64_t kNf4ScaleBlock = 256;  // absmax values per fp32 step

// The 16 levels (QLoRA, appendix E; bitsandbytes' NF4 table), ascending.
inline constexpr float kNf4Levels[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

inline std::int64_t nf4_blocks(std::int64_t n) {
    return (n + kNf4Block - 1) / kNf4Block;
}
inline std::int64_t nf4_step_count(std::int64_t n) {
    return (nf4_blocks(n) + kNf4ScaleBlock - 1) / kNf4ScaleBlock;
}
inline std::uint64_t nf4_code_bytes(std::int64_t n) {
    return static_cast<std::uint64_t>(n + 1) / 2;
}
// The state buffer: nf4_step_count fp32 steps, then nf4_blocks absmax codes.
inline std::uint64_t nf4_state_bytes(std::int64_t n) {
    return 4 * static_cast<std::uint64_t>(nf4_step_count(n)) +
           static_cast<std::uint64_t>(nf4_blocks(n));
}
inline std::uint64_t nf4_storage_bytes(std::int64_t n) {
    return nf4_code_bytes(n) + nf4_state_bytes(n);
}

struct Nf4Shape {
    std::int64_t n = 0;
    DType out = DType::bf16;  // the dequantized dtype
};

inline KernelCost nf4_dequantize_cost(const Nf4Shape& s) {
    KernelCost c;
    c.flops = static_cast<std::uint64_t>(s.n);
    c.bytes_read = nf4_storage_bytes(s.n);
    c.bytes_written = nbytes(s.out, s.n);
    return c;
}

// out (n) in T (float, bf16_t, f16_t) from codes and state as nf4_quantize wrote them.
template <class T>
struct Nf4DequantizeArgs {
    T* out = nullptr;                     // (n)
    const std::uint8_t* codes = nullptr;  // (nf4_code_bytes(n))
    const std::uint8_t* state = nullptr;  // (nf4_state_bytes(n))
    std::int64_t n = 0;
};

namespace cpu {

// codes (nf4_code_bytes(n)) and state (nf4_state_bytes(n)) from inp (n) host fp32.
void nf4_quantize(std::uint8_t* codes, std::uint8_t* state, const float* inp, std::int64_t n);

template <class T>
void nf4_dequantize(const Nf4DequantizeArgs<T>& args);

}  // namespace cpu

namespace cuda {

// The same on device pointers, queued on launch.stream, bit for bit the CPU's.
template <class T>
void nf4_dequantize(const Nf4DequantizeArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
