#include "core/cuda/cupti_activity.h"

#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace napkin::cuda {

namespace {

using profiler::GpuActivity;
using profiler::GpuActivityKind;

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER,
                                         CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// The process's one collection (CUPTI's callbacks are plain C functions).
struct State {
    std::atomic<bool> enabled{false};
    std::atomic<std::uint64_t> records{0}, dropped{0}, refused{0}, failures{0};
    std::atomic<std::size_t> buffers_out{0};
    std::atomic<bool> warned{false};
    std::mutex mutex;                  // guards pending and node_external
    std::vector<GpuActivity> pending;  // parsed on CUPTI's thread, taken by activity_flush
    // CUDA graphs: the engine's external id of each node made under one (CUPTI's node ids,
    // unique in the process), and of the nodes instantiation cloned from them.
    std::unordered_map<std::uint64_t, std::uint64_t> node_external;
    CUpti_SubscriberHandle subscriber = nullptr;  // the resource callbacks' (graph nodes)
};
State g_state;

// The external ids this thread has pushed (CUPTI keeps its own stack and shows it to no
// callback): the one on top is the engine's call that a graph node made now belongs to.
thread_local std::vector<std::uint64_t> t_external;

// A failed CUPTI call: warn once, count, go on.
bool check(CUptiResult r, const char* call) noexcept {
    if (r == CUPTI_SUCCESS) return true;
    g_state.failures.fetch_add(1);
    if (!g_state.warned.exchange(true)) {
        const char* msg = nullptr;
        cuptiGetResultString(r, &msg);
        std::fprintf(stderr, "napkin: profiler: %s failed (%s); GPU activity may be incomplete\n",
                     call, msg != nullptr ? msg : "unknown CUPTI error");
    }
    return false;
}

const char* memcpy_name(std::uint8_t kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return "memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return "memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return "memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
            return "memcpy HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return "memcpy PtoP";
        default:
            return "memcpy";
    }
}

// One CUPTI record as plain data; false for kinds the trace does not show.
bool convert(const CUpti_Activity* record, GpuActivity& a) {
    switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
            a.kind = GpuActivityKind::kernel;
            a.graph_id = k->graphId;
            a.graph_node_id = k->graphNodeId;
            a.name = k->name != nullptr ? k->name : "kernel";
            a.start_ns = k->start;
            a.end_ns = k->end;
            a.correlation_id = k->correlationId;
            a.device = k->deviceId;
            a.stream = k->streamId;
            a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
            a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
            a.shared_bytes = k->staticSharedMemory + k->dynamicSharedMemory;
            a.registers = k->registersPerThread;
            return true;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
            a.kind = GpuActivityKind::memcpy;
            a.name = memcpy_name(m->copyKind);
            a.graph_id = m->graphId;
            a.graph_node_id = m->graphNodeId;
            a.start_ns = m->start;
            a.end_ns = m->end;
            // correlationId is the driver call's; the runtime call (cudaMemcpyAsync) has its own.
            a.correlation_id =
                m->runtimeCorrelationId != 0 ? m->runtimeCorrelationId : m->correlationId;
            a.device = m->deviceId;
            a.stream = m->streamId;
            a.bytes = m->bytes;
            return true;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
            a.kind = GpuActivityKind::memset;
            a.name = "memset";
            a.graph_id = m->graphId;
            a.graph_node_id = m->graphNodeId;
            a.start_ns = m->start;
            a.end_ns = m->end;
            a.correlation_id = m->correlationId;
            a.device = m->deviceId;
            a.stream = m->streamId;
            a.bytes = m->bytes;
            return true;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
            const bool runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
            a.kind = runtime ? GpuActivityKind::runtime : GpuActivityKind::driver;
            const char* name = nullptr;
            cuptiGetCallbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                                 api->cbid, &name);
            a.name = name != nullptr ? name : (runtime ? "cuda runtime call" : "cuda driver call");
            // Of the driver API only what launches work (cuBLASLt's cuLaunchKernel(Ex)); the
            // runtime's own driver calls and cuBLAS's bookkeeping would bury the track.
            if (!runtime && a.name.rfind("cuLaunch", 0) != 0 && a.name.rfind("cuMemcpy", 0) != 0 &&
                a.name.rfind("cuMemset", 0) != 0) {
                return false;
            }
            a.start_ns = api->start;
            a.end_ns = api->end;
            a.correlation_id = api->correlationId;
            a.host_thread = api->threadId;
            return true;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
            const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
            a.kind = GpuActivityKind::synchronization;
            // A stream waiting for an event (cudaStreamWaitEvent) holds the device, not the host.
            a.name = s->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT
                         ? "stream wait event"
                         : "synchronize";
            a.start_ns = s->start;
            a.end_ns = s->end;
            a.correlation_id = s->correlationId;
            a.stream = s->streamId;
            return true;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
            if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return false;
            a.kind = GpuActivityKind::external_correlation;
            a.correlation_id = e->correlationId;
            a.external_id = e->externalId;
            return true;
        }
        default:
            return false;
    }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;                                         // fill the buffer
    if (g_state.buffers_out.load() >= kActivityMaxBuffers) {  // CUPTI drops and counts
        g_state.refused.fetch_add(1);
        return;
    }
    void* p = std::aligned_alloc(8, kActivityBufferBytes);
    if (p == nullptr) {
        g_state.refused.fetch_add(1);
        return;
    }
    g_state.buffers_out.fetch_add(1);
    *buffer = static_cast<std::uint8_t*>(p);
    *size = kActivityBufferBytes;
}

void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream, std::uint8_t* buffer,
                               std::size_t, std::size_t valid) {
    std::vector<GpuActivity> out;
    std::uint64_t lost = 0;
    CUpti_Activity* record = nullptr;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        try {
            GpuActivity a;
            if (convert(record, a)) out.push_back(std::move(a));
        } catch (...) {  // out of memory: the record is lost, and counted
            ++lost;
        }
    }
    std::size_t dropped = 0;
    if (check(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped),
              "cuptiActivityGetNumDroppedRecords")) {
        lost += dropped;
    }
    g_state.dropped.fetch_add(lost);
    try {
        std::lock_guard<std::mutex> lock(g_state.mutex);
        g_state.records.fetch_add(out.size());
        if (g_state.pending.empty()) {
            g_state.pending.swap(out);
        } else {
            for (auto& a : out)
                g_state.pending.push_back(std::move(a));
        }
    } catch (...) {
        g_state.dropped.fetch_add(out.size());
    }
    g_state.buffers_out.fetch_sub(1);
    std::free(buffer);
}

// CUDA graphs (CUPTI's cuda_graphs_trace sample's way): a node is created inside the API call
// that adds it, stream capture's launches included (CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED is
// issued between that call's enter and exit), so the engine's external id on top of this
// thread's stack is its call; instantiation clones every node (GRAPHNODE_CLONED, originalNode)
// and the launched work's records carry the clone's id. Each mapping goes to the profiler as a
// graph_node record; a node made under no id maps to nothing (the profiler's "cuda_graph").
void remember_node(std::uint64_t node, std::uint64_t external) {
    GpuActivity a;
    a.kind = GpuActivityKind::graph_node;
    a.graph_node_id = node;
    a.external_id = external;
    g_state.node_external[node] = external;
    g_state.pending.push_back(std::move(a));
    g_state.records.fetch_add(1);
}

void CUPTIAPI resource_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* cbdata) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbdata == nullptr) return;
    const auto* data = static_cast<const CUpti_ResourceData*>(cbdata);
    const auto* graph = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (graph == nullptr) return;
    std::uint64_t node = 0;
    if (!check(cuptiGetGraphNodeId(graph->node, &node), "cuptiGetGraphNodeId")) return;
    try {
        if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
            if (t_external.empty()) return;
            std::lock_guard<std::mutex> lock(g_state.mutex);
            remember_node(node, t_external.back());
        } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
            std::uint64_t original = 0;
            if (!check(cuptiGetGraphNodeId(graph->originalNode, &original), "cuptiGetGraphNodeId"))
                return;
            std::lock_guard<std::mutex> lock(g_state.mutex);
            const auto it = g_state.node_external.find(original);
            if (it != g_state.node_external.end()) remember_node(node, it->second);
        }
    } catch (...) {  // out of memory: the node's work goes to "cuda_graph", counted
        g_state.dropped.fetch_add(1);
    }
}

// The graph-node callbacks. Failing (another CUPTI subscriber, Nsight Systems) is counted and
// warned about once: graph-launched work is then attributed to "cuda_graph".
void subscribe_graph_nodes() {
    if (!check(cuptiSubscribe(&g_state.subscriber, resource_callback, nullptr), "cuptiSubscribe")) {
        g_state.subscriber = nullptr;
        return;
    }
    for (CUpti_CallbackId cbid :
         {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED}) {
        check(cuptiEnableCallback(1, g_state.subscriber, CUPTI_CB_DOMAIN_RESOURCE, cbid),
              "cuptiEnableCallback");
    }
}

}  // namespace

bool activity_enable(char* error, std::size_t error_bytes) noexcept {
    auto fail = [&](const char* why) {
        if (error_bytes > 0) std::snprintf(error, error_bytes, "%s", why);
        return false;
    };
    if (g_state.enabled.exchange(true))
        return fail("GPU activity is already being collected in this process");
    g_state.records = 0;
    g_state.dropped = 0;
    g_state.refused = 0;
    g_state.failures = 0;
    g_state.warned = false;
    {
        // What the last collection's final (disable) flush delivered after its owner's last
        // flush: records of another run, whose external ids the new collector reuses from 1.
        std::lock_guard<std::mutex> lock(g_state.mutex);
        g_state.pending.clear();
        g_state.node_external.clear();  // the last collection's ids: graphs are captured again
    }
    if (!check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
               "cuptiActivityRegisterCallbacks")) {
        g_state.enabled = false;
        return fail("CUPTI activity callbacks could not be registered (see the warning above)");
    }
    bool ok = true;
    for (CUpti_ActivityKind kind : kKinds)
        ok &= check(cuptiActivityEnable(kind), "cuptiActivityEnable");
    if (!ok) {
        for (CUpti_ActivityKind kind : kKinds)
            cuptiActivityDisable(kind);
        g_state.enabled = false;
        return fail("CUPTI activity collection could not be enabled (see the warning above)");
    }
    subscribe_graph_nodes();
    return true;
}

void activity_disable() noexcept {
    if (!g_state.enabled.load()) return;
    // Disable first, then flush (libkineto's order): a record written between the two would
    // otherwise stay in CUPTI's buffers for the next collection, or never arrive.
    for (CUpti_ActivityKind kind : kKinds)
        check(cuptiActivityDisable(kind), "cuptiActivityDisable");
    check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    if (g_state.subscriber != nullptr) {
        check(cuptiUnsubscribe(g_state.subscriber), "cuptiUnsubscribe");
        g_state.subscriber = nullptr;
    }
    g_state.enabled = false;
}

void activity_push_external(std::uint64_t id) noexcept {
    try {
        t_external.push_back(id);
    } catch (...) {  // the mirror is off by one now: graph nodes may take the wrong call's id
        g_state.failures.fetch_add(1);
    }
    check(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
          "cuptiActivityPushExternalCorrelationId");
}

void activity_pop_external() noexcept {
    if (!t_external.empty()) t_external.pop_back();
    std::uint64_t last = 0;
    check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
          "cuptiActivityPopExternalCorrelationId");
}

std::uint64_t activity_timestamp() noexcept {
    std::uint64_t t = 0;
    check(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
    return t;
}

void activity_flush(bool wait, std::vector<profiler::GpuActivity>* out,
                    profiler::GpuActivityStats* stats) noexcept {
    // Without FORCED CUPTI hands over the buffers whose records are all complete (full or not);
    // FORCED also those holding a record still incomplete (a kernel still running: no end time
    // yet), so the trainer flushes only after its step has synchronized (cupti_activity.h in
    // CUDA 13, cuptiActivityFlushAll).
    if (g_state.enabled.load()) {
        check(cuptiActivityFlushAll(wait ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0),
              "cuptiActivityFlushAll");
        // Records dropped since the last completed buffer read the count (CUPTI resets it on
        // each read): when every buffer request was refused, no buffer completes to read it.
        std::size_t dropped = 0;
        if (check(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped),
                  "cuptiActivityGetNumDroppedRecords"))
            g_state.dropped.fetch_add(dropped);
    }
    try {
        std::lock_guard<std::mutex> lock(g_state.mutex);
        if (out->empty()) {
            out->swap(g_state.pending);
        } else {
            for (auto& a : g_state.pending)
                out->push_back(std::move(a));
            g_state.pending.clear();
        }
    } catch (...) {
        g_state.failures.fetch_add(1);
    }
    stats->records = g_state.records.load();
    stats->dropped_records = g_state.dropped.load();
    stats->buffers_refused = g_state.refused.load();
    stats->failures = g_state.failures.load();
}

}  // namespace napkin::cuda
