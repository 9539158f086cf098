// The engine's CPU backend: the kernel calls of core/engine/gpt_impl.h forwarded to napkin::cpu
// (kernels/<op>.h), name for name, plus the handful of memory operations the orchestration does
// besides kernels (zeroing, parameter values in and out as fp32, the token check). Its twin is
// core/engine/cuda_kernels.h; a backend adapts differing signatures (scratch, streams,
// workspaces) here, never in the orchestration.
// Every pointer is host memory. Shapes as in kernels/<op>.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/op_plan.h"
#include "core/tensor.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/norm.h"
#include "kernels/zero.h"
#include "kernels/quantize.h"
#include "kernels/residual.h"
#include "kernels/rope.h"

namespace napkin {

template <class T>
struct CpuKernels {
    using Elem = T;
    static constexpr DeviceKind kDevice = DeviceKind::cpu;
    // Kernels run on the calling thread, so timing the call times the kernel: the engine
    // writes a device track of its own (profiler::begin_kernel).
    static constexpr bool kHostTimedKernels = true;
    // fp8-amp's kernels (quantize, dequantize, the fp8 GEMMs) over bf16 storage.
    static constexpr bool kFp8 = std::is_same_v<T, bf16_t>;

    // The per-row losses of head_cross_entropy (N): host memory outside the accounting, as
    // always (the buffer plan lists no loss.rows for the CPU: `rows` is empty).
    void bind_losses(Tensor rows, std::int64_t N) {
        NAPKIN_ASSERT(rows.empty(), "the CPU's losses are host memory outside the accounting");
        losses_.assign(static_cast<std::size_t>(N), 0.0f);
    }
    float* losses() { return losses_.data(); }

    // ---- memory
    void zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
    void zero(const ZeroSpan* spans, int count) { cpu::zero(spans, count); }
    // dst (n) in T = src (n) host fp32, rounded; out (n) host fp32 = src (n) in T.
    void store_floats(T* dst, const float* src, std::int64_t n) {
        for (std::int64_t k = 0; k < n; ++k)
            dst[k] = from_float<T>(src[k]);
    }
    void load_floats(float* out, const T* src, std::int64_t n) const {
        for (std::int64_t k = 0; k < n; ++k)
            out[k] = to_float(src[k]);
    }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) {
        std::memcpy(dst, src, bytes);
    }
    // NF4 weights (QLoRA, kernels/nf4.h): host fp32 in, quantized; and dequantized back out.
    void store_nf4(std::uint8_t* codes, std::uint8_t* state, const float* src, std::int64_t n) {
        cpu::nf4_quantize(codes, state, src, n);
    }
    void load_nf4(float* out, const std::uint8_t* codes, const std::uint8_t* state,
                  std::int64_t n) const {
        cpu::nf4_dequantize<float>(out, codes, state, n);
    }
    // tokens (n) must lie in [0, V).
    void check_tokens(const std::int32_t* tokens, std::int64_t n, std::int64_t V) const {
        for (std::int64_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || tokens[i] >= V) {
                throw UsageError("token id " + std::to_string(tokens[i]) +
                                 " is outside the vocabulary [0, " + std::to_string(V) + ")");
            }
        }
    }

    // ---- kernels (kernels/<op>.h, namespace cpu)
    void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe,
                           std::int64_t B, std::int64_t T_, std::int64_t C) {
        cpu::embedding_forward<T>(out, tokens, wte, wpe, B, T_, C);
    }
    void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens,
                            std::int64_t B, std::int64_t T_, std::int64_t C) {
        cpu::embedding_backward<T>(dwte, dwpe, dout, tokens, B, T_, C);
    }
    void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, std::int64_t N, std::int64_t C) {
        cpu::layernorm_forward<T>(out, mean, rstd, inp, weight, bias, N, C);
    }
    void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                            const T* weight, const float* mean, const float* rstd, std::int64_t N,
                            std::int64_t C, float* /*scratch: the CUDA kernels' only*/) {
        cpu::layernorm_backward<T>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    }
    void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, std::int64_t N,
                         std::int64_t C) {
        cpu::rmsnorm_forward<T>(out, rstd, inp, weight, N, C);
    }
    void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                          const float* rstd, std::int64_t N, std::int64_t C, float* /*scratch*/) {
        cpu::rmsnorm_backward<T>(dinp, dweight, dout, inp, weight, rstd, N, C);
    }
    void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t M,
                        std::int64_t N, std::int64_t K, float* scratch) {
        cpu::matmul_forward<T>(out, inp, weight, bias, M, N, K, scratch);
    }
    void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                         const T* weight, std::int64_t M, std::int64_t N, std::int64_t K,
                         float* scratch) {
        cpu::matmul_backward<T>(dinp, dweight, dbias, dout, inp, weight, M, N, K, scratch);
    }
    // fp8-amp (kernels/quantize.h, kernels/matmul.h): codes with their scale pairs.
    template <class Q>
    void quantize(Q* out, float* scale, const T* inp, std::int64_t n) {
        cpu::quantize<Q, T>(out, scale, inp, n);
    }
    template <class Q>
    void dequantize(T* out, const Q* inp, const float* scale, std::int64_t n) {
        cpu::dequantize<T, Q>(out, inp, scale, n);
    }
    void matmul_forward(bf16_t* out, const f8e4m3_t* inp, const float* inp_scale,
                        const f8e4m3_t* weight, const float* weight_scale, const bf16_t* bias,
                        std::int64_t M, std::int64_t N, std::int64_t K, float* scratch) {
        cpu::matmul_forward(out, inp, inp_scale, weight, weight_scale, bias, M, N, K, scratch);
    }
    void matmul_backward(bf16_t* dinp, bf16_t* dweight, bf16_t* dbias, const bf16_t* dout,
                         const f8e5m2_t* dout8, const float* dout_scale, const f8e4m3_t* inp,
                         const float* inp_scale, const f8e4m3_t* weight, const float* weight_scale,
                         std::int64_t M, std::int64_t N, std::int64_t K, float* scratch) {
        cpu::matmul_backward(dinp, dweight, dbias, dout, dout8, dout_scale, inp, inp_scale, weight,
                             weight_scale, M, N, K, scratch);
    }
    void lora_forward(T* out, T* h, const T* inp, const T* a, const T* b, const LoraShape& s,
                      float scale, float* scratch) {
        cpu::lora_forward<T>(out, h, inp, a, b, s, scale, scratch);
    }
    void lora_backward(T* dinp, T* da, T* db, T* dh, const T* dout, const T* inp, const T* h,
                       const T* a, const T* b, const LoraShape& s, float scale, float* scratch) {
        cpu::lora_backward<T>(dinp, da, db, dh, dout, inp, h, a, b, s, scale, scratch);
    }
    void nf4_dequantize(T* out, const std::uint8_t* codes, const std::uint8_t* state,
                        std::int64_t n) {
        cpu::nf4_dequantize<T>(out, codes, state, n);
    }
    void rope_forward(T* qkv, std::int64_t B, std::int64_t T_, int NH, int KVH, std::int64_t HD) {
        cpu::rope_forward<T>(qkv, B, T_, NH, KVH, HD);
    }
    void rope_backward(T* dqkv, std::int64_t B, std::int64_t T_, int NH, int KVH, std::int64_t HD) {
        cpu::rope_backward<T>(dqkv, B, T_, NH, KVH, HD);
    }
    void attention_naive_forward(T* out, T* p, const T* qkv, std::int64_t B, std::int64_t T_,
                                 int NH, int KVH, std::int64_t HD,
                                 const AttentionDropout<T>* dropout = nullptr) {
        cpu::attention_naive_forward<T>(out, p, qkv, B, T_, NH, KVH, HD, dropout);
    }
    void attention_naive_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* p,
                                  std::int64_t B, std::int64_t T_, int NH, int KVH,
                                  std::int64_t HD, const AttentionDropout<T>* dropout = nullptr) {
        cpu::attention_naive_backward<T>(dqkv, scratch, dout, qkv, p, B, T_, NH, KVH, HD, dropout);
    }
    void dropout_forward(T* out, std::uint8_t* mask, const T* inp, std::int64_t n, float p,
                         std::uint64_t seed) {
        cpu::dropout_forward<T>(out, mask, inp, n, p, seed);
    }
    void dropout_backward(T* dinp, const T* dout, const std::uint8_t* mask, std::int64_t n,
                          float p) {
        cpu::dropout_backward<T>(dinp, dout, mask, n, p);
    }
    void attention_flash_forward(T* out, float* lse, const T* qkv, std::int64_t B, std::int64_t T_,
                                 int NH, int KVH, std::int64_t HD,
                                 const AttentionDropout<T>* dropout = nullptr) {
        cpu::attention_flash_forward<T>(out, lse, qkv, B, T_, NH, KVH, HD, dropout);
    }
    void attention_flash_backward(T* dqkv, const T* dout, const T* out, const T* qkv,
                                  const float* lse, std::int64_t B, std::int64_t T_, int NH,
                                  int KVH, std::int64_t HD,
                                  const AttentionDropout<T>* dropout = nullptr) {
        cpu::attention_flash_backward<T>(dqkv, dout, out, qkv, lse, B, T_, NH, KVH, HD, dropout);
    }
    void gelu_forward(T* out, const T* inp, std::int64_t n) { cpu::gelu_forward<T>(out, inp, n); }
    void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n) {
        cpu::gelu_backward<T>(dinp, inp, dout, n);
    }
    void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F) {
        cpu::swiglu_forward<T>(out, inp, N, F);
    }
    void swiglu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N, std::int64_t F) {
        cpu::swiglu_backward<T>(dinp, inp, dout, N, F);
    }
    void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
        cpu::residual_forward<T>(out, a, b, n);
    }
    // Returns the mean loss over the M rows.
    float head_cross_entropy(float* losses, T* dx, T* dw, const T* x, const T* w,
                             const std::int32_t* targets, std::int64_t M, std::int64_t C,
                             std::int64_t V, std::int64_t Vp, std::int64_t chunk, float dloss,
                             float* scratch) {
        return cpu::head_cross_entropy<T>(losses, dx, dw, x, w, targets, M, C, V, Vp, chunk, dloss,
                                          scratch);
    }

private:
    std::vector<float> losses_;
};

}  // namespace napkin
