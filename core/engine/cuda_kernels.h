// The engine's CUDA backend: the kernel calls of core/engine/gpt_impl.h, with the CPU backend's
// names and argument structs (core/engine/cpu_kernels.h), forwarded to napkin::cuda through the
// plugin's table (core/cuda/cuda_engine_api.h) with the engine's stream and cuBLASLt handle, one
// wrapper per line of kernels/kernel_list.h. What differs from the CPU is adapted here:
//   head_cross_entropy  per-row losses stay on the device; loss_mean (kernels/step_scalars.h)
//                       takes their mean into the step's scalars on the device; the host reads
//                       the mean at once (a synchronization per micro-batch) unless the loss is
//                       deferred (defer_loss: the trainer reads the step's sum once, late)
//   check_tokens        a no-op: tokens are device memory; the trainer checks the token
//                       source's vocabulary, and the loss of an out-of-range target is NaN
//   store_nf4, load_nf4 NF4 is quantized and, for reading back, dequantized on the host
// Every pointer is device memory except where named host. Shapes as in kernels/<op>.h.
// Compiled in every build (no CUDA header): only running it needs the plugin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
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
#include "kernels/step_scalars.h"

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
        : api_(&api), k_(&cuda_kernel_table<T>(api)), stream_(stream), launch_{stream, handle} {}

    // The per-row losses (N) on the device and the step's scalars: the buffer plan's loss.rows
    // and step.scalars, temporaries.
    void bind_losses(Tensor rows, Tensor scalars, std::int64_t N) {
        NAPKIN_ASSERT(rows.numel() == N, "loss.rows: " << rows.numel() << " rows for " << N);
        NAPKIN_ASSERT(scalars.bytes() >= sizeof(StepScalars), "step.scalars: " << scalars.bytes());
        losses_ = std::move(rows);
        scalars_ = std::move(scalars);
        api_->memset_zero(scalars_.raw(), scalars_.bytes(), stream_);
    }
    float* losses() { return losses_.data<float>(); }
    StepScalars* step_scalars() { return static_cast<StepScalars*>(scalars_.raw()); }
    // On: head_cross_entropy returns NaN and leaves the mean in step_scalars() only.
    void defer_loss(bool on) { defer_loss_ = on; }

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
        cpu::nf4_dequantize<float>({out, host_codes.data(), host_state.data(), n});
    }
    void copy_from_host(void* dst, const void* src, std::size_t bytes) {
        api_->copy_to_device(dst, src, bytes, stream_);
    }
    // Waits for the stream's work: the anomaly check's one read per micro-batch.
    void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
        api_->copy_to_host(dst, src, bytes, stream_);
    }
    void check_tokens(const std::int32_t*, std::int64_t, std::int64_t) const {}

    // ---- kernels: k.<name>(args) is the plugin's cuda::<name>(args, launch), one per line of
    // kernels/kernel_list.h, on the engine's stream with its cuBLASLt handle.
    // clang-format off
#define NAPKIN_CUDA_KERNEL(name, Args) \
    void name(const Args<T>& a) { k_->name(a, launch_); }
    NAPKIN_KERNELS(NAPKIN_CUDA_KERNEL)
#undef NAPKIN_CUDA_KERNEL
#define NAPKIN_CUDA_FP8_KERNEL(member, name, Args) \
    void name(const Args& a) { api_->fp8.member(a, launch_); }
    NAPKIN_FP8_KERNELS(NAPKIN_CUDA_FP8_KERNEL)
#undef NAPKIN_CUDA_FP8_KERNEL
    // clang-format on
    // The mean loss over the M rows, their fp64 row-order sum (loss_mean, on the device, also
    // added to the step's loss_sum): read back (waits), or NaN when the loss is deferred.
    float head_cross_entropy(const HeadCrossEntropyArgs<T>& a) {
        k_->head_cross_entropy(a, launch_);
        api_->loss_mean(step_scalars(), a.losses, a.M, stream_);
        if (defer_loss_) return std::numeric_limits<float>::quiet_NaN();
        float mean = 0.0f;
        api_->copy_to_host(&mean, &step_scalars()->loss_mean, sizeof mean, stream_);
        return mean;
    }

private:
    const CudaEngineApi* api_;
    const CudaKernelTable<T>* k_;
    CUstream_st* stream_;
    cuda::Launch launch_;
    Tensor losses_, scalars_;
    bool defer_loss_ = false;
};

}  // namespace napkin
