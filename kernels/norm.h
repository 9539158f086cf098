// norm: LayerNorm or RMSNorm over the last dimension, statistics in fp32.
//   inp (N, C) -> out (N, C); layernorm keeps mean (N) and rstd (N), rmsnorm keeps rstd (N).
// FLOPs per element: layernorm forward 7 (mean 1, variance 2, normalize 2, affine 2),
// backward 14; rmsnorm forward 4, backward 9 (approximate counts, not tensor-core work).
// Backward reads inp, which is the producing op's kept output (core/op_plan.h).
#pragma once

#include "core/model_config.h"
#include "kernels/cost.h"

struct CUstream_st;  // cudaStream_t, without the CUDA headers (op headers compile in any build)

namespace napkin {

struct NormShape {
    std::int64_t N = 0;  // rows: B*T
    std::int64_t C = 0;
    NormKind kind = NormKind::layernorm;
    bool bias = true;
    DType in = DType::f32;   // inp and weight
    DType out = DType::f32;
};

inline std::int64_t norm_stats_per_row(NormKind k) { return k == NormKind::layernorm ? 2 : 1; }

inline KernelCost norm_forward_cost(const NormShape& s) {
    KernelCost c;
    const std::uint64_t per_elem = s.kind == NormKind::layernorm ? 7 : 4;
    c.flops = per_elem * s.N * s.C;
    c.bytes_read = nbytes(s.in, s.N * s.C) + nbytes(s.in, s.C) * (s.bias ? 2 : 1);
    c.bytes_written = nbytes(s.out, s.N * s.C) + nbytes(DType::f32, s.N * norm_stats_per_row(s.kind));
    return c;
}

inline KernelCost norm_backward_cost(const NormShape& s) {
    KernelCost c;
    const std::uint64_t per_elem = s.kind == NormKind::layernorm ? 14 : 9;
    c.flops = per_elem * s.N * s.C;
    c.bytes_read = nbytes(s.in, s.N * s.C) + nbytes(s.out, s.N * s.C) +
                   nbytes(DType::f32, s.N * norm_stats_per_row(s.kind)) + nbytes(s.in, s.C);
    c.bytes_written = nbytes(s.in, s.N * s.C) + nbytes(DType::f32, s.C) * (s.bias ? 2 : 1);
    return c;
}

namespace cpu {

// CPU kernels (kernels/cpu/norm.cpp, tested in tests/kernels/norm_test.cpp), templated on the
// storage type T (float, bf16_t, f16_t from core/half.h); all arithmetic and row statistics in
// fp32. Backward ACCUMULATES (+=) into dinp and the parameter gradients (callers zero them);
// parameter gradients are summed over the N rows in fp32 and added into T once per call.

// out (N, C) = (inp (N, C) - mean) * rstd * weight (C) [+ bias (C)]; bias may be null.
// Writes mean (N) and rstd (N) = 1 / sqrt(var + eps) (biased variance), kept for backward.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, std::int64_t N, std::int64_t C, float eps = 1e-5f);

// dinp (N, C) += dL/dinp; dweight (C) += sum over rows of dout * xhat; dbias (C) += sum of dout.
// xhat is recomputed from inp, mean and rstd. dweight and dbias may be null (frozen).
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, std::int64_t N, std::int64_t C);

// out (N, C) = inp (N, C) * rstd * weight (C); writes rstd (N) = 1 / sqrt(mean(inp^2) + eps).
template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, std::int64_t N,
                     std::int64_t C, float eps = 1e-5f);

// dinp (N, C) += rstd * (dout * weight - xhat * mean(dout * weight * xhat)), xhat = inp * rstd;
// dweight (C) += sum over rows of dout * xhat (may be null: frozen).
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, std::int64_t N, std::int64_t C);

}  // namespace cpu

namespace cuda {

// CUDA kernels (kernels/cuda/norm.cu, tested against the CPU in tests/kernels_cuda/norm_test.cpp),
// same storage types and semantics as the CPU's above: statistics in fp32, backward ACCUMULATES
// into dinp, dweight and dbias (each parameter gradient summed over rows in fp32 in a fixed
// order and added once: deterministic, no atomics). Device pointers, queued on `stream`.

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, std::int64_t N, std::int64_t C, CUstream_st* stream,
                       float eps = 1e-5f);
// out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C) or null

// The parameter gradients' column sums over N rows: with `scratch` (device memory of
// scratch_bytes, free for the call's duration on `stream`; the engine lends the GEMM workspace),
// blocks of 32 columns x kNormRowsPerChunk rows (more rows a chunk where the scratch holds fewer
// chunks) each sum their chunk into the scratch, and a second kernel adds the chunks' sums per
// column in chunk order: N/64 times the blocks of the one-stage path, whose blocks (one per 32
// columns: 24 for C = 768, on a GPU of 132 multiprocessors) each walk every row. Without scratch,
// or with room for fewer than two chunks, the one-stage path. Both sum in a fixed order: the
// same bits run to run; the two orders differ in fp32 rounding. norm_backward_scratch_bytes is
// what 64-row chunks take: 2 ceil(N / 64) C floats.
inline constexpr std::int64_t kNormRowsPerChunk = 64;
std::size_t norm_backward_scratch_bytes(std::int64_t N, std::int64_t C);

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        CUstream_st* stream, void* scratch = nullptr, std::size_t scratch_bytes = 0);
// dinp (N, C), dweight (C) or null, dbias (C) or null, dout (N, C), inp (N, C), weight (C),
// mean (N), rstd (N), scratch (scratch_bytes) or null

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, std::int64_t N,
                     std::int64_t C, CUstream_st* stream, float eps = 1e-5f);
// out (N, C), rstd (N), inp (N, C), weight (C)

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, std::int64_t N, std::int64_t C, CUstream_st* stream,
                      void* scratch = nullptr, std::size_t scratch_bytes = 0);
// dinp (N, C), dweight (C) or null, dout (N, C), inp (N, C), weight (C), rstd (N),
// scratch (scratch_bytes) or null

}  // namespace cuda

}  // namespace napkin
