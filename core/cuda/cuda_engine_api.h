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
#include "core/cuda/cuda_graph.h"
#include "core/cuda/cupti_activity.h"
#include "core/cuda/nccl_ops.h"
#include "core/half.h"
#include "kernels/kernel_list.h"
#include "kernels/optimizer.h"
#include "kernels/step_scalars.h"
#include "kernels/zero.h"
#include "profiler/gpu_activity.h"

namespace napkin {

// The cuda:: kernels of one storage type T (float, bf16_t, f16_t), one pointer per line of
// kernels/kernel_list.h, each taking its argument struct and the launch context.
template <class T>
struct CudaKernelTable {
    // clang-format off
#define NAPKIN_CUDA_TABLE_ENTRY(name, Args) \
    void (*name)(const Args<T>&, const cuda::Launch&) = nullptr;
    NAPKIN_KERNELS(NAPKIN_CUDA_TABLE_ENTRY)
    NAPKIN_KERNELS_BY_HAND(NAPKIN_CUDA_TABLE_ENTRY)
#undef NAPKIN_CUDA_TABLE_ENTRY
    // clang-format on
};

// fp8-amp's kernels, over bf16 storage (NAPKIN_FP8_KERNELS).
struct CudaFp8KernelTable {
    // clang-format off
#define NAPKIN_CUDA_FP8_TABLE_ENTRY(member, name, Args) \
    void (*member)(const Args&, const cuda::Launch&) = nullptr;
    NAPKIN_FP8_KERNELS(NAPKIN_CUDA_FP8_TABLE_ENTRY)
#undef NAPKIN_CUDA_FP8_TABLE_ENTRY
    // clang-format on
};

inline constexpr int kNapkinCudaEngineApiVersion = 16;

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

    decltype(&cuda::optimizer_update) optimizer_update = nullptr;
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

    // ---- a step without host waits (kernels/step_scalars.h; docs/ENGINE.md) ----------------
    decltype(&cuda::loss_mean) loss_mean = nullptr;
    decltype(&cuda::optimizer_gate) optimizer_gate = nullptr;
    decltype(&cuda::step_schedule) step_schedule = nullptr;
    // Host to device, queued on `stream` without waiting for it: returns once host_src is
    // staged (the runtime copies pageable memory to its own staging first), so host_src may be
    // reused at once; the copy runs in stream order.
    void (*copy_to_device_queued)(void* dst, const void* host_src, std::size_t bytes,
                                  CUstream_st* stream) = nullptr;
    // ---- Paged memory (napkin train --paged-optimizer; core/cuda/device_memory.h) ----------
    // Managed memory preferred on the host, for an accounting allocator of its own; returned
    // with memory_destroy. prefetch moves a range to the current device or back, queued.
    RawMemory* (*paged_memory_create)() = nullptr;
    void (*prefetch)(const void* ptr, std::size_t bytes, bool to_device,
                     CUstream_st* stream) = nullptr;
    // ---- Batches on a copy stream (core/engine/cuda_device.cpp's CudaBatchUploads) ----------
    // Pinned host memory (core/cuda/device_memory.h), and a stream waiting for an event.
    void* (*pinned_allocate)(std::size_t bytes) = nullptr;
    void (*pinned_free)(void* ptr) noexcept = nullptr;
    decltype(&cuda::stream_wait_event) stream_wait_event = nullptr;
    // ---- CUDA graphs (core/cuda/cuda_graph.h; napkin train --cuda-graph) -------------------
    decltype(&cuda::graph_begin_capture) graph_begin_capture = nullptr;
    decltype(&cuda::graph_end_capture) graph_end_capture = nullptr;
    decltype(&cuda::graph_launch) graph_launch = nullptr;
    decltype(&cuda::graph_destroy) graph_destroy = nullptr;
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
