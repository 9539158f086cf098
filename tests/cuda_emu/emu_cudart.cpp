// The CUDA runtime calls the kernels and their tests make, on the CPU (tests/cuda_emu/cuda_emu.h
// says why): one device, an H100's limits, device memory that is host memory the emulator keeps
// a table of, and work that is done when it is queued (so every stream is in order and a
// synchronize only reports errors). Strict where the real runtime is: copies and frees must name
// memory cudaMalloc returned, and a fault inside a kernel stays for every later call.
#include <cuda_runtime_api.h>

#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/emu_tma.h"
#include "tests/cuda_emu/emu_trace.h"

namespace napkin::emu {

namespace {

struct Errors {
    cudaError_t last = cudaSuccess;
    cudaError_t sticky = cudaSuccess;
    std::string message;
};

std::mutex g_mutex;
Errors g_errors;
std::map<const unsigned char*, std::size_t> g_allocations;  // start -> bytes
std::map<const void*, int> g_dynamic_shared_optin;          // kernel -> bytes it may launch with
std::map<const void*, std::size_t> g_pinned;                // cudaHostAlloc's: start -> bytes
StreamStats g_stream_stats;

// The host guard (emu_state.h's DeviceAccess): allocations made while it is on live in
// emu_guard.cpp's arena, inaccessible but to the emulated device.
// Whether allocations made now are guarded: NAPKIN_EMU_HOST_GUARD=1, or set_host_guard's say (a
// function-local static, so that the plugin's static initializer may set it first).
bool& guard() {
    static bool on = [] {
        const char* v = std::getenv("NAPKIN_EMU_HOST_GUARD");
        return v != nullptr && v[0] == '1';
    }();
    return on;
}

// Whether [p, p + bytes) lies inside one allocation.
bool is_device(const void* p, std::size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    auto it = g_allocations.upper_bound(c);
    if (it == g_allocations.begin()) return false;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second;
}

cudaError_t fail(cudaError_t e, const std::string& message) {
    std::fprintf(stderr, "napkin cuda-emu: %s\n", message.c_str());
    g_errors.last = e;
    g_errors.message = message;
    return e;
}

// What a synchronizing call returns: a kernel's fault, once one happened.
cudaError_t sticky() {
    return g_errors.sticky;
}

cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (sticky() != cudaSuccess) return sticky();
    if (bytes == 0) return cudaSuccess;
    const bool dst_dev = is_device(dst, bytes), src_dev = is_device(src, bytes);
    const bool ok = kind == cudaMemcpyDefault ||
                    (kind == cudaMemcpyHostToDevice && dst_dev && !src_dev) ||
                    (kind == cudaMemcpyDeviceToHost && !dst_dev && src_dev) ||
                    (kind == cudaMemcpyDeviceToDevice && dst_dev && src_dev) ||
                    (kind == cudaMemcpyHostToHost && !dst_dev && !src_dev);
    if (!ok)
        return fail(cudaErrorInvalidValue, "cudaMemcpy of " + std::to_string(bytes) +
                                               " bytes: the pointers do not match the kind " +
                                               std::to_string(static_cast<int>(kind)));
    guard_open();
    std::memmove(dst, src, bytes);
    guard_close();
    return cudaSuccess;
}

cudaError_t set(void* dst, int value, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (sticky() != cudaSuccess) return sticky();
    if (bytes == 0) return cudaSuccess;
    if (!is_device(dst, bytes))
        return fail(cudaErrorInvalidValue,
                    "cudaMemset of " + std::to_string(bytes) + " bytes outside device memory");
    guard_open();
    std::memset(dst, value, bytes);
    guard_close();
    return cudaSuccess;
}

// Events hold the host time they were recorded at: work queued before them is done by then.
struct Event {
    bool timing = true;
    bool recorded = false;
    std::uint64_t ns = 0;
};
std::set<cudaStream_t> g_streams;
std::set<cudaEvent_t> g_events;

Event* find_event(cudaEvent_t event, const char* call) {
    if (g_events.count(event) == 0) {
        fail(cudaErrorInvalidResourceHandle,
             std::string(call) + " of an event cudaEventCreate did not return");
        return nullptr;
    }
    return reinterpret_cast<Event*>(event);
}

// Whether [p, p + bytes) lies inside one cudaHostAlloc allocation.
bool is_pinned_locked(const void* p, std::size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    auto it = g_pinned.upper_bound(p);
    if (it == g_pinned.begin()) return false;
    --it;
    const auto* start = static_cast<const unsigned char*>(it->first);
    return c >= start && c + bytes <= start + it->second;
}

// A copy recorded into a capture: checked now (the pointers against the kind, as copy() does at
// once), run at each launch of the graph. Host memory must be pinned: the graph reads and writes
// it at every launch, long after the call returned, which pageable memory staged by the runtime
// at the call would not give.
cudaError_t record_copy(std::uint32_t /*correlation*/, void* dst, const void* src,
                        std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    bool host_ok = false;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        const bool dst_dev = is_device(dst, bytes), src_dev = is_device(src, bytes);
        host_ok =
            (dst_dev || is_pinned_locked(dst, bytes)) && (src_dev || is_pinned_locked(src, bytes));
    }
    if (!host_ok)
        return unsafe_stream_call(stream,
                                  "cudaMemcpyAsync of host memory that cudaHostAlloc did not "
                                  "return (a graph copies it at every launch)");
    record(stream, [=](std::uint32_t correlation) {
        const std::uint64_t start = trace::now();
        if (copy(dst, src, bytes, kind) == cudaSuccess && bytes > 0)
            trace::memcpy(correlation, kind, bytes, stream, start, trace::now());
    });
    return cudaSuccess;
}

cudaError_t traced_copy(unsigned cbid, void* dst, const void* src, std::size_t bytes,
                        cudaMemcpyKind kind, cudaStream_t stream, bool async) {
    if (!async) {
        if (const cudaError_t e = unsafe_call("cudaMemcpy"); e != cudaSuccess) return e;
    }
    trace::ApiCall call(cbid);
    const std::uint64_t start = trace::now();
    if (async) {
        call.returned_at(start);
        cudaError_t e = cudaSuccess;
        switch (route(stream, "cudaMemcpyAsync", &e)) {
            case Route::refused:
                return e;
            case Route::record:
                return record_copy(call.correlation(), dst, src, bytes, kind, stream);
            case Route::run:
                break;
        }
    }
    const cudaError_t e = copy(dst, src, bytes, kind);
    if (e == cudaSuccess && bytes > 0)
        trace::memcpy(call.correlation(), kind, bytes, stream, start, trace::now());
    return e;
}

cudaError_t traced_set(unsigned cbid, void* dst, int value, std::size_t bytes, cudaStream_t stream,
                       bool async) {
    if (!async) {
        if (const cudaError_t e = unsafe_call("cudaMemset"); e != cudaSuccess) return e;
    }
    trace::ApiCall call(cbid);
    const std::uint64_t start = trace::now();
    if (async) {
        call.returned_at(start);
        cudaError_t e = cudaSuccess;
        switch (route(stream, "cudaMemsetAsync", &e)) {
            case Route::refused:
                return e;
            case Route::record: {
                std::lock_guard<std::mutex> lock(g_mutex);
                if (!is_device(dst, bytes))
                    return fail(cudaErrorInvalidValue, "cudaMemsetAsync of " +
                                                           std::to_string(bytes) +
                                                           " bytes outside device memory");
            }
                record(stream, [=](std::uint32_t correlation) {
                    const std::uint64_t t0 = trace::now();
                    if (set(dst, value, bytes) == cudaSuccess && bytes > 0)
                        trace::memset(correlation, value, bytes, stream, t0, trace::now());
                });
                return cudaSuccess;
            case Route::run:
                break;
        }
    }
    const cudaError_t e = set(dst, value, bytes);
    if (e == cudaSuccess && bytes > 0)
        trace::memset(call.correlation(), value, bytes, stream, start, trace::now());
    return e;
}

// A synchronizing call: nothing to wait for (the work is done), so only its error and record.
cudaError_t traced_wait(unsigned cbid, int type, cudaStream_t stream, cudaEvent_t event) {
    trace::ApiCall call(cbid);
    const std::uint64_t start = trace::now();
    cudaError_t e;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        e = sticky();
    }
    trace::synchronize(call.correlation(), type, stream, event, start, trace::now());
    return e;
}

}  // namespace

DeviceAccess::DeviceAccess() {
    std::lock_guard<std::mutex> lock(g_mutex);
    guard_open();
}

DeviceAccess::~DeviceAccess() {
    std::lock_guard<std::mutex> lock(g_mutex);
    guard_close();
}

void set_host_guard(bool on) {
    std::lock_guard<std::mutex> lock(g_mutex);
    guard() = on;
}

void set_error(cudaError_t error, bool is_sticky, const std::string& message) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_errors.last = error;
    g_errors.message = message;
    if (is_sticky) g_errors.sticky = error;
}

bool is_device_memory(const void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return is_device(p, bytes);
}

int dynamic_shared_limit(const void* kernel) {
    std::lock_guard<std::mutex> lock(g_mutex);
    const auto it = g_dynamic_shared_optin.find(kernel);
    return it == g_dynamic_shared_optin.end() ? kSharedMemoryPerBlock : it->second;
}

std::string last_error_message() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_errors.message;
}

void reset_for_test() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_errors = Errors{};
    g_dynamic_shared_optin.clear();
}

StreamStats stream_stats() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_stream_stats;
}

}  // namespace napkin::emu

using napkin::emu::g_allocations;
using napkin::emu::g_errors;
using napkin::emu::g_mutex;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}

// The driver functions the emulator has: cuTensorMapEncodeTiled (emu_tma.h), which kernels'
// launchers fetch this way rather than link libcuda.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
    const bool found = symbol != nullptr && std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
    *fn = found ? reinterpret_cast<void*>(&napkin::emu::tensor_map_encode_tiled) : nullptr;
    if (status != nullptr)
        *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = napkin::emu::kSharedMemoryPerBlockOptin;
            return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlock:
            *value = napkin::emu::kSharedMemoryPerBlock;
            return cudaSuccess;
        case cudaDevAttrMaxThreadsPerBlock:
            *value = napkin::emu::kMaxThreadsPerBlock;
            return cudaSuccess;
        case cudaDevAttrMultiProcessorCount:
            *value = napkin::emu::kMultiprocessors;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor:
            *value = 9;
            return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor:
            *value = 0;
            return cudaSuccess;
        default:
            std::fprintf(stderr, "napkin cuda-emu: cudaDeviceGetAttribute(%d) is not emulated\n",
                         static_cast<int>(attr));
            return cudaErrorInvalidValue;
    }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || value > napkin::emu::kSharedMemoryPerBlockOptin)
        return napkin::emu::fail(cudaErrorInvalidValue,
                                 "cudaFuncSetAttribute: " + std::to_string(value) +
                                     " bytes of dynamic shared memory, more than the device has");
    napkin::emu::g_dynamic_shared_optin[func] = value;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    std::lock_guard<std::mutex> lock(g_mutex);
    const cudaError_t e = g_errors.last;
    g_errors.last = g_errors.sticky;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_errors.last;
}

const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess:
            return "no error";
        case cudaErrorInvalidValue:
            return "invalid argument";
        case cudaErrorMemoryAllocation:
            return "out of memory";
        case cudaErrorInvalidConfiguration:
            return "invalid configuration argument";
        case cudaErrorInvalidDevice:
            return "invalid device ordinal";
        case cudaErrorLaunchFailure:
            return "unspecified launch failure (emulated; the reason is printed above)";
        default:
            return "emulated CUDA error";
    }
}

const char* cudaGetErrorName(cudaError_t error) {
    return error == cudaSuccess ? "cudaSuccess" : "cudaError (emulated)";
}

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaMalloc"); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    // Aligned as cudaMalloc's are, and exactly `bytes` long, so AddressSanitizer catches a
    // kernel that reads one element past the end.
    // Under the host guard, chunks of the guard's arena that only the emulated device may touch.
    void* p = nullptr;
    if (napkin::emu::guard()) {
        p = napkin::emu::guarded_allocate(bytes);
        if (p == nullptr) return napkin::emu::fail(cudaErrorMemoryAllocation, "cudaMalloc failed");
    } else {
        if (posix_memalign(&p, 256, bytes) != 0)
            return napkin::emu::fail(cudaErrorMemoryAllocation, "cudaMalloc failed");
        std::memset(p, 0xff, bytes);  // not zero: nothing promises cudaMalloc'd memory is
    }
    g_allocations[static_cast<unsigned char*>(p)] = bytes;
    *ptr = p;
    return cudaSuccess;
}

// Managed memory: host memory in the device table (kernels and copies take it) that the host
// may touch too, so never guarded; where its pages are is emu_managed.cpp's.
cudaError_t cudaMallocManaged(void** ptr, std::size_t bytes, unsigned flags) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaMallocManaged"); e != cudaSuccess)
        return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    *ptr = nullptr;
    if (bytes == 0 || flags != cudaMemAttachGlobal)
        return napkin::emu::fail(cudaErrorInvalidValue,
                                 "cudaMallocManaged: zero bytes or flags other than global");
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes) != 0)
        return napkin::emu::fail(cudaErrorMemoryAllocation, "cudaMallocManaged failed");
    std::memset(p, 0xff, bytes);
    g_allocations[static_cast<unsigned char*>(p)] = bytes;
    napkin::emu::managed_added(p, bytes);
    *ptr = p;
    return cudaSuccess;
}

// Pinned host memory: host memory (not in the device table, so not in cudaMemGetInfo, and never
// guarded) that the emulator keeps a table of, so that cudaFreeHost takes only what
// cudaHostAlloc returned. Copies from it are host-to-device copies like any other.
cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaHostAlloc"); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    *ptr = nullptr;
    if (flags != cudaHostAllocDefault)
        return napkin::emu::fail(cudaErrorInvalidValue, "cudaHostAlloc: flags other than default");
    if (bytes == 0) return cudaSuccess;
    void* p = nullptr;
    if (posix_memalign(&p, 256, bytes) != 0)
        return napkin::emu::fail(cudaErrorMemoryAllocation, "cudaHostAlloc failed");
    std::memset(p, 0xff, bytes);
    napkin::emu::g_pinned[p] = bytes;
    ++napkin::emu::g_stream_stats.pinned_allocations;
    napkin::emu::g_stream_stats.pinned_bytes += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaFreeHost"); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (ptr == nullptr) return cudaSuccess;
    const auto it = napkin::emu::g_pinned.find(ptr);
    if (it == napkin::emu::g_pinned.end())
        return napkin::emu::fail(cudaErrorInvalidValue,
                                 "cudaFreeHost of a pointer cudaHostAlloc did not return");
    napkin::emu::g_stream_stats.pinned_bytes -= it->second;
    napkin::emu::g_pinned.erase(it);
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaFree"); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (ptr == nullptr) return cudaSuccess;
    if (napkin::emu::managed_removed(ptr)) {
        g_allocations.erase(static_cast<unsigned char*>(ptr));
        std::free(ptr);
        return cudaSuccess;
    }
    const auto it = g_allocations.find(static_cast<unsigned char*>(ptr));
    if (it == g_allocations.end())
        return napkin::emu::fail(cudaErrorInvalidValue,
                                 "cudaFree of a pointer cudaMalloc did not return");
    const std::size_t bytes = it->second;
    g_allocations.erase(it);
    if (napkin::emu::guarded(ptr))
        napkin::emu::guarded_free(ptr, bytes);
    else
        std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    return napkin::emu::traced_copy(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, dst, src, bytes,
                                    kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return napkin::emu::traced_copy(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, dst, src, bytes,
                                    kind, stream, true);
}

cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
    return napkin::emu::traced_set(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, dst, value, bytes,
                                   nullptr, false);
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
    return napkin::emu::traced_set(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, dst, value,
                                   bytes, stream, true);
}

cudaError_t cudaDeviceSynchronize(void) {
    if (const cudaError_t e = napkin::emu::unsafe_call("cudaDeviceSynchronize"); e != cudaSuccess)
        return e;
    return napkin::emu::traced_wait(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
                                    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE,
                                    nullptr, nullptr);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (const cudaError_t e =
            stream == nullptr ? napkin::emu::unsafe_call("cudaStreamSynchronize")
                              : napkin::emu::unsafe_stream_call(stream, "cudaStreamSynchronize");
        e != cudaSuccess)
        return e;
    return napkin::emu::traced_wait(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
                                    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, stream,
                                    nullptr);
}

// ---- devices, versions, memory ----

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "%s", napkin::emu::kDeviceName);
    prop->totalGlobalMem = napkin::emu::kGlobalMemoryBytes;
    prop->sharedMemPerBlock = napkin::emu::kSharedMemoryPerBlock;
    prop->sharedMemPerBlockOptin = napkin::emu::kSharedMemoryPerBlockOptin;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = napkin::emu::kMaxThreadsPerBlock;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    // An H100 (sm_90); NAPKIN_EMU_SM=80 makes it report another capability (an A100's), for
    // the tests of what an older GPU refuses (fp8-amp needs sm_89).
    const char* sm = std::getenv("NAPKIN_EMU_SM");
    const int capability = sm != nullptr ? std::atoi(sm) : 90;
    prop->major = capability / 10;
    prop->minor = capability % 10;
    prop->multiProcessorCount = napkin::emu::kMultiprocessors;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
    *version = CUDART_VERSION;  // the headers the emulator was built against
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
    *version = 0;  // no driver: the probe then prints none
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::size_t used = 0;
    for (const auto& [p, bytes] : g_allocations)
        used += bytes;
    // Managed allocations take device memory only while their pages are there.
    used -= napkin::emu::managed_host_bytes();
    *total = napkin::emu::kGlobalMemoryBytes;
    *free = used < *total ? *total - used : 0;
    return cudaSuccess;
}

// ---- streams and events: work is done when it is queued, so both are bookkeeping ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto* s = reinterpret_cast<cudaStream_t>(new char(0));
    napkin::emu::g_streams.insert(s);
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (napkin::emu::g_streams.erase(stream) == 0)
        return napkin::emu::fail(cudaErrorInvalidResourceHandle,
                                 "cudaStreamDestroy of a stream cudaStreamCreate did not return");
    delete reinterpret_cast<char*>(stream);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto* e = new napkin::emu::Event;
    e->timing = (flags & cudaEventDisableTiming) == 0;
    *event = reinterpret_cast<cudaEvent_t>(e);
    napkin::emu::g_events.insert(*event);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (napkin::emu::g_events.erase(event) == 0)
        return napkin::emu::fail(cudaErrorInvalidResourceHandle,
                                 "cudaEventDestroy of an event cudaEventCreate did not return");
    napkin::emu::event_destroyed(event);
    delete reinterpret_cast<napkin::emu::Event*>(event);
    return cudaSuccess;
}

// On a capturing stream the record is the capture's (a point to fork from or join at), not a
// time: the event keeps what it held.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(g_mutex);
    napkin::emu::Event* e = napkin::emu::find_event(event, "cudaEventRecord");
    if (e == nullptr) return cudaErrorInvalidResourceHandle;
    if (napkin::emu::event_recorded(event, stream)) return cudaSuccess;
    e->recorded = true;
    e->ns = napkin::emu::trace::now();
    return napkin::emu::sticky();
}

// Work is done when queued, so a stream waiting for an event has nothing to wait for; the call
// is checked (a stream and an event the emulator made), counted, and recorded as CUPTI records
// it: a synchronization of type stream-wait-event (the host does not wait).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
    napkin::emu::trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020);
    const std::uint64_t start = napkin::emu::trace::now();
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (stream != nullptr && napkin::emu::g_streams.count(stream) == 0)
            return napkin::emu::fail(cudaErrorInvalidResourceHandle,
                                     "cudaStreamWaitEvent on a stream cudaStreamCreate did not "
                                     "return");
        if (napkin::emu::find_event(event, "cudaStreamWaitEvent") == nullptr)
            return cudaErrorInvalidResourceHandle;
        if (flags != cudaEventWaitDefault)
            return napkin::emu::fail(cudaErrorInvalidValue,
                                     "cudaStreamWaitEvent: flags other than 0");
    }
    // In a capture the wait is an edge of the graph (a fork or a join), not a wait.
    if (const cudaError_t e = napkin::emu::stream_waits_for(stream, event); e != cudaSuccess)
        return e;
    cudaError_t refused = cudaSuccess;
    switch (napkin::emu::route(stream, "cudaStreamWaitEvent", &refused)) {
        case napkin::emu::Route::refused:
            return refused;
        case napkin::emu::Route::record:
            return cudaSuccess;
        case napkin::emu::Route::run:
            break;
    }
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        ++napkin::emu::g_stream_stats.stream_waits;
    }
    napkin::emu::trace::synchronize(call.correlation(),
                                    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, stream,
                                    event, start, napkin::emu::trace::now());
    std::lock_guard<std::mutex> lock(g_mutex);
    return napkin::emu::sticky();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (const cudaError_t e = napkin::emu::unsafe_event_call(event, "cudaEventQuery");
        e != cudaSuccess)
        return e;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (napkin::emu::find_event(event, "cudaEventQuery") == nullptr)
        return cudaErrorInvalidResourceHandle;
    return napkin::emu::sticky();  // recorded work is done work
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (const cudaError_t e = napkin::emu::unsafe_event_call(event, "cudaEventSynchronize");
        e != cudaSuccess)
        return e;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (napkin::emu::find_event(event, "cudaEventSynchronize") == nullptr)
            return cudaErrorInvalidResourceHandle;
    }
    return napkin::emu::traced_wait(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
                                    CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, nullptr,
                                    event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    for (cudaEvent_t e : {start, end})
        if (const cudaError_t r = napkin::emu::unsafe_event_call(e, "cudaEventElapsedTime");
            r != cudaSuccess)
            return r;
    std::lock_guard<std::mutex> lock(g_mutex);
    const napkin::emu::Event* a = napkin::emu::find_event(start, "cudaEventElapsedTime");
    const napkin::emu::Event* b = napkin::emu::find_event(end, "cudaEventElapsedTime");
    if (a == nullptr || b == nullptr) return cudaErrorInvalidResourceHandle;
    if (!a->timing || !b->timing)
        return napkin::emu::fail(
            cudaErrorInvalidResourceHandle,
            "cudaEventElapsedTime of an event made with cudaEventDisableTiming");
    if (!a->recorded || !b->recorded)
        return napkin::emu::fail(cudaErrorInvalidResourceHandle,
                                 "cudaEventElapsedTime of an event never recorded");
    *ms = static_cast<float>(static_cast<double>(static_cast<std::int64_t>(b->ns - a->ns)) * 1e-6);
    return cudaSuccess;
}

}  // extern "C"
