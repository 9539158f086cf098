// State the emulated runtime (emu_cudart.cpp) and the kernel scheduler (emu_kernels.cpp) share:
// the error a launch leaves for cudaGetLastError and the synchronizing calls, and the device's
// limits as an H100 reports them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace napkin::emu {

// The H100 SXM's limits (cudaDeviceGetAttribute on sm_90), which the scheduler enforces.
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedMemoryPerBlock = 48 * 1024;        // without opting in
inline constexpr int kSharedMemoryPerBlockOptin = 227 * 1024;  // cudaFuncSetAttribute's ceiling
inline constexpr int kMultiprocessors = 132;
inline constexpr std::size_t kGlobalMemoryBytes = 85'899'345'920;  // 80 GiB, as cudaMemGetInfo says
inline constexpr const char* kDeviceName = "napkin cuda-emu (CPU; H100 limits)";

// Whether [p, p + bytes) lies inside one cudaMalloc allocation (the emulated NCCL checks its
// buffers with it).
bool is_device_memory(const void* p, std::size_t bytes);

// A launch's error. `sticky` ones (a fault inside a kernel) stay for every later call, as a
// real context's do; the others (a bad configuration) are cleared by cudaGetLastError.
void set_error(cudaError_t error, bool sticky, const std::string& message);

// The host guard: device memory that host code reads or writes directly (not through a copy) is
// host memory here, so the emulator would run what a GPU answers with a segfault. With the guard
// on, cudaMalloc maps allocations inaccessible except while the emulated device works on them (a
// kernel, a copy, a set, a GEMM, a collective: each holds a DeviceAccess, which opens every
// guarded allocation until the outermost one ends), so such a host access faults here too. On
// with NAPKIN_EMU_HOST_GUARD=1, and in the emulated CUDA backend plugin (emu_plugin.cpp) unless
// that is 0; set_host_guard switches it for allocations made afterwards. Guarded allocations are
// whole 64 KiB chunks, so AddressSanitizer no longer sees a read just past their end.
void set_host_guard(bool on);
// The guard's memory (emu_guard.cpp), under the emulator's mutex: an allocation of its arena
// (filled with 0xff; null when the address space cannot be had), whether a pointer is in the
// arena, its release, and the DeviceAccess nesting (the outermost end closes what the device
// opened).
void* guarded_allocate(std::size_t bytes);
bool guarded(const void* p);
void guarded_free(void* p, std::size_t bytes);
void guard_open();
void guard_close();
class DeviceAccess {
public:
    DeviceAccess();
    ~DeviceAccess();
    DeviceAccess(const DeviceAccess&) = delete;
    DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// The dynamic shared memory `kernel` may launch with: 48 KiB, or more where
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize) allowed it.
int dynamic_shared_limit(const void* kernel);

// Managed memory (emu_managed.cpp; cudaMallocManaged in emu_cudart.cpp): what the engine asked
// the driver for. Bytes are counted per call, whole allocations (the emulator refuses a prefetch
// of part of one).
struct ManagedStats {
    std::uint64_t allocations = 0;         // cudaMallocManaged calls
    std::uint64_t advised_host_bytes = 0;  // cudaMemAdvise(SetPreferredLocation, host)
    std::uint64_t prefetches = 0;
    std::uint64_t to_device_bytes = 0, to_host_bytes = 0;  // cudaMemPrefetchAsync, by direction
};
void managed_added(const void* p, std::size_t bytes);  // cudaMallocManaged's
bool managed_removed(const void* p);  // cudaFree's: true when p was managed (and is no more)
std::size_t managed_host_bytes();     // managed bytes on the host now (not device memory)
ManagedStats managed_stats();
void reset_managed_stats();

// Pinned host memory and cross-stream waits (emu_cudart.cpp): cudaHostAlloc calls, the pinned
// bytes held now, and cudaStreamWaitEvent calls, for the engine's tests of its copy stream.
struct StreamStats {
    std::uint64_t pinned_allocations = 0;
    std::uint64_t pinned_bytes = 0;
    std::uint64_t stream_waits = 0;
};
StreamStats stream_stats();

// Stream capture and CUDA graphs (emu_graph.cpp). Work queued on a stream that captures is
// recorded, not run: a Work runs at each launch of the graph made from the capture, in the order
// it was recorded (a valid order of the real graph's dependencies: the host queued it so), with
// the correlation id of the cudaGraphLaunch call for its activity record.
using Work = std::function<void(std::uint32_t correlation)>;
// What becomes of work queued on `stream` by `call`: run now, recorded into the stream's
// capture, or refused (the legacy stream while a capture is under way, or a stream whose capture
// was invalidated: the error is set, printed and returned through *error).
enum class Route : std::uint8_t { run, record, refused };
Route route(cudaStream_t stream, const char* call, cudaError_t* error);
void record(cudaStream_t stream, Work work);  // after route() said record
// A call that is not capture-safe (cudaMalloc, cudaFree, a synchronous copy, a device-wide
// synchronize): while a capture in global or thread-local mode is under way it fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, as the real runtime does;
// returns the error, or cudaSuccess.
cudaError_t unsafe_call(const char* call);
// A host wait on `stream` (cudaStreamSynchronize): the same error while that stream captures.
cudaError_t unsafe_stream_call(cudaStream_t stream, const char* call);
// Events and capture: a record on a capturing stream marks the event as the capture's (a fork
// or join point, never a timestamp); a host query, synchronize or elapsed time of such an event
// is refused (unsafe_event_call), and a stream waiting for it joins the capture
// (stream_waits_for: also refuses a capturing stream waiting for an event from outside it,
// cudaErrorStreamCaptureIsolation). event_recorded returns whether the record was captured.
bool event_recorded(cudaEvent_t event, cudaStream_t stream);
cudaError_t unsafe_event_call(cudaEvent_t event, const char* call);
cudaError_t stream_waits_for(cudaStream_t stream, cudaEvent_t event);
void event_destroyed(cudaEvent_t event);
// Captures ended into graphs, graph launches and the nodes they ran, so far in this process.
struct GraphStats {
    std::uint64_t captures = 0, launches = 0, nodes_run = 0;
};
GraphStats graph_stats();

// Launches of the kernel named `kernel` (its name in the .cu: "nonfinite_check_many_kernel")
// that ran so far in this process.
std::uint64_t launches_of(const std::string& kernel);

// For the emulator's own tests (tests/cuda_emu/emu_test.cpp): the last failure's message, and
// a fresh device (errors cleared, no kernel opted in), which a real context cannot give.
std::string last_error_message();
void reset_for_test();

}  // namespace napkin::emu
