// What the emulated runtime tells the emulated CUPTI (cupti_emu.cpp): each runtime call and the
// device work it caused, with host-clock timestamps, so that core/cuda/cupti_activity.cpp reads
// the same kinds of activity records from the emulator as from a GPU. The emulator runs the work
// inside the call that queued it; an asynchronous call's record ends where its work starts (as
// on a GPU, where the launch returns before the kernel runs), a synchronous one's spans it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace napkin::emu::trace {

// The clock of every timestamp: nanoseconds, what cuptiGetTimestamp returns.
std::uint64_t now();

// One runtime API call being traced (cbid: CUPTI_RUNTIME_TRACE_CBID_*): made when the call
// starts, its RUNTIME record written when it ends; correlation() links the device work it
// causes to it, as CUPTI's correlation ids do.
class ApiCall {
public:
    explicit ApiCall(unsigned cbid);
    ~ApiCall();
    ApiCall(const ApiCall&) = delete;
    ApiCall& operator=(const ApiCall&) = delete;
    std::uint32_t correlation() const { return correlation_; }
    // An asynchronous call: its record ends at `ns` (when its work starts), not at destruction.
    void returned_at(std::uint64_t ns) { end_ = ns; }

private:
    unsigned cbid_;
    std::uint32_t correlation_;
    std::uint64_t start_;
    std::uint64_t end_ = 0;  // 0: when destroyed
};

// Device work, [start, end] on the host clock, on `stream` (null: the legacy default stream).
void kernel(std::uint32_t correlation, const char* name, dim3 grid, dim3 block,
            std::size_t dynamic_smem, cudaStream_t stream, std::uint64_t start, std::uint64_t end);
void memcpy(std::uint32_t correlation, cudaMemcpyKind kind, std::size_t bytes, cudaStream_t stream,
            std::uint64_t start, std::uint64_t end);
void memset(std::uint32_t correlation, int value, std::size_t bytes, cudaStream_t stream,
            std::uint64_t start, std::uint64_t end);
// A host wait: type is a CUpti_ActivitySynchronizationType; stream or event as it names one.
void synchronize(std::uint32_t correlation, int type, cudaStream_t stream, cudaEvent_t event,
                 std::uint64_t start, std::uint64_t end);

// CUDA graphs. A graph node's handle (cudaGraphNode_t) points at its GraphNodeInfo, whose id is
// what cuptiGetGraphNodeId returns: unique in the process, the clones instantiation makes
// included. While a graph launch runs a node's work on this thread (GraphNodeScope), the kernel,
// memcpy and memset records of that work carry the executable graph's id and the node's, as
// CUpti_ActivityKernel10's graphId and graphNodeId do on a GPU; 0 outside a launch.
struct GraphNodeInfo {
    std::uint64_t id = 0;
};

class GraphNodeScope {
public:
    GraphNodeScope(std::uint32_t graph_id, std::uint64_t node_id);
    ~GraphNodeScope();
    GraphNodeScope(const GraphNodeScope&) = delete;
    GraphNodeScope& operator=(const GraphNodeScope&) = delete;
};

// The resource callbacks of a CUPTI subscriber (cuptiSubscribe, cuptiEnableCallback) for graph
// nodes, each called where the runtime calls it, with no emulator lock held:
// GRAPHNODE_CREATED inside the call that made the node (a captured launch, copy or set), and
// GRAPHNODE_CLONED for each node cudaGraphInstantiate copies into the executable graph.
void graph_node_created(cudaGraph_t graph, GraphNodeInfo* node);
void graph_node_cloned(cudaGraph_t graph, GraphNodeInfo* node, GraphNodeInfo* original,
                       cudaGraphExec_t exec);

}  // namespace napkin::emu::trace
