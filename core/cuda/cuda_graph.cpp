// CUDA graphs behind core/cuda/cuda_graph.h, in libnapkin_cuda.so.
#include "core/cuda/cuda_graph.h"

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"

namespace napkin::cuda {

namespace {

cudaGraphExec_t handle(CudaGraph* g) {
    return reinterpret_cast<cudaGraphExec_t>(g);
}

}  // namespace

void graph_begin_capture(CUstream_st* stream) {
    NAPKIN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
}

CudaGraph* graph_end_capture(CUstream_st* stream) {
    cudaGraph_t graph = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph holds what it needs
    NAPKIN_CUDA_CHECK(rc);
    return reinterpret_cast<CudaGraph*>(exec);
}

void graph_launch(CudaGraph* graph, CUstream_st* stream) {
    NAPKIN_CUDA_CHECK(cudaGraphLaunch(handle(graph), stream));
}

void graph_destroy(CudaGraph* graph) noexcept {
    if (graph != nullptr) cudaGraphExecDestroy(handle(graph));
}

}  // namespace napkin::cuda
