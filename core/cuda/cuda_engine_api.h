// The training engine's view of libnapkin_cuda.so: one table of function pointers, filled in
// the plugin (core/cuda/cuda_engine_api.cpp) and read by the engine's CUDA backend
// (core/engine/cuda_kernels.h, core/engine/cuda_device.cpp) through the extern "C" entry
// napkin_cuda_engine_api (core/cuda/cuda_plugin.h).
//
// Why a table and not a Gpt made inside the plugin: the orchestration (core/engine/gpt_impl.h)
// needs napkin_core and napkin_profiler (the accounting allocator, the op plan, host ranges);
// the plugin must resolve alone (docs/CUDA.md: `nm -u libnapkin_cuda.so | grep napkin` is
// empty), so a Gpt inside it would carry a second copy of both libraries and of their state.
// Instead the one orchestration lives in napkin_engine, compiled in every build, and only the
// kernels cross the boundary.
//
// The pointers have C++ signatures (napkin's own types, templates instantiated in the plugin):
// both sides are built by the same compiler against the same headers and STL in one CMake
// build, which the version and size fields check at load time. Every function may throw
// napkin::cuda::CudaError (a std::runtime_error) or napkin::InternalError; exceptions cross
// the boundary like any C++ call in one process.
//
// Pointers are device memory unless named host; work is queued on the stream argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/allocator.h"
#include "core/cuda/cuda_events.h"
#include "core/cuda/cupti_activity.h"
#include "core/cuda/nccl_ops.h"
#include "core/half.h"
#include "kernels/accumulate.h"
#include "kernels/zero.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/nf4.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"
#include "kernels/residual.h"
#include "kernels/rope.h"
#include "profiler/gpu_activity.h"

namespace napkin {

// The cuda:: kernels of one storage type T (float, bf16_t, f16_t), named as in kernels/<op>.h.
template <class T>
struct CudaKernelTable {
    decltype(&cuda::embedding_forward<T>) embedding_forward = nullptr;
    decltype(&cuda::embedding_backward<T>) embedding_backward = nullptr;
    decltype(&cuda::layernorm_forward<T>) layernorm_forward = nullptr;
    decltype(&cuda::layernorm_backward<T>) layernorm_backward = nullptr;
    decltype(&cuda::rmsnorm_forward<T>) rmsnorm_forward = nullptr;
    decltype(&cuda::rmsnorm_backward<T>) rmsnorm_backward = nullptr;
    decltype(&cuda::matmul_forward<T>) matmul_forward = nullptr;
    decltype(&cuda::matmul_backward<T>) matmul_backward = nullptr;
    decltype(&cuda::rope_forward<T>) rope_forward = nullptr;
    decltype(&cuda::rope_backward<T>) rope_backward = nullptr;
    // Attention, naive and flash, takes its optional dropout (AttentionDropout, null: none) last.
    decltype(&cuda::attention_naive_forward<T>) attention_naive_forward = nullptr;
    decltype(&cuda::attention_naive_backward<T>) attention_naive_backward = nullptr;
    decltype(&cuda::attention_flash_forward<T>) attention_flash_forward = nullptr;
    decltype(&cuda::attention_flash_backward<T>) attention_flash_backward = nullptr;
    decltype(&cuda::gelu_forward<T>) gelu_forward = nullptr;
    decltype(&cuda::gelu_backward<T>) gelu_backward = nullptr;
    decltype(&cuda::swiglu_forward<T>) swiglu_forward = nullptr;
    decltype(&cuda::swiglu_backward<T>) swiglu_backward = nullptr;
    decltype(&cuda::residual_forward<T>) residual_forward = nullptr;
    decltype(&cuda::residual_backward<T>) residual_backward = nullptr;
    decltype(&cuda::head_cross_entropy<T>) head_cross_entropy = nullptr;
    decltype(&cuda::accumulate<T>) accumulate = nullptr;  // ZeRO's gradient-chunk sum
    // LoRA / QLoRA fine-tuning: the adapters (kernels/lora.h) and the frozen NF4 weights'
    // dequantization (kernels/nf4.h; quantized on the host).
    decltype(&cuda::lora_forward<T>) lora_forward = nullptr;
    decltype(&cuda::lora_backward<T>) lora_backward = nullptr;
    decltype(&cuda::nf4_dequantize<T>) nf4_dequantize = nullptr;
    // GPT-2's dropout on the embedding output and the residual branches (kernels/dropout.h).
    decltype(&cuda::dropout_forward<T>) dropout_forward = nullptr;
    decltype(&cuda::dropout_backward<T>) dropout_backward = nullptr;
};

// fp8-amp's kernels, over bf16 storage: kernels/quantize.h and the fp8 overloads of
// kernels/matmul.h (overloads, so their pointer types are spelled out).
struct CudaFp8KernelTable {
    decltype(&cuda::quantize<f8e4m3_t, bf16_t>) quantize_e4m3 = nullptr;
    decltype(&cuda::quantize<f8e5m2_t, bf16_t>) quantize_e5m2 = nullptr;
    decltype(&cuda::dequantize<bf16_t, f8e4m3_t>) dequantize_e4m3 = nullptr;
    void (*matmul_forward)(bf16_t*, const f8e4m3_t*, const float*, const f8e4m3_t*, const float*,
                           const bf16_t*, std::int64_t, std::int64_t, std::int64_t,
                           const cuda::MatmulContext&, CUstream_st*) = nullptr;
    void (*matmul_backward)(bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const f8e5m2_t*, const float*,
                            const f8e4m3_t*, const float*, const f8e4m3_t*, const float*,
                            std::int64_t, std::int64_t, std::int64_t, void*,
                            const cuda::MatmulContext&, CUstream_st*) = nullptr;
};

inline constexpr int kNapkinCudaEngineApiVersion = 11;

struct CudaEngineApi {
    int version = kNapkinCudaEngineApiVersion;
    std::size_t size = sizeof(CudaEngineApi);  // a stale plugin from another build differs

    CudaKernelTable<float> f32;
    CudaKernelTable<bf16_t> bf16;
    CudaKernelTable<f16_t> f16;
    CudaFp8KernelTable fp8;

    // Device `index` made current (a data-parallel rank's local rank, else 0); its name (host
    // buffer of name_bytes) and compute capability (host, 10 major + minor: 90 for sm_90).
    // Throws CudaError.
    void (*select_device)(int index, char* name, std::size_t name_bytes, int* sm) = nullptr;
    CUstream_st* (*stream_create)() = nullptr;  // a non-blocking stream
    void (*stream_destroy)(CUstream_st* stream) noexcept = nullptr;
    void (*stream_synchronize)(CUstream_st* stream) = nullptr;
    // The caching allocator over cudaMalloc (core/cuda/caching_allocator.h), for the accounting
    // allocator to sit on. memory_destroy returns its cached blocks.
    RawMemory* (*memory_create)() = nullptr;
    void (*memory_destroy)(RawMemory* memory) noexcept = nullptr;
    // Copies queued on `stream`; both wait for the copy (and so for the work queued before it)
    // before returning, so the host buffer can be reused or read at once.
    void (*copy_to_device)(void* dst, const void* host_src, std::size_t bytes,
                           CUstream_st* stream) = nullptr;
    void (*copy_to_host)(void* host_dst, const void* src, std::size_t bytes,
                         CUstream_st* stream) = nullptr;
    void (*memset_zero)(void* dst, std::size_t bytes,
                        CUstream_st* stream) = nullptr;  // queued only
    decltype(&cuda::zero) zero_spans = nullptr;  // many buffers zeroed in few launches, queued
    // Device to device, queued only (the ZeRO engine's copies into and out of shards).
    void (*copy_on_device)(void* dst, const void* src, std::size_t bytes,
                           CUstream_st* stream) = nullptr;
    // cudaMemGetInfo on the current device (host outputs), checked.
    void (*memory_info)(std::uint64_t* free_bytes, std::uint64_t* total_bytes) = nullptr;

    decltype(&cuda::matmul_create_handle) matmul_create_handle = nullptr;
    decltype(&cuda::matmul_destroy_handle) matmul_destroy_handle = nullptr;
    decltype(&cuda::head_cross_entropy_scratch_bytes) head_cross_entropy_scratch_bytes = nullptr;

    decltype(&cuda::optimizer_update) optimizer_update = nullptr;
    decltype(&cuda::grad_sum_squares_scratch_bytes) grad_sum_squares_scratch_bytes = nullptr;
    decltype(&cuda::grad_sum_squares) grad_sum_squares = nullptr;
    decltype(&cuda::grad_unscale_check) grad_unscale_check = nullptr;

    // NCCL, for the data-parallel communicator (core/comm/comm_nccl.h; core/cuda/nccl_ops.h).
    decltype(&cuda::nccl_version) nccl_version = nullptr;
    decltype(&cuda::nccl_unique_id) nccl_unique_id = nullptr;
    decltype(&cuda::nccl_set_device) nccl_set_device = nullptr;
    decltype(&cuda::nccl_init) nccl_init = nullptr;
    decltype(&cuda::nccl_destroy) nccl_destroy = nullptr;
    decltype(&cuda::nccl_abort) nccl_abort = nullptr;
    decltype(&cuda::nccl_async_error) nccl_async_error = nullptr;
    decltype(&cuda::nccl_all_reduce) nccl_all_reduce = nullptr;
    decltype(&cuda::nccl_reduce_scatter) nccl_reduce_scatter = nullptr;
    decltype(&cuda::nccl_all_gather) nccl_all_gather = nullptr;
    decltype(&cuda::nccl_broadcast) nccl_broadcast = nullptr;
    // CUDA events (core/cuda/cuda_events.h): started collectives' completion, step timing.
    decltype(&cuda::event_record) event_record = nullptr;
    decltype(&cuda::event_done) event_done = nullptr;
    decltype(&cuda::event_wait) event_wait = nullptr;
    decltype(&cuda::event_elapsed_ms) event_elapsed_ms = nullptr;
    decltype(&cuda::event_destroy) event_destroy = nullptr;

    // ---- GPU activity (CUPTI) for the profiler: core/cuda/cupti_activity.h ----------------
    // Plain records (profiler/gpu_activity.h) come back; no CUPTI type crosses. napkin's side,
    // the translation into trace events, is profiler/cupti_collector.h. All noexcept: failures
    // are counted in the stats, never thrown.
    decltype(&cuda::activity_enable) activity_enable = nullptr;
    decltype(&cuda::activity_disable) activity_disable = nullptr;
    decltype(&cuda::activity_push_external) activity_push_external = nullptr;
    decltype(&cuda::activity_pop_external) activity_pop_external = nullptr;
    decltype(&cuda::activity_timestamp) activity_timestamp = nullptr;
    decltype(&cuda::activity_flush) activity_flush = nullptr;
};

// The table for storage type T.
template <class T>
const CudaKernelTable<T>& cuda_kernel_table(const CudaEngineApi& api) {
    if constexpr (std::is_same_v<T, float>)
        return api.f32;
    else if constexpr (std::is_same_v<T, bf16_t>)
        return api.bf16;
    else
        return api.f16;
}

}  // namespace napkin
