// lora: low-rank adapters beside a frozen linear layer (Hu et al. 2021):
//   out (M, N) += scale * (inp (M, K) @ A (r, K)^T) @ B (N, r)^T,   scale = alpha / r
// A fused projection (qkv, or swiglu's gate|up) carries `parts` separate adapters, as PEFT
// puts one on each of q, k, v: each reads the whole input, and their B matrices split N's rows
// (the first part n_first rows, the others the rest in equal shares: q then k, v under GQA;
// gate then up). Stored stacked: A (parts*r, K), B (N, r); part p's h columns are p*r..p*r+r-1.
// Adapter parameters r * (parts*K + N). FLOPs: forward 2*M*r*(parts*K + N), input gradient
// the same, adapter gradients the same. Keeps h = inp @ A^T (M, parts*r) for dB; inp is kept
// by its producer. B starts at zero, so a fresh adapter leaves the model's output unchanged.
//
// Rounding (16-bit storage; the CUDA twin's cuBLASLt calls round at the same points):
//   forward   h = T(inp @ A^T); out_p = T(out_p + scale * h_p @ B_p^T)
//   backward  dh_p = T(scale * dout_p @ B_p); dB_p = T(dB_p + scale * dout_p^T @ h_p);
//             dA = T(dA + dh^T @ inp); dinp = T(dinp + dh @ A)
// Gradients accumulate (+=), as matmul_backward's do.
// CPU: kernels/cpu/lora.cpp (OpenBLAS sgemm), tests/kernels/lora_test.cpp. CUDA:
// kernels/cuda/lora.cu (cuBLASLt), tests/kernels_cuda/lora_test.cpp.
#pragma once

#include "kernels/cost.h"
#include "kernels/matmul.h"

namespace napkin {

struct LoraShape {
    std::int64_t M = 0, N = 0, K = 0;
    std::int64_t r = 0;
    int parts = 1;
    DType dt = DType::f32;     // inp, adapters and out
    DType grad = DType::f32;   // adapter gradients
    std::int64_t n_first = 0;  // rows of out in part 0; 0 means N / parts
};

inline std::int64_t lora_params(const LoraShape& s) {
    return s.r * (s.parts * s.K + s.N);
}

// Rows of out that part p writes, and the first of them.
inline std::int64_t lora_part_rows(const LoraShape& s, int p) {
    const std::int64_t first = s.n_first > 0 ? s.n_first : s.N / s.parts;
    if (p == 0) return first;
    return (s.N - first) / (s.parts - 1);
}
inline std::int64_t lora_part_offset(const LoraShape& s, int p) {
    return p == 0 ? 0 : lora_part_rows(s, 0) + (p - 1) * lora_part_rows(s, 1);
}

inline KernelCost lora_forward_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * s.K) + nbytes(s.dt, lora_params(s)) + nbytes(s.dt, s.M * s.N);
    c.bytes_written = nbytes(s.dt, s.M * s.N) + nbytes(s.dt, s.M * s.parts * s.r);
    return c;
}

inline KernelCost lora_backward_input_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * s.N) + nbytes(s.dt, lora_params(s));
    c.bytes_written = nbytes(s.dt, s.M * s.K) + nbytes(s.dt, s.M * s.parts * s.r);
    return c;
}

inline KernelCost lora_backward_weight_cost(const LoraShape& s) {
    KernelCost c;
    c.flops = 2ull * s.M * s.r * (s.parts * s.K + s.N);
    c.bytes_read = nbytes(s.dt, s.M * (s.K + s.N + 2 * s.parts * s.r));
    c.bytes_written = nbytes(s.grad, lora_params(s));
    return c;
}

// h (M, parts*r) = inp (M, K) @ a (parts*r, K)^T; out (M, N) += scale * h_p @ b_p^T per part,
// b (N, r). out is read and written; h is overwritten. scratch: the GEMM scratch, as
// kernels/matmul.h's (CPU: lora_scratch_floats; CUDA: the cuBLASLt workspace).
template <class T>
struct LoraForwardArgs {
    T* out = nullptr;        // (M, N)
    T* h = nullptr;          // (M, parts*r)
    const T* inp = nullptr;  // (M, K)
    const T* a = nullptr;    // (parts*r, K)
    const T* b = nullptr;    // (N, r)
    LoraShape s;
    float scale = 1.0f;  // alpha / r
    float* scratch = nullptr;
};

// dh (M, parts*r) = scale * dout_p @ b_p per part (overwritten: the caller's buffer, also the
// backward's own intermediate on CUDA); db (N, r) += scale * dout_p^T @ h_p;
// da (parts*r, K) += dh^T @ inp; dinp (M, K) += dh @ a. dinp may be null (nothing upstream).
template <class T>
struct LoraBackwardArgs {
    T* dinp = nullptr;        // (M, K) or null
    T* da = nullptr;          // (parts*r, K)
    T* db = nullptr;          // (N, r)
    T* dh = nullptr;          // (M, parts*r)
    const T* dout = nullptr;  // (M, N)
    const T* inp = nullptr;   // (M, K)
    const T* h = nullptr;     // (M, parts*r)
    const T* a = nullptr;     // (parts*r, K)
    const T* b = nullptr;     // (N, r)
    LoraShape s;
    float scale = 1.0f;
    float* scratch = nullptr;
};

namespace cpu {

// Floats of scratch the 16-bit paths need (0 for float): the backward's, the larger: dout, b,
// h, inp and a widened to fp32, dh in fp32, and the largest product (db, da or dinp) before it
// is rounded.
inline std::int64_t lora_scratch_floats(const LoraShape& s, bool widen) {
    if (!widen) return 0;
    const std::int64_t PR = s.parts * s.r;
    std::int64_t product = s.N * s.r;
    if (PR * s.K > product) product = PR * s.K;
    if (s.M * s.K > product) product = s.M * s.K;
    return s.M * s.N + s.N * s.r + 2 * s.M * PR + s.M * s.K + PR * s.K + product;
}

template <class T>
void lora_forward(const LoraForwardArgs<T>& args);
template <class T>
void lora_backward(const LoraBackwardArgs<T>& args);

}  // namespace cpu

namespace cuda {

// The CUDA twins (kernels/cuda/lora.cu): the same semantics on device memory, each product one
// cuBLASLt call (strided by part), fp32 accumulate, queued on launch.stream.
template <class T>
void lora_forward(const LoraForwardArgs<T>& args, const Launch& launch);
template <class T>
void lora_backward(const LoraBackwardArgs<T>& args, const Launch& launch);

}  // namespace cuda

}  // namespace napkin
