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
// Two ways to pick the scale (Transformer Engine's two recipes):
//   current  this tensor's own amax, as above: one more read of the tensor than the cast, before
//            it (on CUDA four launches: the amax zeroed, the amax, the scale pair, the cast);
//   delayed  (napkin train --fp8-amax-history H > 0, the default H = 16) the scale pair of a slot
//            (one per cast site: a GEMM's input, weight or output gradient in one layer), computed
//            at the previous step's end from the slot's amax history, the tensor's amaxes of the
//            last H steps: scale = fp8_scale(max of the history). The cast reads the tensor once:
//            it writes the codes with that scale and records the tensor's amax into the history's
//            entry 0 (max with what is there: micro-batches and recomputes of a step share it), in
//            one pass and one launch. A value above the scale's range (|x| scale > max_finite: the
//            tensor outgrew its history) saturates to +-max_finite, as Transformer Engine's casts
//            (satfinite) do; the next step's scale then covers it.
//   amax_history_roll, at each step's end, over every slot: scale pair = fp8_scale(max of the
//   history), then the history shifts by one (entry h + 1 = entry h, the oldest dropped) and
//   entry 0 becomes 0, ready for the next step. Transformer Engine keeps the previous scale when
//   the amax is 0 or not finite; here fp8_scale's rule gives 1 (the formula of current scaling).
// A maximum is the same in any order: deterministic on every backend.
// quantize_transpose is the same cast of a row-major (R, C) matrix in one read of it, writing
// the codes (R, C), their transpose (C, R), or both (Transformer Engine's cast-transpose): the
// codes, the scale pair and the amax are bit for bit quantize's on the same elements, since a
// cast is element-wise and a maximum is the same in any order. fp8-amp's backward takes its
// fp8 GEMMs' TN operands from it (kernels/matmul.h, core/engine/gpt_fp8.h).
// transpose_fp8 transposes codes already made (R, C) -> (C, R), bytes moved as they are.
// Cost: 2 FLOPs per element (the |x| comparison and the scaling multiply), the input read and
// the codes written once, plus the scale pair; dequantize 1 FLOP per element; the roll 1 FLOP
// per history entry, the histories read and written and the scale pairs written;
// quantize_transpose as quantize with the codes written once per layout asked for;
// transpose_fp8 0 FLOPs, the codes read and written once.
// CPU: kernels/cpu/quantize.cpp, tested in tests/kernels/quantize_test.cpp and
// quantize_transpose_test.cpp. CUDA: kernels/cuda/quantize.cu, tested against the CPU in
// tests/kernels_cuda/quantize_test.cpp and quantize_transpose_test.cpp.
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

// The cast-transpose of a row-major (R, C) matrix: the codes (R, C) if `rows`, their transpose
// (C, R) if `transposed`.
struct QuantizeTransposeShape {
    std::int64_t R = 0, C = 0;
    DType in = DType::bf16;
    DType fp8 = DType::f8e4m3;
    bool rows = true;
    bool transposed = true;
};

inline KernelCost quantize_transpose_cost(const QuantizeTransposeShape& s) {
    const std::int64_t n = s.R * s.C;
    KernelCost c;
    c.flops = 2ull * static_cast<std::uint64_t>(n);
    c.bytes_read = nbytes(s.in, n);
    c.bytes_written = nbytes(s.fp8, n) * ((s.rows ? 1 : 0) + (s.transposed ? 1 : 0)) +
                      nbytes(DType::f32, kFp8ScaleFloats);
    return c;
}

inline KernelCost transpose_fp8_cost(std::int64_t R, std::int64_t C) {
    KernelCost c;
    c.bytes_read = nbytes(DType::f8e4m3, R * C);
    c.bytes_written = nbytes(DType::f8e4m3, R * C);
    return c;
}

// The delayed-scaling state: `slots` amax histories of H entries, and a scale pair per slot.
struct AmaxHistoryShape {
    std::int64_t slots = 0;
    std::int64_t H = 0;
};

inline KernelCost amax_history_roll_cost(const AmaxHistoryShape& s) {
    KernelCost c;
    c.flops = static_cast<std::uint64_t>(s.slots * s.H);
    c.bytes_read = nbytes(DType::f32, s.slots * s.H);
    c.bytes_written = nbytes(DType::f32, s.slots * (s.H + kFp8ScaleFloats));
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
// delayed null: current scaling. delayed set: delayed scaling, the pair taken from delayed (a
// slot's, written by amax_history_roll) and copied into scale. amax set (either way):
// amax[0] = max(amax[0], the amax of inp), NaN skipped; amax[0] must be >= +0.
template <class Q, class T>
struct QuantizeArgs {
    Q* out = nullptr;        // (n)
    float* scale = nullptr;  // (kFp8ScaleFloats)
    const T* inp = nullptr;  // (n)
    std::int64_t n = 0;
    const float* delayed = nullptr;  // (kFp8ScaleFloats), not aliasing scale
    float* amax = nullptr;           // (1): entry 0 of the slot's history
};

// out (R, C) and/or out_t (C, R) = the fp8 codes of inp (R, C), row-major, scaled as
// QuantizeArgs says (scale, delayed, amax alike). out or out_t may be null, not both.
template <class Q, class T>
struct QuantizeTransposeArgs {
    Q* out = nullptr;        // (R, C) or null
    Q* out_t = nullptr;      // (C, R) or null
    float* scale = nullptr;  // (kFp8ScaleFloats)
    const T* inp = nullptr;  // (R, C)
    std::int64_t R = 0, C = 0;
    const float* delayed = nullptr;  // (kFp8ScaleFloats), not aliasing scale
    float* amax = nullptr;           // (1)
};

// out (C, R) = inp (R, C) transposed: fp8 codes as bytes (the scale pair stays valid).
struct TransposeFp8Args {
    void* out = nullptr;        // (C, R) bytes
    const void* inp = nullptr;  // (R, C) bytes
    std::int64_t R = 0, C = 0;
};

// Delayed scaling's step end (the rule above). The first e4m3_slots slots are E4M3 casts' (max
// 448), the rest E5M2's (57344).
struct AmaxHistoryRollArgs {
    float* history = nullptr;  // (slots, H), entry 0 the step's amax
    float* scales = nullptr;   // (slots, kFp8ScaleFloats)
    std::int64_t slots = 0;
    std::int64_t e4m3_slots = 0;
    std::int64_t H = 0;  // > 0
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
template <class Q>
using Fp8QuantizeTransposeArgs = QuantizeTransposeArgs<Q, bf16_t>;

namespace cpu {

template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args);
template <class Q, class T>
void quantize_transpose(const QuantizeTransposeArgs<Q, T>& args);
void transpose_fp8(const TransposeFp8Args& args);
template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args);
void amax_history_roll(const AmaxHistoryRollArgs& args);

}  // namespace cpu

namespace cuda {

// The same on device pointers (scale, delayed, amax too), queued on launch.stream; codes, scales
// and amaxes bit for bit the CPU's. Current scaling is four launches: the amax slot (scale[0])
// zeroed, the amax (each block's maximum, then one atomicMax per block on the float's bits, which
// order like the values for non-negative floats: a maximum is the same in any order, so the result
// is deterministic), the scale pair from it (one thread, which also records the amax), the cast
// (cvt.rn.satfinite on sm_89+). Delayed scaling is one launch: each block casts its elements with
// the slot's scale, then adds its maximum to amax[0] by one atomicMax, and block 0 copies the
// pair. amax_history_roll: one thread per slot.
// quantize_transpose: the same launches, the cast one pass over 64 x 64 tiles of 256 threads:
// each thread reads 16 elements of a row (16-byte loads), writes their 16 codes to out (one
// 16-byte store) and into a shared tile, whose 16-byte chunks are swizzled (chunk k of row i at
// k ^ (i / 16 % 4)) so that the column reads below meet no bank conflict; after the barrier each
// thread gathers 16 codes of a column and writes them to out_t (one 16-byte store, four threads
// a 64-byte row segment). A tile at the matrix's edge, or any pointer or row not 16-byte aligned
// (C * sizeof(T), C or R not multiples of 16 bytes), takes the same path element by element.
// transpose_fp8: the same tiles over bytes.
template <class Q, class T>
void quantize(const QuantizeArgs<Q, T>& args, const Launch& launch);
template <class Q, class T>
void quantize_transpose(const QuantizeTransposeArgs<Q, T>& args, const Launch& launch);
void transpose_fp8(const TransposeFp8Args& args, const Launch& launch);
template <class T, class Q>
void dequantize(const DequantizeArgs<T, Q>& args, const Launch& launch);
void amax_history_roll(const AmaxHistoryRollArgs& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
