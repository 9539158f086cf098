// Fills the engine's table of the CUDA backend (core/cuda/cuda_engine_api.h): the cuda::
// kernels of kernels/cuda/ per storage type, and the few runtime calls the engine needs
// (device, stream, caching device memory, copies), and the CUPTI activity entries. Compiled by the
// host compiler into libnapkin_cuda.so; depends on nothing of napkin_core.
#include "core/cuda/cuda_engine_api.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include <cstdlib>

#if NAPKIN_ATTENTION_CANDIDATES
#include "bench/attention_fa2_candidates.h"
#endif
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_plugin.h"
#include "core/cuda/device_memory.h"

namespace napkin {

namespace {

// Each pointer is cuda::<name>, instantiated for T by the pointer's type.
template <class T>
CudaKernelTable<T> kernel_table() {
    CudaKernelTable<T> k;
    // clang-format off
#define NAPKIN_CUDA_TABLE_FILL(name, Args) k.name = &cuda::name;
    NAPKIN_KERNELS(NAPKIN_CUDA_TABLE_FILL)
    NAPKIN_KERNELS_BY_HAND(NAPKIN_CUDA_TABLE_FILL)
#undef NAPKIN_CUDA_TABLE_FILL
    // clang-format on
    return k;
}

// NAPKIN_ATTENTION_CANDIDATES set for a build without the candidates in its backend.
template <template <class> class Args>
[[noreturn]] void no_attention_candidates(const Args<bf16_t>&, const cuda::Launch&) {
    throw cuda::CudaError(
        "NAPKIN_ATTENTION_CANDIDATES: this build's CUDA backend has no attention candidates "
        "(configure with -DNAPKIN_ATTENTION_CANDIDATES=ON, as scripts/gpu_bundle.sh does)");
}

// The accounting allocator's raw memory on the device: the caching allocator over cudaMalloc.
class CachingDeviceMemory final : public RawMemory {
public:
    void* allocate(std::size_t bytes) override { return cache_.allocate(bytes); }
    void deallocate(void* ptr, std::size_t bytes) noexcept override {
        cache_.deallocate(ptr, bytes);
    }
    DeviceKind device() const override { return DeviceKind::cuda; }

private:
    cuda::CudaDeviceMemory backend_;
    CachingAllocator cache_{backend_};
};

void select_device(int index, char* name, std::size_t name_bytes, int* sm) {
    NAPKIN_CUDA_CHECK(cudaSetDevice(index));
    cudaDeviceProp prop{};
    NAPKIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    std::snprintf(name, name_bytes, "%s", prop.name);
    *sm = 10 * prop.major + prop.minor;
}

CudaFp8KernelTable fp8_kernel_table() {
    CudaFp8KernelTable k;
    // clang-format off
#define NAPKIN_CUDA_FP8_TABLE_FILL(member, name, Args) k.member = &cuda::name;
    NAPKIN_FP8_KERNELS(NAPKIN_CUDA_FP8_TABLE_FILL)
#undef NAPKIN_CUDA_FP8_TABLE_FILL
    // clang-format on
    return k;
}

CUstream_st* stream_create() {
    cudaStream_t s = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
}

void stream_destroy(CUstream_st* stream) noexcept {
    if (stream != nullptr) cudaStreamDestroy(stream);
}

void stream_synchronize(CUstream_st* stream) {
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

RawMemory* memory_create() {
    return new CachingDeviceMemory();
}
RawMemory* paged_memory_create() {
    return new cuda::ManagedMemory();
}
void memory_destroy(RawMemory* memory) noexcept {
    delete memory;
}

void copy_to_device(void* dst, const void* host_src, std::size_t bytes, CUstream_st* stream) {
    if (bytes == 0) return;
    NAPKIN_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_host(void* host_dst, const void* src, std::size_t bytes, CUstream_st* stream) {
    if (bytes == 0) return;
    NAPKIN_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_device_queued(void* dst, const void* host_src, std::size_t bytes,
                           CUstream_st* stream) {
    if (bytes == 0) return;
    NAPKIN_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
}

void memset_zero(void* dst, std::size_t bytes, CUstream_st* stream) {
    if (bytes == 0) return;
    NAPKIN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream));
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, CUstream_st* stream) {
    if (bytes == 0) return;
    NAPKIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void memory_info(std::uint64_t* free_bytes, std::uint64_t* total_bytes) {
    const cuda::DeviceMemoryInfo m = cuda::device_memory_info();
    *free_bytes = m.free_bytes;
    *total_bytes = m.total_bytes;
}

CudaEngineApi make_api() {
    CudaEngineApi a;
    a.f32 = kernel_table<float>();
    a.bf16 = kernel_table<bf16_t>();
    // The engine's flash attention on the candidates NAPKIN_ATTENTION_CANDIDATES names (checked
    // at the first call), for a GPU session's run on the sweep's fastest; a build without them
    // refuses the variable at that call rather than ignore it.
    if (std::getenv("NAPKIN_ATTENTION_CANDIDATES") != nullptr) {
#if NAPKIN_ATTENTION_CANDIDATES
        a.bf16.attention_flash_forward = &bench::selected_flash_forward;
        a.bf16.attention_flash_backward = &bench::selected_flash_backward;
#else
        a.bf16.attention_flash_forward = &no_attention_candidates<AttentionFlashForwardArgs>;
        a.bf16.attention_flash_backward = &no_attention_candidates<AttentionFlashBackwardArgs>;
#endif
    }
    a.f16 = kernel_table<f16_t>();
    a.fp8 = fp8_kernel_table();
    a.select_device = &select_device;
    a.stream_create = &stream_create;
    a.stream_destroy = &stream_destroy;
    a.stream_synchronize = &stream_synchronize;
    a.memory_create = &memory_create;
    a.memory_destroy = &memory_destroy;
    a.copy_to_device = &copy_to_device;
    a.copy_to_host = &copy_to_host;
    a.memset_zero = &memset_zero;
    a.zero_spans = &cuda::zero;
    a.copy_on_device = &copy_on_device;
    a.memory_info = &memory_info;
    a.matmul_create_handle = &cuda::matmul_create_handle;
    a.matmul_destroy_handle = &cuda::matmul_destroy_handle;
    a.optimizer_update = &cuda::optimizer_update;
    a.grad_sum_squares = &cuda::grad_sum_squares;
    a.grad_unscale_check = &cuda::grad_unscale_check;
    a.nccl_version = &cuda::nccl_version;
    a.nccl_unique_id = &cuda::nccl_unique_id;
    a.nccl_set_device = &cuda::nccl_set_device;
    a.nccl_init = &cuda::nccl_init;
    a.nccl_destroy = &cuda::nccl_destroy;
    a.nccl_abort = &cuda::nccl_abort;
    a.nccl_async_error = &cuda::nccl_async_error;
    a.nccl_all_reduce = &cuda::nccl_all_reduce;
    a.nccl_reduce_scatter = &cuda::nccl_reduce_scatter;
    a.nccl_all_gather = &cuda::nccl_all_gather;
    a.nccl_broadcast = &cuda::nccl_broadcast;
    a.event_record = &cuda::event_record;
    a.event_done = &cuda::event_done;
    a.event_wait = &cuda::event_wait;
    a.event_elapsed_ms = &cuda::event_elapsed_ms;
    a.event_destroy = &cuda::event_destroy;
    // GPU activity (CUPTI)
    a.activity_enable = &cuda::activity_enable;
    a.activity_disable = &cuda::activity_disable;
    a.activity_push_external = &cuda::activity_push_external;
    a.activity_pop_external = &cuda::activity_pop_external;
    a.activity_timestamp = &cuda::activity_timestamp;
    a.activity_flush = &cuda::activity_flush;
    // a step without host waits
    a.loss_mean = &cuda::loss_mean;
    a.optimizer_gate = &cuda::optimizer_gate;
    a.step_schedule = &cuda::step_schedule;
    a.copy_to_device_queued = &copy_to_device_queued;
    // Paged memory
    a.paged_memory_create = &paged_memory_create;
    a.prefetch = &cuda::prefetch;
    // Batches on a copy stream
    a.pinned_allocate = &cuda::pinned_allocate;
    a.pinned_free = &cuda::pinned_free;
    a.stream_wait_event = &cuda::stream_wait_event;
    // CUDA graphs
    a.graph_begin_capture = &cuda::graph_begin_capture;
    a.graph_end_capture = &cuda::graph_end_capture;
    a.graph_launch = &cuda::graph_launch;
    a.graph_destroy = &cuda::graph_destroy;
    return a;
}

}  // namespace

}  // namespace napkin

extern "C" const napkin::CudaEngineApi* napkin_cuda_engine_api() {
    static const napkin::CudaEngineApi api = napkin::make_api();
    return &api;
}
