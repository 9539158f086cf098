// CUDA graphs through the plugin's table (core/cuda/cuda_engine_api.h), for napkin code that
// includes no CUDA header: the training step's micro-batches captured once on the engine's
// stream and launched as one graph each later (core/engine/cuda_device.cpp; docs/CUDA.md "CUDA
// graphs"). Failures throw cuda::CudaError.
#pragma once

struct CUstream_st;

namespace napkin::cuda {

struct CudaGraph;  // cudaGraphExec_t's struct, opaque here

// Starts capturing `stream` in global mode: until graph_end_capture, work queued on it is
// recorded, not run, and a capture-unsafe call anywhere in the process (cudaMalloc, a
// synchronization, a query of an event recorded in the capture) fails and invalidates it.
void graph_begin_capture(CUstream_st* stream);
// Ends the capture and instantiates it (the plain graph is destroyed at once): the graph to
// launch. An invalidated capture throws, naming the runtime's error.
CudaGraph* graph_end_capture(CUstream_st* stream);
// Queues the graph's work on `stream`, in stream order with what is queued around it.
void graph_launch(CudaGraph* graph, CUstream_st* stream);
void graph_destroy(CudaGraph* graph) noexcept;  // null: nothing

}  // namespace napkin::cuda
