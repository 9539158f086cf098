// The CUPTI Activity API on the emulator, as core/cuda/cupti_activity.cpp uses it: linked in
// place of libcupti, with the signatures of the real cupti.h, so the CUDA plugin's GPU activity
// collection runs unchanged on the CPU. The emulated runtime (emu_cudart.cpp), the scheduler
// (emu_kernels.cpp) and cuBLASLt (cublaslt_emu.cpp) report each call and the work it did through
// tests/cuda_emu/emu_trace.h; here those become CUPTI's records, the struct versions of the CUDA
// 13 headers: CUpti_ActivityKernel10 (CONCURRENT_KERNEL, or KERNEL when only that is enabled),
// CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityAPI (RUNTIME),
// CUpti_ActivitySynchronization2 and CUpti_ActivityExternalCorrelation, zeroed, then filled.
//
// The semantics are the ones cupti_activity.h documents. A kind's records are written only while
// it is enabled and buffer callbacks are registered; each record goes, 8-byte aligned, into the
// buffer the request callback handed out, and a record that finds no buffer (the callback
// declined, or gave one too small for it) is lost and counted for
// cuptiActivityGetNumDroppedRecords, which resets the count. cuptiActivityFlushAll hands buffers
// to the completed callback (context NULL, stream 0, as since CUDA 6): full ones (the next record
// did not fit, or maxNumRecords was reached) and buffers too small to use (valid size 0); with
// CUPTI_ACTIVITY_FLAG_FLUSH_FORCED every buffer it holds, partly filled or empty, so it holds
// none afterwards. cupti_activity.h says a plain flush also returns partly filled buffers whose
// records are complete, as every record here is; keeping them until a forced flush is the
// stricter reading, under which a client that gets its records here gets them from a GPU too.
// External correlation ids are a stack per kind and per thread; while one is pushed, each traced
// runtime call gets an EXTERNAL_CORRELATION record (RUNTIME and EXTERNAL_CORRELATION enabled),
// written when the call starts, so before its API record. Callbacks are never called with the
// state's lock held, so they may call CUPTI.
//
// The callback API for CUDA graphs only: one subscriber (cuptiSubscribe, cuptiUnsubscribe), which
// may enable the resource domain's GRAPHNODE_CREATED and GRAPHNODE_CLONED callbacks
// (cuptiEnableCallback refuses any other as not supported), cuptiGetGraphNodeId; the emulated
// runtime calls them where CUDA does (emu_trace.h), and the kernel, memcpy and memset records of a
// graph launch's work carry graphId and graphNodeId.
//
// How it differs from CUPTI on a GPU: work is done when it is queued, so a kernel's, copy's or
// set's record precedes its call's API record in the buffer (on a GPU device records come
// later); an asynchronous call's API record ends where its work starts, a synchronous one's
// (cudaMemcpy, cudaMemset) spans it (emu_trace.h); a synchronization record spans its call. No
// driver records (the emulator makes no driver calls; DRIVER can be enabled and stays empty), no
// other kinds (their enable fails with CUPTI_ERROR_NOT_SUPPORTED), no records of CUPTI's own
// overhead. Device 0, context 1; stream ids 7 for the legacy default stream and 13 up for others in
// the order first seen, kept per handle (a destroyed stream's handle, reused, keeps its id); event
// ids 1 up. Kernel names are the emulator's (the kernel's source name, unmangled), kept for the
// process's life; registers and static shared memory are 0 (unknown). A memcpy of cudaMemcpyDefault
// has copy kind UNKNOWN and host memory is kind UNKNOWN (emu_trace.h passes the kind, not the
// pointers); a memcpy's correlationId and runtimeCorrelationId are both its runtime call's.
// returnValue is always 0: emu_trace.h does not pass a call's result. Timestamps
// (cuptiGetTimestamp) are a monotonic clock in ns, offset to read near the Unix epoch as
// CUPTI's do; the thread id is the low 32 bits of pthread_self(), which is what libkineto
// matches CUPTI's against.
#include <cupti.h>
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/cuda_emu/emu_trace.h"

namespace napkin::emu {

namespace {

constexpr std::size_t kRecordAlignment = 8;  // CUPTI's ACTIVITY_RECORD_ALIGNMENT
constexpr std::uint32_t kDeviceId = 0;
constexpr std::uint32_t kContextId = 1;
constexpr std::uint32_t kLegacyStreamId = 7;  // the legacy default stream, as a GPU numbers it
constexpr std::uint32_t kFirstStreamId = 13;

static_assert(sizeof(CUpti_ActivityKernel10) % kRecordAlignment == 0 &&
                  sizeof(CUpti_ActivityMemcpy6) % kRecordAlignment == 0 &&
                  sizeof(CUpti_ActivityMemset4) % kRecordAlignment == 0 &&
                  sizeof(CUpti_ActivityAPI) % kRecordAlignment == 0 &&
                  sizeof(CUpti_ActivitySynchronization2) % kRecordAlignment == 0 &&
                  sizeof(CUpti_ActivityExternalCorrelation) % kRecordAlignment == 0,
              "records follow one another at 8-byte boundaries");

// The size of a record of `kind` as written here; 0 for a kind never written.
std::size_t record_bytes(CUpti_ActivityKind kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            return sizeof(CUpti_ActivityKernel10);
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            return sizeof(CUpti_ActivityMemcpy6);
        case CUPTI_ACTIVITY_KIND_MEMSET:
            return sizeof(CUpti_ActivityMemset4);
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER:
            return sizeof(CUpti_ActivityAPI);
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
            return sizeof(CUpti_ActivitySynchronization2);
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
            return sizeof(CUpti_ActivityExternalCorrelation);
        default:
            return 0;
    }
}

bool emulated_kind(CUpti_ActivityKind kind) {
    return record_bytes(kind) != 0;
}

// Bytes from `p` to the next record boundary.
std::size_t alignment_pad(const void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p) % kRecordAlignment;
    return a == 0 ? 0 : kRecordAlignment - a;
}

// A buffer the request callback handed out. `used` counts from `data`, the alignment pad
// included: the valid size the completed callback gets once it holds a record.
struct Buffer {
    std::uint8_t* data = nullptr;
    std::size_t size = 0;
    std::size_t used = 0;
    std::size_t records = 0;
    std::size_t max_records = 0;  // 0: as many as fit

    bool fits(std::size_t bytes) const {
        return data != nullptr && (max_records == 0 || records < max_records) && used <= size &&
               bytes <= size - used;
    }
    std::size_t valid() const { return records == 0 ? 0 : used; }
};

struct State {
    std::mutex mutex;  // guards everything below
    CUpti_BuffersCallbackRequestFunc request = nullptr;
    CUpti_BuffersCallbackCompleteFunc complete = nullptr;
    std::array<bool, CUPTI_ACTIVITY_KIND_COUNT> enabled{};
    Buffer current;                 // being filled
    std::vector<Buffer> completed;  // full, or too small to use: the next flush returns them
    std::vector<Buffer> spare;      // a second buffer that arrived while another was requested
    std::size_t dropped = 0;        // records lost since cuptiActivityGetNumDroppedRecords
    std::unordered_map<cudaStream_t, std::uint32_t> streams;
    std::unordered_map<cudaEvent_t, std::uint32_t> events;
    std::unordered_set<std::string> names;  // kernel names the records point into
    std::int64_t next_grid_id = 1;
    std::uint64_t next_event_sync_id = 1;
    // The one subscriber of the callback API, and the resource callbacks it enabled (graph
    // nodes' only: every other enable is refused as not supported).
    CUpti_CallbackFunc callback = nullptr;
    void* userdata = nullptr;
    std::array<bool, CUPTI_CBID_RESOURCE_SIZE> resource_enabled{};

    bool collecting(CUpti_ActivityKind kind) const {
        return request != nullptr && complete != nullptr && kind > CUPTI_ACTIVITY_KIND_INVALID &&
               kind < CUPTI_ACTIVITY_KIND_COUNT && enabled[kind];
    }
};

// Never destroyed: records point at its names for the process's life, and the runtime may be
// called from other static destructors.
State& state() {
    static State* s = new State;
    return *s;
}

std::atomic<std::uint32_t> g_correlation{0};

// The runtime calls in progress on this thread (innermost last), for the device work they cause.
struct Call {
    unsigned cbid = 0;
    std::uint32_t correlation = 0;
};
constexpr std::size_t kMaxCallDepth = 8;
thread_local std::array<Call, kMaxCallDepth> t_calls;
thread_local std::size_t t_call_depth = 0;

// External correlation ids pushed on this thread, per CUpti_ExternalCorrelationKind.
thread_local std::array<std::vector<std::uint64_t>, CUPTI_EXTERNAL_CORRELATION_KIND_SIZE>
    t_external;

// The graph node a launch is running on this thread (GraphNodeScope).
thread_local std::uint32_t t_graph_id = 0;
thread_local std::uint64_t t_graph_node = 0;

// The subscriber's resource callback for a graph node, if it enabled `cbid`; called unlocked.
void graph_node_callback(CUpti_CallbackIdResource cbid, CUpti_GraphData data) noexcept {
    State& s = state();
    CUpti_CallbackFunc callback = nullptr;
    void* userdata = nullptr;
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.callback == nullptr || !s.resource_enabled[cbid]) return;
        callback = s.callback;
        userdata = s.userdata;
    }
    CUpti_ResourceData resource;
    std::memset(&resource, 0, sizeof resource);
    resource.resourceDescriptor = &data;
    callback(userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &resource);
}

bool valid_external_kind(CUpti_ExternalCorrelationKind kind) {
    return kind > CUPTI_EXTERNAL_CORRELATION_KIND_INVALID &&
           kind < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE;
}

// The cbid of the call on this thread whose correlation id is `correlation`; 0 when none.
unsigned calling_cbid(std::uint32_t correlation) {
    const std::size_t depth = t_call_depth < kMaxCallDepth ? t_call_depth : kMaxCallDepth;
    for (std::size_t i = depth; i-- > 0;)
        if (t_calls[i].correlation == correlation) return t_calls[i].cbid;
    return 0;
}

template <class Record>
Record zeroed(CUpti_ActivityKind kind) {
    Record r;
    std::memset(&r, 0, sizeof r);
    r.kind = kind;
    return r;
}

std::uint32_t stream_id(State& s, cudaStream_t stream) {
    // cudaStreamLegacy, spelt without the header's C-style cast.
    if (stream == nullptr || stream == reinterpret_cast<cudaStream_t>(std::uintptr_t{1}))
        return kLegacyStreamId;
    const auto id = kFirstStreamId + static_cast<std::uint32_t>(s.streams.size());
    return s.streams.try_emplace(stream, id).first->second;
}

std::uint32_t event_id(State& s, cudaEvent_t event) {
    const auto id = 1 + static_cast<std::uint32_t>(s.events.size());
    return s.events.try_emplace(event, id).first->second;
}

// Appends one record. Where the current buffer cannot hold it, the buffer is complete and a new
// one is asked for, without the lock (the callback may call CUPTI): another thread may install
// one meanwhile, and the newer is kept as a spare. No buffer, or one too small: the record is lost.
void write(std::unique_lock<std::mutex>& lock, const void* record, std::size_t bytes) {
    State& s = state();
    for (;;) {
        if (s.current.fits(bytes)) {
            std::memcpy(s.current.data + s.current.used, record, bytes);
            s.current.used += bytes;
            ++s.current.records;
            if (s.current.max_records != 0 && s.current.records >= s.current.max_records) {
                s.completed.push_back(s.current);
                s.current = Buffer{};
            }
            return;
        }
        if (s.current.data != nullptr) {
            s.completed.push_back(s.current);
            s.current = Buffer{};
        }
        if (!s.spare.empty()) {
            s.current = s.spare.back();
            s.spare.pop_back();
            continue;
        }
        const CUpti_BuffersCallbackRequestFunc request = s.request;
        if (request == nullptr) {  // unregistered meanwhile
            ++s.dropped;
            return;
        }
        Buffer b;
        lock.unlock();
        request(&b.data, &b.size, &b.max_records);
        lock.lock();
        if (b.data == nullptr) {
            ++s.dropped;
            return;
        }
        b.used = alignment_pad(b.data);
        if (!b.fits(bytes)) {  // handed back at the next flush, holding nothing
            s.completed.push_back(b);
            ++s.dropped;
            return;
        }
        if (s.current.data == nullptr) {
            s.current = b;
        } else {
            s.spare.push_back(b);
        }
    }
}

// Writes the record `fill` makes, as the kind `kind_of` picks: one being collected, or INVALID for
// none. Never throws: a record that cannot be made is counted as dropped.
template <class Record, class KindOf, class Fill>
void emit_as(KindOf kind_of, Fill fill) noexcept {
    State& s = state();
    try {
        std::unique_lock<std::mutex> lock(s.mutex);
        const CUpti_ActivityKind kind = kind_of(s);
        if (kind == CUPTI_ACTIVITY_KIND_INVALID) return;
        try {
            auto r = zeroed<Record>(kind);
            fill(s, r);
            write(lock, &r, sizeof r);
        } catch (...) {
            if (lock.owns_lock()) ++s.dropped;
        }
    } catch (...) {  // the lock itself failed
    }
}

template <class Record, class Fill>
void emit(CUpti_ActivityKind kind, Fill fill) noexcept {
    emit_as<Record>(
        [kind](const State& s) { return s.collecting(kind) ? kind : CUPTI_ACTIVITY_KIND_INVALID; },
        fill);
}

std::uint32_t this_thread_id() {
    return static_cast<std::uint32_t>(pthread_self());
}

}  // namespace

namespace trace {

std::uint64_t now() {
    using std::chrono::duration_cast;
    using std::chrono::nanoseconds;
    static const std::int64_t epoch_offset =
        duration_cast<nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count() -
        duration_cast<nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return static_cast<std::uint64_t>(
        duration_cast<nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count() +
        epoch_offset);
}

ApiCall::ApiCall(unsigned cbid) : cbid_(cbid), correlation_(++g_correlation), start_(now()) {
    if (t_call_depth < kMaxCallDepth) t_calls[t_call_depth] = Call{cbid_, correlation_};
    ++t_call_depth;
    // An external correlation record per kind with an id pushed, before the call's API record,
    // when both are collected.
    for (int k = CUPTI_EXTERNAL_CORRELATION_KIND_INVALID + 1;
         k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k) {
        const auto& stack = t_external[static_cast<std::size_t>(k)];
        if (stack.empty()) continue;
        emit_as<CUpti_ActivityExternalCorrelation>(
            [](const State& s) {
                return s.collecting(CUPTI_ACTIVITY_KIND_RUNTIME) &&
                               s.collecting(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)
                           ? CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION
                           : CUPTI_ACTIVITY_KIND_INVALID;
            },
            [&](State&, CUpti_ActivityExternalCorrelation& r) {
                r.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
                r.externalId = stack.back();
                r.correlationId = correlation_;
            });
    }
}

ApiCall::~ApiCall() {
    const std::uint64_t end = end_ != 0 ? end_ : now();
    emit<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME, [&](State&, CUpti_ActivityAPI& r) {
        r.cbid = cbid_;
        r.start = start_;
        r.end = end;
        r.processId = static_cast<std::uint32_t>(getpid());
        r.threadId = this_thread_id();
        r.correlationId = correlation_;
        r.returnValue = 0;
    });
    if (t_call_depth > 0) --t_call_depth;
}

void kernel(std::uint32_t correlation, const char* name, dim3 grid, dim3 block,
            std::size_t dynamic_smem, cudaStream_t stream, std::uint64_t start, std::uint64_t end) {
    // CONCURRENT_KERNEL records where that is enabled; KERNEL (kernels serialized) where only it
    // is.
    const auto kind_of = [](const State& s) {
        if (s.collecting(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL))
            return CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        return s.collecting(CUPTI_ACTIVITY_KIND_KERNEL) ? CUPTI_ACTIVITY_KIND_KERNEL
                                                        : CUPTI_ACTIVITY_KIND_INVALID;
    };
    emit_as<CUpti_ActivityKernel10>(kind_of, [&](State& s, CUpti_ActivityKernel10& r) {
        r.start = start;
        r.end = end;
        r.completed = end;
        r.deviceId = kDeviceId;
        r.contextId = kContextId;
        r.streamId = stream_id(s, stream);
        r.gridX = static_cast<std::int32_t>(grid.x);
        r.gridY = static_cast<std::int32_t>(grid.y);
        r.gridZ = static_cast<std::int32_t>(grid.z);
        r.blockX = static_cast<std::int32_t>(block.x);
        r.blockY = static_cast<std::int32_t>(block.y);
        r.blockZ = static_cast<std::int32_t>(block.z);
        r.dynamicSharedMemory = static_cast<std::int32_t>(dynamic_smem);
        r.correlationId = correlation;
        r.gridId = s.next_grid_id++;
        r.name = name != nullptr ? s.names.insert(std::string(name)).first->c_str() : nullptr;
        r.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
        r.graphId = t_graph_id;
        r.graphNodeId = t_graph_node;
    });
}

void memcpy(std::uint32_t correlation, cudaMemcpyKind kind, std::size_t bytes, cudaStream_t stream,
            std::uint64_t start, std::uint64_t end) {
    const unsigned cbid = calling_cbid(correlation);
    emit<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY, [&](State& s,
                                                                CUpti_ActivityMemcpy6& r) {
        const std::uint8_t host = CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;  // pageable or pinned
        const std::uint8_t device = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        switch (kind) {
            case cudaMemcpyHostToDevice:
                r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, r.srcKind = host, r.dstKind = device;
                break;
            case cudaMemcpyDeviceToHost:
                r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, r.srcKind = device, r.dstKind = host;
                break;
            case cudaMemcpyDeviceToDevice:
                r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, r.srcKind = device,
                r.dstKind = device;
                break;
            case cudaMemcpyHostToHost:
                r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, r.srcKind = host, r.dstKind = host;
                break;
            default:  // cudaMemcpyDefault: the pointers would tell, and they are not passed
                r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN;
                break;
        }
        if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020)
            r.flags = CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC;
        r.bytes = bytes;
        r.start = start;
        r.end = end;
        r.deviceId = kDeviceId;
        r.contextId = kContextId;
        r.streamId = stream_id(s, stream);
        r.correlationId = correlation;  // no driver call in between: the runtime call's
        r.runtimeCorrelationId = correlation;
        r.copyCount = 1;
        r.graphId = t_graph_id;
        r.graphNodeId = t_graph_node;
    });
}

void memset(std::uint32_t correlation, int value, std::size_t bytes, cudaStream_t stream,
            std::uint64_t start, std::uint64_t end) {
    const unsigned cbid = calling_cbid(correlation);
    emit<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET,
                                [&](State& s, CUpti_ActivityMemset4& r) {
                                    r.value = static_cast<std::uint32_t>(value);
                                    r.bytes = bytes;
                                    r.start = start;
                                    r.end = end;
                                    r.deviceId = kDeviceId;
                                    r.contextId = kContextId;
                                    r.streamId = stream_id(s, stream);
                                    r.correlationId = correlation;
                                    if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020)
                                        r.flags = CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC;
                                    r.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
                                    r.graphId = t_graph_id;
                                    r.graphNodeId = t_graph_node;
                                });
}

void synchronize(std::uint32_t correlation, int type, cudaStream_t stream, cudaEvent_t event,
                 std::uint64_t start, std::uint64_t end) {
    emit<CUpti_ActivitySynchronization2>(
        CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, [&](State& s, CUpti_ActivitySynchronization2& r) {
            const auto t = static_cast<CUpti_ActivitySynchronizationType>(type);
            const bool names_stream = t == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE ||
                                      t == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
            const bool names_event = t == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE ||
                                     t == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
            r.type = t;
            r.start = start;
            r.end = end;
            r.correlationId = correlation;
            r.contextId = kContextId;
            r.streamId = names_stream ? stream_id(s, stream) : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
            r.cudaEventId = names_event && event != nullptr ? event_id(s, event)
                                                            : CUPTI_SYNCHRONIZATION_INVALID_VALUE;
            r.cudaEventSyncId = names_event ? s.next_event_sync_id++
                                            : std::uint64_t{CUPTI_SYNCHRONIZATION_INVALID_VALUE};
            r.returnValue = 0;
        });
}

GraphNodeScope::GraphNodeScope(std::uint32_t graph_id, std::uint64_t node_id) {
    t_graph_id = graph_id;
    t_graph_node = node_id;
}

GraphNodeScope::~GraphNodeScope() {
    t_graph_id = 0;
    t_graph_node = 0;
}

void graph_node_created(cudaGraph_t graph, GraphNodeInfo* node) {
    CUpti_GraphData data;
    std::memset(&data, 0, sizeof data);
    data.graph = graph;
    data.node = reinterpret_cast<CUgraphNode>(node);
    graph_node_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, data);
}

void graph_node_cloned(cudaGraph_t graph, GraphNodeInfo* node, GraphNodeInfo* original,
                       cudaGraphExec_t exec) {
    CUpti_GraphData data;
    std::memset(&data, 0, sizeof data);
    data.graph = graph;
    data.originalGraph = graph;
    data.node = reinterpret_cast<CUgraphNode>(node);
    data.originalNode = reinterpret_cast<CUgraphNode>(original);
    data.graphExec = exec;
    graph_node_callback(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, data);
}

}  // namespace trace

}  // namespace napkin::emu

using napkin::emu::state;
using napkin::emu::State;

extern "C" {

CUptiResult cuptiGetVersion(uint32_t* version) {
    if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    *version = CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
    if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = napkin::emu::trace::now();
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
    if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
#define NAPKIN_CUPTI_RESULT(r) \
    case r:                    \
        *str = #r;             \
        return CUPTI_SUCCESS;
        NAPKIN_CUPTI_RESULT(CUPTI_SUCCESS)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_PARAMETER)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_DEVICE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_CONTEXT)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_ID)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_NAME)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_OPERATION)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_OUT_OF_MEMORY)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_HARDWARE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_API_NOT_IMPLEMENTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_MAX_LIMIT_REACHED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_NOT_READY)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_NOT_COMPATIBLE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_NOT_INITIALIZED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_METRIC_ID)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_METRIC_NAME)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_QUEUE_EMPTY)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_HANDLE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_STREAM)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_KIND)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_EVENT_VALUE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_DISABLED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_MODULE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_METRIC_VALUE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_HARDWARE_BUSY)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_OPENACC_UNDEFINED_ROUTINE)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_INVALID_CHIP_NAME)
        NAPKIN_CUPTI_RESULT(CUPTI_ERROR_UNKNOWN)
#undef NAPKIN_CUPTI_RESULT
        default:
            *str = nullptr;
            return CUPTI_ERROR_INVALID_PARAMETER;
    }
}

// Names exist for the runtime calls the emulator traces (emu_trace.h's callers); a call traced
// anew needs its line here. The macro spells each name as cupti_runtime_cbid.h does.
CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char** name) {
    if (name == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    *name = nullptr;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (cbid) {
#define NAPKIN_CUPTI_RUNTIME(call)        \
    case CUPTI_RUNTIME_TRACE_CBID_##call: \
        *name = #call;                    \
        return CUPTI_SUCCESS;
        NAPKIN_CUPTI_RUNTIME(cudaLaunchKernel_v7000)
        NAPKIN_CUPTI_RUNTIME(cudaMemcpy_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaMemcpyAsync_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaMemset_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaMemsetAsync_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaDeviceSynchronize_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaStreamSynchronize_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaEventSynchronize_v3020)
        NAPKIN_CUPTI_RUNTIME(cudaStreamBeginCapture_v10000)
        NAPKIN_CUPTI_RUNTIME(cudaGraphInstantiateWithFlags_v11040)
        NAPKIN_CUPTI_RUNTIME(cudaGraphLaunch_v10000)
#undef NAPKIN_CUPTI_RUNTIME
        default:
            return CUPTI_ERROR_INVALID_PARAMETER;
    }
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                           CUpti_BuffersCallbackCompleteFunc completed) {
    if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.request = requested;
    s.complete = completed;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
    if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT)
        return CUPTI_ERROR_INVALID_KIND;
    if (!napkin::emu::emulated_kind(kind)) return CUPTI_ERROR_NOT_SUPPORTED;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.enabled[kind] = true;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
    if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT)
        return CUPTI_ERROR_INVALID_KIND;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.enabled[kind] = false;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    State& s = state();
    std::vector<napkin::emu::Buffer> out;
    CUpti_BuffersCallbackCompleteFunc complete = nullptr;
    try {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.complete == nullptr) return CUPTI_ERROR_INVALID_OPERATION;
        complete = s.complete;
        out.swap(s.completed);
        if ((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0) {
            if (s.current.data != nullptr) out.push_back(s.current);
            s.current = napkin::emu::Buffer{};
            out.insert(out.end(), s.spare.begin(), s.spare.end());
            s.spare.clear();
        }
    } catch (...) {
        return CUPTI_ERROR_OUT_OF_MEMORY;
    }
    for (const napkin::emu::Buffer& b : out)
        complete(nullptr, 0, b.data, b.size, b.valid());
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
    if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    std::size_t offset = napkin::emu::alignment_pad(buffer);
    if (*record != nullptr) {
        const auto* previous = reinterpret_cast<const std::uint8_t*>(*record);
        if (previous < buffer + offset || previous >= buffer + valid)
            return CUPTI_ERROR_INVALID_PARAMETER;
        const std::size_t bytes = napkin::emu::record_bytes((*record)->kind);
        if (bytes == 0) return CUPTI_ERROR_INVALID_KIND;
        offset = static_cast<std::size_t>(previous - buffer) + bytes;
    }
    if (offset >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    if (valid - offset < sizeof(CUpti_Activity)) return CUPTI_ERROR_INVALID_KIND;  // incomplete
    auto* next = reinterpret_cast<CUpti_Activity*>(buffer + offset);
    const std::size_t bytes = napkin::emu::record_bytes(next->kind);
    if (bytes == 0 || valid - offset < bytes) return CUPTI_ERROR_INVALID_KIND;
    *record = next;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
    if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *dropped = std::exchange(s.dropped, 0);
    return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                           void* userdata) {
    if (subscriber == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.callback != nullptr) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    s.callback = callback;
    s.userdata = userdata;
    s.resource_enabled.fill(false);
    *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&s);  // the one subscriber
    return CUPTI_SUCCESS;
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&s) || s.callback == nullptr)
        return CUPTI_ERROR_INVALID_PARAMETER;
    s.callback = nullptr;
    s.userdata = nullptr;
    s.resource_enabled.fill(false);
    return CUPTI_SUCCESS;
}

// The resource domain's graph-node callbacks only; any other is refused as not supported.
CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (subscriber != reinterpret_cast<CUpti_SubscriberHandle>(&s) || s.callback == nullptr)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || (cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED &&
                                               cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED))
        return CUPTI_ERROR_NOT_SUPPORTED;
    s.resource_enabled[cbid] = enable != 0;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t* id) {
    if (node == nullptr || id == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = reinterpret_cast<const napkin::emu::trace::GraphNodeInfo*>(node)->id;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                   uint64_t id) {
    if (!napkin::emu::valid_external_kind(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
    try {
        napkin::emu::t_external[static_cast<std::size_t>(kind)].push_back(id);
    } catch (...) {
        return CUPTI_ERROR_OUT_OF_MEMORY;
    }
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                  uint64_t* last) {
    if (!napkin::emu::valid_external_kind(kind)) return CUPTI_ERROR_INVALID_PARAMETER;
    auto& stack = napkin::emu::t_external[static_cast<std::size_t>(kind)];
    if (stack.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
    if (last != nullptr) *last = stack.back();
    stack.pop_back();
    return CUPTI_SUCCESS;
}

}  // extern "C"
