// quantize / dequantize: a tensor in a storage type T (float, bf16, fp16) to fp8 codes
// (E4M3 or E5M2, core/fp8.h) with one fp32 scale per tensor, and back. fp8-amp casts every
// GEMM input with it (core/engine/gpt_impl.h):
//   amax      = max |inp| over the elements that are not NaN
//   scale     = max_finite / amax (448 E4M3, 57344 E5M2) in fp32; 1 when amax is 0 or
//               infinite; FLT_MAX when the quotient overflows (Transformer Engine's rule)
//   out       = fp8(float(inp) * scale): the product rounded to fp32, then to nearest even with
//               saturation to +-max_finite; NaN stays NaN
//   scale_inv = 1 / scale in fp32; dequantize: out = T(float(q) * scale_inv)
// The scale pair, kFp8ScaleFloats fp32 values, is kept beside each fp8 tensor: scale at float 0,
// scale_inv at float kFp8ScaleInv (16 bytes in), the other slots zero. The fp8 GEMMs multiply
// their fp32 product by the operands' scale_inv (kernels/matmul.h), which cuBLASLt reads through
// A/B_SCALE_POINTER, and cuBLASLt's fp8 kernels refuse a scale pointer that is not 16-byte
// aligned (NOT_SUPPORTED from cublasLtMatmul after its heuristic offered an algorithm; seen on an
// H200 with cuBLASLt 13.1: 4 bytes in refused, 0 and 16 accepted). Each pair is a tensor of its
// own, so its start is aligned, and so is scale_inv.
//
// Current scaling (this tensor's own amax) rather than delayed scaling (Transformer Engine's
// default, the amax of earlier steps): it keeps no history across steps, a tensor that outgrows
// its history cannot saturate, and it is the simpler of the two to get right; it reads the tensor
// once more than a fused delayed-scaling cast. The amax is a maximum, so it is the same in any
// order: deterministic on every backend.
// Cost: 2 FLOPs per element (the |x| comparison and the scaling multiply), the input read and
// the codes written once, plus the scale pair; dequantize 1 FLOP per element.
// CPU: kernels/cpu/quantize.cpp, tested in tests/kernels/quantize_test.cpp. CUDA:
// kernels/cuda/quantize.cu, tested against the CPU in tests/kernels_cuda/quantize_test.cpp.
#pragma once

#include <limits>

#include "kernels/cost.h"
#include "kernels/launch.h"

namespace napkin {

struct bf16_t;    // core/half.h and core/fp8.h (C++20), by pointer only: nvcc includes this
struct f8e4m3_t;  // header too
struct f8e5m2_t;

inline constexpr std::int64_t kFp8ScaleInv = 4;     // the float index of scale_inv
inline constexpr std::int64_t kFp8ScaleFloats = 8;  // scale, 0, 0, 0, scale_inv, 0, 0, 0

struct QuantizeShape {
    std::int64_t n = 0;
    DType in = DType::bf16;     // the wide side (inp of quantize, out of dequantize)
    DType fp8 = DType::f8e4m3;  // f8e4m3 or f8e5m2
};

inline KernelCost quantize_cost(const QuantizeShape& s) {
    KernelCost c;
    c.flops = 2ull * static_cast<std::uint64_t>(s.n);
    c.bytes_read = nbytes(s.in, s.n);
    c.bytes_written = nbytes(s.fp8, s.n) + nbytes(DType::f32, kFp8ScaleFloats);
    return c;
}

inline KernelCost dequantize_cost(const QuantizeShape& s) {
    KernelCost c;
    c.flops = static_cast<std::uint64_t>(s.n);
    c.bytes_read = nbytes(s.fp8, s.n) + nbytes(DType::f32, kFp8ScaleFloats);
    c.bytes_written = nbytes(s.in, s.n);
    return c;
}

// The scale for a tensor whose largest magnitude is amax, in a format whose largest finite
// value is max_finite (the rule above; the CUDA twin computes the same in kernels/cuda/).
inline float fp8_scale(float amax, float max_finite) {
    if (amax == 0.0f || !(amax < std::numeric_limits<float>::infinity())) return 1.0f;
    const float scale = max_finite / amax;
    return scale < std::numeric_limits<float>::infinity() ? scale
                                                          : std::numeric_limits<float>::max();
}

// out (n) fp8 codes, scale (kFp8ScaleFloats) = the pair (scale, scale_inv) as laid out above,
// from inp (n) in T. Q: f8e4m3_t or f8e5m2_t; T: float, bf16_t or f16_t.
template <class Q, class T>
struct QuantizeArgs {
    Q* out = nullptr;        // (n)
    float* scale = nullptr;  // (kFp8ScaleFloats)
    const T* inp = nullptr;  // (n)
    std::int64_t n = 0;
};

// out (n) in T = float(inp) * scale[kFp8ScaleInv], inp (n) fp8 codes with their scale pair.
template <class T, class Q>
struct DequantizeArgs {
    T* out = nullptr;              // (n)
    const Q* inp = nullptr;        // (n)
    const float* scale = nullptr;  // (kFp8ScaleFloats)
    std::int64_t n = 0;
};

// fp8-amp's casts, over its bf16 storage (kernels/kernel_list.h).
template <class Q>
using Fp8QuantizeArgs = QuantizeArgs<Q, bf16_t>;
template <class Q>
using Fp8DequantizeArgs = DequantizeArgs<bf16_t, Q>;

namespace cpu {

template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args);
template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args);

}  // namespace cpu

namespace cuda {

// The same on device pointers (scale too), queued on launch.stream; codes and scales bit for
// bit the CPU's. quantize is four launches: the amax slot (scale[0]) zeroed, the amax (each
// block's maximum, then one atomicMax per block on the float's bits, which order like the values
// for non-negative floats: a maximum is the same in any order, so the result is deterministic),
// the scale pair from it (one thread), the cast (cvt.rn.satfinite on sm_89+).
template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args, const Launch& launch);
template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
