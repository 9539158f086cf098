// The engine's CUDA backend: the kernel calls of core/engine/gpt_impl.h, with the CPU backend's
// names and signatures (core/engine/cpu_kernels.h), forwarded to napkin::cuda through the
// plugin's table (core/cuda/cuda_engine_api.h) with the engine's stream and cuBLASLt handle.
// Where the CUDA signature differs it is adapted here:
//   matmul_*            the float* scratch is the cuBLASLt workspace (kMatmulWorkspaceBytes)
//   head_cross_entropy  per-row losses stay on the device; the mean is taken on the host after
//                       one copy (a synchronization per micro-batch, as llm.c's)
//   check_tokens        a no-op: tokens are device memory; the trainer checks the token
//                       source's vocabulary, and the loss of an out-of-range target is NaN
//   lora_*              the float* scratch is the cuBLASLt workspace, as matmul_*'s
//   store_nf4, load_nf4 NF4 is quantized and, for reading back, dequantized on the host
// Every pointer is device memory except where named host. Shapes as in kernels/<op>.h.
// Compiled in every build (no CUDA header): only running it needs the plugin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/cuda_engine_api.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/op_plan.h"
#include "core/tensor.h"
#include "kernels/lora.h"
#include "kernels/nf4.h"

namespace napkin {

template <class T>
struct CudaKernels {
    using Elem = T;
    static constexpr DeviceKind kDevice = DeviceKind::cuda;
    // Launches are asynchronous: host timing of a call is not the kernel's time. Kernel events
    // need CUPTI (docs/CUDA.md, "Profiling"); the host keeps op ranges only.
    static constexpr bool kHostTimedKernels = false;
    // fp8-amp's kernels (quantize, dequantize, the fp8 GEMMs) over bf16 storage.
    static constexpr bool kFp8 = std::is_same_v<T, bf16_t>;

    CudaKernels(const CudaEngineApi& api, CUstream_st* stream, cublasLtContext* handle)
        : api_(&api), k_(&cuda_kernel_table<T>(api)), stream_(stream), handle_(handle) {}

    // The per-row losses (N) on the device: the buffer plan's loss.rows, a temporary.
    void bind_losses(Tensor rows, std::int64_t N) {
        NAPKIN_ASSERT(rows.numel() == N, "loss.rows: " << rows.numel() << " rows for " << N);
        losses_ = std::move(rows);
        host_losses_.assign(static_cast<std::size_t>(N), 0.0f);
    }
    float* losses() { return losses_.data<float>(); }

    // ---- memory
    void zero(void* p, std::size_t bytes) { api_->memset_zero(p, bytes, stream_); }
    void zero(const ZeroSpan* spans, int count) { api_->zero_spans(spans, count, stream_); }
    // dst (n) in T = src (n) host fp32, rounded on the host and copied (waits).
    void store_floats(T* dst, const float* src, std::int64_t n) {
        std::vector<T> host(static_cast<std::size_t>(n));
        for (std::int64_t k = 0; k < n; ++k)
            host[static_cast<std::size_t>(k)] = from_float<T>(src[k]);
        api_->copy_to_device(dst, host.data(), host.size() * sizeof(T), stream_);
    }
    // out (n) host fp32 = src (n) in T (waits for the work queued before).
    void load_floats(float* out, const T* src, std::int64_t n) const {
        std::vector<T> host(static_cast<std::size_t>(n));
        api_->copy_to_host(host.data(), src, host.size() * sizeof(T), stream_);
        for (std::int64_t k = 0; k < n; ++k)
            out[k] = to_float(host[static_cast<std::size_t>(k)]);
    }
    // Host fp32 values quantized on the host (cpu::nf4_quantize) and copied into codes and
    // state (waits); and back: dequantized to host fp32 (waits for the work queued before).
    // codes (nf4_code_bytes(n)) and state (nf4_state_bytes(n)) are device memory.
    void store_nf4(std::uint8_t* codes, std::uint8_t* state, const float* src, std::int64_t n) {
        std::vector<std::uint8_t> host_codes(nf4_code_bytes(n)), host_state(nf4_state_bytes(n));
        cpu::nf4_quantize(host_codes.data(), host_state.data(), src, n);
        api_->copy_to_device(codes, host_codes.data(), host_codes.size(), stream_);
        api_->copy_to_device(state, host_state.data(), host_state.size(), stream_);
    }
    void load_nf4(float* out, const std::uint8_t* codes, const std::uint8_t* state,
                  std::int64_t n) const {
        std::vector<std::uint8_t> host_codes(nf4_code_bytes(n)), host_state(nf4_state_bytes(n));
        api_->copy_to_host(host_codes.data(), codes, host_codes.size(), stream_);
        api_->copy_to_host(host_state.data(), state, host_state.size(), stream_);
        cpu::nf4_dequantize<float>(out, host_codes.data(), host_state.data(), n);
    }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) {
        api_->copy_to_device(dst, src, bytes, stream_);
    }
    void check_tokens(const std::int32_t*, std::int64_t, std::int64_t) const {}

    // ---- kernels (kernels/<op>.h, namespace cuda)
    void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe,
                           std::int64_t B, std::int64_t T_, std::int64_t C) {
        k_->embedding_forward(out, tokens, wte, wpe, B, T_, C, stream_);
    }
    void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens,
                            std::int64_t B, std::int64_t T_, std::int64_t C) {
        k_->embedding_backward(dwte, dwpe, dout, tokens, B, T_, C, stream_);
    }
    void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, std::int64_t N, std::int64_t C) {
        k_->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, stream_, 1e-5f);
    }
    // scratch: the GEMM workspace (the buffer plan's matmul.scratch), idle between GEMMs on this
    // stream, holds the parameter gradients' per-chunk sums (kernels/norm.h).
    void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                            const T* weight, const float* mean, const float* rstd, std::int64_t N,
                            std::int64_t C, float* scratch) {
        k_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream_,
                               scratch, scratch != nullptr ? cuda::kMatmulWorkspaceBytes : 0);
    }
    void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, std::int64_t N,
                         std::int64_t C) {
        k_->rmsnorm_forward(out, rstd, inp, weight, N, C, stream_, 1e-5f);
    }
    void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                          const float* rstd, std::int64_t N, std::int64_t C, float* scratch) {
        k_->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, stream_, scratch,
                             scratch != nullptr ? cuda::kMatmulWorkspaceBytes : 0);
    }
    void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t M,
                        std::int64_t N, std::int64_t K, float* workspace) {
        workspace_ = workspace;
        k_->matmul_forward(out, inp, weight, bias, M, N, K, context(workspace), stream_);
    }
    void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                         const T* weight, std::int64_t M, std::int64_t N, std::int64_t K,
                         float* workspace) {
        k_->matmul_backward(dinp, dweight, dbias, dout, inp, weight, M, N, K, context(workspace),
                            stream_);
    }
    // fp8-amp (kernels/quantize.h, the fp8 overloads of kernels/matmul.h). The scratch is the
    // cuBLASLt workspace followed by the fp8 backward's transposes (matmul.scratch).
    template <class Q>
    void quantize(Q* out, float* scale, const T* inp, std::int64_t n) {
        if constexpr (std::is_same_v<Q, f8e4m3_t>)
            api_->fp8.quantize_e4m3(out, scale, inp, n, stream_);
        else
            api_->fp8.quantize_e5m2(out, scale, inp, n, stream_);
    }
    template <class Q>
    void dequantize(T* out, const Q* inp, const float* scale, std::int64_t n) {
        static_assert(std::is_same_v<Q, f8e4m3_t>, "the engine dequantizes E4M3 only");
        api_->fp8.dequantize_e4m3(out, inp, scale, n, stream_);
    }
    void matmul_forward(bf16_t* out, const f8e4m3_t* inp, const float* inp_scale,
                        const f8e4m3_t* weight, const float* weight_scale, const bf16_t* bias,
                        std::int64_t M, std::int64_t N, std::int64_t K, float* scratch) {
        workspace_ = scratch;
        api_->fp8.matmul_forward(out, inp, inp_scale, weight, weight_scale, bias, M, N, K,
                                 context(scratch), stream_);
    }
    void matmul_backward(bf16_t* dinp, bf16_t* dweight, bf16_t* dbias, const bf16_t* dout,
                         const f8e5m2_t* dout8, const float* dout_scale, const f8e4m3_t* inp,
                         const float* inp_scale, const f8e4m3_t* weight, const float* weight_scale,
                         std::int64_t M, std::int64_t N, std::int64_t K, float* scratch) {
        void* transposes = reinterpret_cast<char*>(scratch) + cuda::kMatmulWorkspaceBytes;
        api_->fp8.matmul_backward(dinp, dweight, dbias, dout, dout8, dout_scale, inp, inp_scale,
                                  weight, weight_scale, M, N, K, transposes, context(scratch),
                                  stream_);
    }
    // LoRA (kernels/lora.h): dh (M, parts*r) in T is the backward's buffer; scratch is the
    // cuBLASLt workspace, as matmul_*'s.
    void lora_forward(T* out, T* h, const T* inp, const T* a, const T* b, const LoraShape& s,
                      float scale, float* workspace) {
        k_->lora_forward(out, h, inp, a, b, s, scale, context(workspace), stream_);
    }
    void lora_backward(T* dinp, T* da, T* db, T* dh, const T* dout, const T* inp, const T* h,
                       const T* a, const T* b, const LoraShape& s, float scale, float* workspace) {
        k_->lora_backward(dinp, da, db, dh, dout, inp, h, a, b, s, scale, context(workspace),
                          stream_);
    }
    // NF4 (kernels/nf4.h): frozen QLoRA weights; codes (nf4_code_bytes(n)) and state
    // (nf4_state_bytes(n)) in device memory.
    void nf4_dequantize(T* out, const std::uint8_t* codes, const std::uint8_t* state,
                        std::int64_t n) {
        k_->nf4_dequantize(out, codes, state, n, stream_);
    }
    void rope_forward(T* qkv, std::int64_t B, std::int64_t T_, int NH, int KVH, std::int64_t HD) {
        k_->rope_forward(qkv, B, T_, NH, KVH, HD, stream_, 10000.0f, 0);
    }
    void rope_backward(T* dqkv, std::int64_t B, std::int64_t T_, int NH, int KVH, std::int64_t HD) {
        k_->rope_backward(dqkv, B, T_, NH, KVH, HD, stream_, 10000.0f, 0);
    }
    // Naive attention with its optional dropout on P (kernels/attention.h; the struct is a host
    // value, its mask and dropped device memory), and dropout on the embedding output and the
    // residual branches (kernels/dropout.h): masks bit for bit the CPU's.
    void attention_naive_forward(T* out, T* p, const T* qkv, std::int64_t B, std::int64_t T_,
                                 int NH, int KVH, std::int64_t HD,
                                 const AttentionDropout<T>* dropout = nullptr) {
        k_->attention_naive_forward(out, p, qkv, B, T_, NH, KVH, HD, stream_, dropout);
    }
    void attention_naive_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* p,
                                  std::int64_t B, std::int64_t T_, int NH, int KVH,
                                  std::int64_t HD, const AttentionDropout<T>* dropout = nullptr) {
        k_->attention_naive_backward(dqkv, scratch, dout, qkv, p, B, T_, NH, KVH, HD, stream_,
                                     dropout);
    }
    void dropout_forward(T* out, std::uint8_t* mask, const T* inp, std::int64_t n, float p,
                         std::uint64_t seed) {
        k_->dropout_forward(out, mask, inp, n, p, seed, stream_);
    }
    void dropout_backward(T* dinp, const T* dout, const std::uint8_t* mask, std::int64_t n,
                          float p) {
        k_->dropout_backward(dinp, dout, mask, n, p, stream_);
    }
    // Flash attention's dropout (p and seed, a host value; nothing kept) is drawn in the kernels,
    // forward and backward, SIMT and tensor-core alike.
    void attention_flash_forward(T* out, float* lse, const T* qkv, std::int64_t B, std::int64_t T_,
                                 int NH, int KVH, std::int64_t HD,
                                 const AttentionDropout<T>* dropout = nullptr) {
        k_->attention_flash_forward(out, lse, qkv, B, T_, NH, KVH, HD, stream_, dropout);
    }
    void attention_flash_backward(T* dqkv, const T* dout, const T* out, const T* qkv,
                                  const float* lse, std::int64_t B, std::int64_t T_, int NH,
                                  int KVH, std::int64_t HD,
                                  const AttentionDropout<T>* dropout = nullptr) {
        k_->attention_flash_backward(dqkv, dout, out, qkv, lse, B, T_, NH, KVH, HD, stream_,
                                     dropout);
    }
    void gelu_forward(T* out, const T* inp, std::int64_t n) {
        k_->gelu_forward(out, inp, n, stream_);
    }
    void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n) {
        k_->gelu_backward(dinp, inp, dout, n, stream_);
    }
    void swiglu_forward(T* out, const T* inp, std::int64_t N, std::int64_t F) {
        k_->swiglu_forward(out, inp, N, F, stream_);
    }
    void swiglu_backward(T* dinp, const T* inp, const T* dout, std::int64_t N, std::int64_t F) {
        k_->swiglu_backward(dinp, inp, dout, N, F, stream_);
    }
    void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
        k_->residual_forward(out, a, b, n, stream_);
    }
    // Returns the mean loss over the M rows: losses (M) copied to the host (waits) and summed in
    // fp64 in row order.
    float head_cross_entropy(float* losses, T* dx, T* dw, const T* x, const T* w,
                             const std::int32_t* targets, std::int64_t M, std::int64_t C,
                             std::int64_t V, std::int64_t Vp, std::int64_t chunk, float dloss,
                             float* scratch) {
        k_->head_cross_entropy(losses, dx, dw, x, w, targets, M, C, V, Vp, chunk, dloss, scratch,
                               context(workspace_), stream_);
        host_losses_.resize(static_cast<std::size_t>(M));
        api_->copy_to_host(host_losses_.data(), losses, host_losses_.size() * sizeof(float),
                           stream_);
        double total = 0.0;
        for (float l : host_losses_)
            total += l;
        return static_cast<float>(total / static_cast<double>(M));
    }

private:
    static constexpr DType dtype() {
        if constexpr (std::is_same_v<T, float>)
            return DType::f32;
        else if constexpr (std::is_same_v<T, bf16_t>)
            return DType::bf16;
        else
            return DType::f16;
    }
    // The cuBLASLt workspace is the orchestration's matmul scratch, which lives as long as the
    // model; the cross-entropy's GEMMs reuse the one the forward's matmuls were given.
    cuda::MatmulContext context(float* workspace) const {
        cuda::MatmulContext c;
        c.handle = handle_;
        c.workspace = workspace;
        c.workspace_bytes = workspace != nullptr ? cuda::kMatmulWorkspaceBytes : 0;
        return c;
    }

    const CudaEngineApi* api_;
    const CudaKernelTable<T>* k_;
    CUstream_st* stream_;
    cublasLtContext* handle_;
    float* workspace_ = nullptr;
    Tensor losses_;
    std::vector<float> host_losses_;
};

}  // namespace napkin
