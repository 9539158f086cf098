// CUDA events through the plugin's table (core/cuda/cuda_engine_api.h), for napkin code that
// includes no CUDA header: the completion of a collective started on NCCL's stream
// (core/comm/comm_nccl.cpp), the batch copies' stream handing each batch to the engine's
// (core/engine/cuda_device.cpp), and the device's own time of a training step (two timing events
// on the engine's stream, core/engine/cuda_device.cpp). Failures throw cuda::CudaError.
#pragma once

struct CUstream_st;

namespace napkin::cuda {

struct CudaEvent;  // cudaEvent_t's struct, opaque here

// Creates an event and records it on `stream` at once: it completes when everything queued on
// the stream before it has run. `timing`: the event carries a device timestamp (else it is
// created with cudaEventDisableTiming, cheaper).
CudaEvent* event_record(CUstream_st* stream, bool timing);
bool event_done(CudaEvent* event);  // cudaEventQuery, without blocking
void event_wait(CudaEvent* event);  // cudaEventSynchronize
// Milliseconds between two completed timing events (cudaEventElapsedTime, ~0.5 us resolution).
float event_elapsed_ms(CudaEvent* start, CudaEvent* end);
void event_destroy(CudaEvent* event) noexcept;
// Work queued on `stream` after this call waits until `event` completes (cudaStreamWaitEvent;
// the event's state now: recording it again later does not change the wait). The event may be
// destroyed at once.
void stream_wait_event(CUstream_st* stream, CudaEvent* event);

}  // namespace napkin::cuda
