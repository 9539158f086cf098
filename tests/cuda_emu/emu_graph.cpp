// Stream capture and CUDA graphs on the emulator (emu_state.h): cudaStreamBeginCapture,
// cudaStreamEndCapture, cudaStreamIsCapturing, cudaGraphInstantiate(WithFlags), cudaGraphLaunch,
// cudaGraphGetNodes (the count), cudaGraphExecDestroy and cudaGraphDestroy. The emulator runs
// work when it is queued; on a capturing stream it records it instead (route/record, called by
// the kernel scheduler, the copies and sets, and cuBLASLt), and a graph launch runs the recorded
// work in the order it was recorded.
//
// As strict as the real runtime where that is cheap, so that a step the engine captures fails
// here as it would on a GPU: a capture-unsafe call (cudaMalloc, cudaFree, a synchronous copy, a
// synchronize of the capturing stream or of the device, a query of an event recorded in the
// capture) fails with cudaErrorStreamCaptureUnsupported and invalidates the capture, whose end
// then fails with cudaErrorStreamCaptureInvalidated; the legacy stream while a capture is under
// way is cudaErrorStreamCaptureImplicit; a capturing stream waiting for an event recorded outside
// the capture is cudaErrorStreamCaptureIsolation; a stream forked into the capture (it waited for
// an event recorded in it) must be joined back into the origin stream after its last work
// (cudaErrorStreamCaptureUnjoined otherwise), and the capture must end on its origin stream
// (cudaErrorStreamCaptureUnmatched). cudaStreamCaptureModeRelaxed allows the unsafe calls.
// Nodes have ids as CUPTI's (cuptiGetGraphNodeId): a captured node's is reported to CUPTI's
// subscriber inside the call that made it, instantiation clones each under a new id (reported
// too), and a launch runs each clone's work under its ids (emu_trace.h GraphNodeScope).
#include <cuda_runtime_api.h>

#include <cupti_runtime_cbid.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/emu_trace.h"

namespace napkin::emu {

namespace {

// A node: its handle (cudaGraphNode_t) points here, its id is CUPTI's (cupti_emu.cpp).
struct GraphNode : trace::GraphNodeInfo {
    Work work;
};
using Nodes = std::vector<std::shared_ptr<GraphNode>>;

struct Capture {
    cudaStream_t origin = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    bool invalidated = false;
    std::string why;  // the call that invalidated it
    Nodes nodes;
    std::map<cudaStream_t, std::uint64_t> work;    // nodes recorded per stream of the capture
    std::map<cudaStream_t, std::uint64_t> joined;  // per forked stream: how far the origin waited
};

struct CapturedEvent {
    std::shared_ptr<Capture> capture;
    cudaStream_t stream = nullptr;
    std::uint64_t seq = 0;  // the stream's node count at the record
};

struct Graph {
    Nodes nodes;
    std::uint32_t id = 0;  // CUPTI's graphId: an executable graph's is its launches' records'
};

std::mutex g_graph_mutex;
std::map<cudaStream_t, std::shared_ptr<Capture>> g_capturing;  // every stream in a capture
std::map<cudaEvent_t, CapturedEvent> g_captured_events;
std::set<Graph*> g_graphs;  // cudaGraph_t
std::set<Graph*> g_execs;   // cudaGraphExec_t
GraphStats g_graph_stats;
std::uint64_t g_next_node_id = 1;
std::uint32_t g_next_graph_id = 1;

cudaGraph_t graph_handle(Graph* g) {
    return reinterpret_cast<cudaGraph_t>(g);
}
cudaGraphExec_t exec_handle(Graph* g) {
    return reinterpret_cast<cudaGraphExec_t>(g);
}

cudaError_t graph_fail(cudaError_t e, const std::string& message) {
    std::fprintf(stderr, "napkin cuda-emu: %s\n", message.c_str());
    set_error(e, false, message);
    return e;
}

// Marks every strict capture under way as invalidated by `call` (under the lock); returns
// whether there was one.
bool invalidate_strict_locked(const char* call) {
    bool any = false;
    for (auto& [stream, c] : g_capturing) {
        if (c->mode == cudaStreamCaptureModeRelaxed) continue;
        any = true;
        if (!c->invalidated) {
            c->invalidated = true;
            c->why = call;
        }
    }
    return any;
}

}  // namespace

Route route(cudaStream_t stream, const char* call, cudaError_t* error) {
    std::string message;
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        if (g_capturing.empty()) return Route::run;
        if (stream == nullptr) {
            if (!invalidate_strict_locked(call)) return Route::run;
            *error = cudaErrorStreamCaptureImplicit;
            message = std::string(call) +
                      " on the legacy default stream while a stream captures (the capture is "
                      "invalidated)";
        } else {
            const auto it = g_capturing.find(stream);
            if (it == g_capturing.end()) return Route::run;
            if (!it->second->invalidated) return Route::record;
            *error = cudaErrorStreamCaptureInvalidated;
            message = std::string(call) + " on a stream whose capture was invalidated by " +
                      it->second->why;
        }
    }
    graph_fail(*error, message);
    return Route::refused;
}

// The node's creation is reported inside the call that queued the work, as CUPTI's
// GRAPHNODE_CREATED is (the capture's graph is made at its end here: the callback's is null).
void record(cudaStream_t stream, Work work) {
    auto node = std::make_shared<GraphNode>();
    node->work = std::move(work);
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        const std::shared_ptr<Capture>& c = g_capturing.at(stream);
        node->id = g_next_node_id++;
        c->nodes.push_back(node);
        ++c->work[stream];
    }
    trace::graph_node_created(nullptr, node.get());
}

cudaError_t unsafe_call(const char* call) {
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        if (!invalidate_strict_locked(call)) return cudaSuccess;
    }
    return graph_fail(cudaErrorStreamCaptureUnsupported,
                      std::string(call) + " while a stream captures (the capture is invalidated)");
}

cudaError_t unsafe_stream_call(cudaStream_t stream, const char* call) {
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        const auto it = g_capturing.find(stream);
        if (it == g_capturing.end()) return cudaSuccess;
        if (!it->second->invalidated) {
            it->second->invalidated = true;
            it->second->why = call;
        }
    }
    return graph_fail(cudaErrorStreamCaptureUnsupported,
                      std::string(call) + " of a capturing stream (the capture is invalidated)");
}

bool event_recorded(cudaEvent_t event, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    const auto it = stream != nullptr ? g_capturing.find(stream) : g_capturing.end();
    if (it == g_capturing.end()) {
        g_captured_events.erase(event);  // recorded for real: no longer the capture's
        return false;
    }
    g_captured_events[event] = {it->second, stream, it->second->work[stream]};
    return true;
}

cudaError_t unsafe_event_call(cudaEvent_t event, const char* call) {
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        const auto it = g_captured_events.find(event);
        if (it == g_captured_events.end()) return cudaSuccess;
        Capture& c = *it->second.capture;
        if (!c.invalidated) {
            c.invalidated = true;
            c.why = call;
        }
    }
    return graph_fail(
        cudaErrorStreamCaptureUnsupported,
        std::string(call) + " of an event recorded in a capture (the capture is invalidated)");
}

cudaError_t stream_waits_for(cudaStream_t stream, cudaEvent_t event) {
    std::string message;
    {
        std::lock_guard<std::mutex> lock(g_graph_mutex);
        const auto waiter = g_capturing.find(stream);
        const auto ev = g_captured_events.find(event);
        if (ev == g_captured_events.end()) {
            if (waiter == g_capturing.end()) return cudaSuccess;
            Capture& c = *waiter->second;
            if (!c.invalidated) {
                c.invalidated = true;
                c.why = "cudaStreamWaitEvent";
            }
            message =
                "cudaStreamWaitEvent: a capturing stream waits for an event recorded outside "
                "the capture (the capture is invalidated)";
        } else if (waiter == g_capturing.end()) {
            g_capturing[stream] = ev->second.capture;  // a fork: the stream joins the capture
            return cudaSuccess;
        } else if (waiter->second != ev->second.capture) {
            message = "cudaStreamWaitEvent between two captures";
        } else {
            Capture& c = *waiter->second;
            if (stream == c.origin) {
                std::uint64_t& joined = c.joined[ev->second.stream];
                joined = std::max(joined, ev->second.seq);
            }
            return cudaSuccess;
        }
    }
    return graph_fail(cudaErrorStreamCaptureIsolation, message);
}

void event_destroyed(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    g_captured_events.erase(event);
}

GraphStats graph_stats() {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    return g_graph_stats;
}

}  // namespace napkin::emu

using napkin::emu::g_graph_mutex;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    napkin::emu::trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000);
    if (stream == nullptr)
        return napkin::emu::graph_fail(cudaErrorStreamCaptureUnsupported,
                                       "cudaStreamBeginCapture of the legacy default stream");
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    if (napkin::emu::g_capturing.count(stream) != 0)
        return lock.unlock(),
               napkin::emu::graph_fail(cudaErrorIllegalState,
                                       "cudaStreamBeginCapture of a stream already capturing");
    auto c = std::make_shared<napkin::emu::Capture>();
    c->origin = stream;
    c->mode = mode;
    napkin::emu::g_capturing[stream] = std::move(c);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    *graph = nullptr;
    std::shared_ptr<napkin::emu::Capture> c;
    std::string message;
    cudaError_t error = cudaSuccess;
    {
        std::unique_lock<std::mutex> lock(g_graph_mutex);
        const auto it = napkin::emu::g_capturing.find(stream);
        if (it == napkin::emu::g_capturing.end())
            return lock.unlock(),
                   napkin::emu::graph_fail(cudaErrorIllegalState,
                                           "cudaStreamEndCapture of a stream not capturing");
        c = it->second;
        if (c->origin != stream) {
            c->invalidated = true;
            c->why = "cudaStreamEndCapture on a forked stream";
            return lock.unlock(),
                   napkin::emu::graph_fail(
                       cudaErrorStreamCaptureUnmatched,
                       "cudaStreamEndCapture on a stream forked into the capture, not its origin");
        }
        for (auto s = napkin::emu::g_capturing.begin(); s != napkin::emu::g_capturing.end();)
            s = s->second == c ? napkin::emu::g_capturing.erase(s) : std::next(s);
        for (auto e = napkin::emu::g_captured_events.begin();
             e != napkin::emu::g_captured_events.end();)
            e = e->second.capture == c ? napkin::emu::g_captured_events.erase(e) : std::next(e);
        if (c->invalidated) {
            error = cudaErrorStreamCaptureInvalidated;
            message = "cudaStreamEndCapture: the capture was invalidated by " + c->why;
        } else {
            for (const auto& [s, n] : c->work)
                if (s != stream && n > c->joined[s]) {
                    error = cudaErrorStreamCaptureUnjoined;
                    message =
                        "cudaStreamEndCapture: a stream forked into the capture has work after "
                        "its last join into the origin stream";
                }
        }
        if (error == cudaSuccess) {
            auto* g = new napkin::emu::Graph{std::move(c->nodes), napkin::emu::g_next_graph_id++};
            napkin::emu::g_graphs.insert(g);
            ++napkin::emu::g_graph_stats.captures;
            *graph = napkin::emu::graph_handle(g);
            return cudaSuccess;
        }
    }
    return napkin::emu::graph_fail(error, message);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    const auto it = napkin::emu::g_capturing.find(stream);
    *status = it == napkin::emu::g_capturing.end() ? cudaStreamCaptureStatusNone
              : it->second->invalidated            ? cudaStreamCaptureStatusInvalidated
                                                   : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                          unsigned long long /*flags*/) {
    napkin::emu::trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040);
    *exec = nullptr;
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    auto* g = reinterpret_cast<napkin::emu::Graph*>(graph);
    if (napkin::emu::g_graphs.count(g) == 0)
        return lock.unlock(),
               napkin::emu::graph_fail(cudaErrorInvalidValue,
                                       "cudaGraphInstantiate of a graph no capture made");
    // Every node cloned into the executable graph (the graph may be destroyed), each clone a
    // node id of its own, reported to CUPTI's subscriber once the lock is released.
    auto* e = new napkin::emu::Graph{{}, napkin::emu::g_next_graph_id++};
    for (const auto& node : g->nodes) {
        auto clone = std::make_shared<napkin::emu::GraphNode>();
        clone->id = napkin::emu::g_next_node_id++;
        clone->work = node->work;
        e->nodes.push_back(std::move(clone));
    }
    const napkin::emu::Nodes originals = g->nodes;
    napkin::emu::g_execs.insert(e);
    *exec = napkin::emu::exec_handle(e);
    lock.unlock();
    for (std::size_t i = 0; i < originals.size(); ++i)
        napkin::emu::trace::graph_node_cloned(graph, e->nodes[i].get(), originals[i].get(), *exec);
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
    return cudaGraphInstantiateWithFlags(exec, graph, flags);
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count) {
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    auto* g = reinterpret_cast<napkin::emu::Graph*>(graph);
    if (napkin::emu::g_graphs.count(g) == 0 || nodes != nullptr)
        return lock.unlock(),
               napkin::emu::graph_fail(cudaErrorInvalidValue,
                                       "cudaGraphGetNodes: the emulator counts the nodes of a "
                                       "graph a capture made (nodes must be null)");
    *count = g->nodes.size();
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    napkin::emu::trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
    call.returned_at(napkin::emu::trace::now());
    napkin::emu::Nodes nodes;
    std::uint32_t graph_id = 0;
    {
        std::unique_lock<std::mutex> lock(g_graph_mutex);
        auto* e = reinterpret_cast<napkin::emu::Graph*>(exec);
        if (napkin::emu::g_execs.count(e) == 0)
            return lock.unlock(),
                   napkin::emu::graph_fail(cudaErrorInvalidValue,
                                           "cudaGraphLaunch of a graph cudaGraphInstantiate did "
                                           "not make (or destroyed)");
        nodes = e->nodes;
        graph_id = e->id;
    }
    cudaError_t error = cudaSuccess;
    // Each node's work under its ids: its records carry them (graphId, graphNodeId).
    const auto run = [nodes, graph_id](std::uint32_t correlation) {
        {
            std::unique_lock<std::mutex> lock(g_graph_mutex);
            ++napkin::emu::g_graph_stats.launches;
            napkin::emu::g_graph_stats.nodes_run += nodes.size();
        }
        for (const auto& node : nodes) {
            napkin::emu::trace::GraphNodeScope scope(graph_id, node->id);
            node->work(correlation);
        }
    };
    switch (napkin::emu::route(stream, "cudaGraphLaunch", &error)) {
        case napkin::emu::Route::refused:
            return error;
        case napkin::emu::Route::record:  // a child graph of the capture
            napkin::emu::record(stream, run);
            return cudaSuccess;
        case napkin::emu::Route::run:
            break;
    }
    run(call.correlation());
    return cudaSuccess;  // a fault inside a node, as a kernel's, shows at the next sync
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    auto* e = reinterpret_cast<napkin::emu::Graph*>(exec);
    if (napkin::emu::g_execs.erase(e) == 0)
        return lock.unlock(),
               napkin::emu::graph_fail(cudaErrorInvalidValue,
                                       "cudaGraphExecDestroy of a graph it did not instantiate");
    delete e;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    std::unique_lock<std::mutex> lock(g_graph_mutex);
    auto* g = reinterpret_cast<napkin::emu::Graph*>(graph);
    if (napkin::emu::g_graphs.erase(g) == 0)
        return lock.unlock(),
               napkin::emu::graph_fail(cudaErrorInvalidValue,
                                       "cudaGraphDestroy of a graph no capture made");
    delete g;
    return cudaSuccess;
}

}  // extern "C"
