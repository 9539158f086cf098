// CUDA events behind core/cuda/cuda_events.h, in libnapkin_cuda.so.
#include "core/cuda/cuda_events.h"

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"

namespace napkin::cuda {

namespace {

cudaEvent_t handle(CudaEvent* e) {
    return reinterpret_cast<cudaEvent_t>(e);
}

}  // namespace

CudaEvent* event_record(CUstream_st* stream, bool timing) {
    cudaEvent_t e = nullptr;
    NAPKIN_CUDA_CHECK(
        cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    const cudaError_t rc = cudaEventRecord(e, stream);
    if (rc != cudaSuccess) cudaEventDestroy(e);
    NAPKIN_CUDA_CHECK(rc);
    return reinterpret_cast<CudaEvent*>(e);
}

bool event_done(CudaEvent* event) {
    const cudaError_t rc = cudaEventQuery(handle(event));
    if (rc == cudaErrorNotReady) {
        cudaGetLastError();  // "not yet" is not an error: do not leave it for the next check
        return false;
    }
    NAPKIN_CUDA_CHECK(rc);
    return true;
}

void event_wait(CudaEvent* event) {
    NAPKIN_CUDA_CHECK(cudaEventSynchronize(handle(event)));
}

float event_elapsed_ms(CudaEvent* start, CudaEvent* end) {
    float ms = 0;
    NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&ms, handle(start), handle(end)));
    return ms;
}

void event_destroy(CudaEvent* event) noexcept {
    if (event != nullptr) cudaEventDestroy(handle(event));
}

void stream_wait_event(CUstream_st* stream, CudaEvent* event) {
    NAPKIN_CUDA_CHECK(cudaStreamWaitEvent(stream, handle(event), 0));
}

}  // namespace napkin::cuda
