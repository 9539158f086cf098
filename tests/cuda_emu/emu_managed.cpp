// Managed memory on the emulator (cudaMallocManaged is in emu_cudart.cpp beside cudaMalloc): host
// memory both sides may touch, so the host guard never covers it. What the real driver decides
// (where the pages are) is kept as a flag per allocation, moved only by the calls that ask for it:
// cudaMemPrefetchAsync of the whole allocation to the device or the host. cudaMemGetInfo counts
// only the allocations that are on the device, and every advice and prefetch is counted (bytes,
// direction), so tests can hold the engine's page traffic against the estimator's prediction.
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>

#include "tests/cuda_emu/emu_state.h"

namespace napkin::emu {

namespace {

struct Managed {
    std::size_t bytes = 0;
    bool on_device = false;  // where the last prefetch moved it (the host at first)
};

std::mutex g_managed_mutex;
std::map<const unsigned char*, Managed> g_managed;  // start -> allocation
ManagedStats g_stats;

// The allocation [p, p + bytes) lies in, or null.
Managed* find_locked(const void* p, std::size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    auto it = g_managed.upper_bound(c);
    if (it == g_managed.begin()) return nullptr;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second.bytes ? &it->second : nullptr;
}

cudaError_t refuse(const std::string& message) {
    set_error(cudaErrorInvalidValue, false, message);
    return cudaErrorInvalidValue;
}

}  // namespace

void managed_added(const void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(g_managed_mutex);
    g_managed[static_cast<const unsigned char*>(p)] = Managed{bytes, false};
    ++g_stats.allocations;
}

bool managed_removed(const void* p) {
    std::lock_guard<std::mutex> lock(g_managed_mutex);
    return g_managed.erase(static_cast<const unsigned char*>(p)) != 0;
}

std::size_t managed_host_bytes() {
    std::lock_guard<std::mutex> lock(g_managed_mutex);
    std::size_t sum = 0;
    for (const auto& [p, m] : g_managed)
        if (!m.on_device) sum += m.bytes;
    return sum;
}

ManagedStats managed_stats() {
    std::lock_guard<std::mutex> lock(g_managed_mutex);
    return g_stats;
}

void reset_managed_stats() {
    std::lock_guard<std::mutex> lock(g_managed_mutex);
    g_stats = ManagedStats{};
}

}  // namespace napkin::emu

extern "C" {

cudaError_t cudaMemAdvise(const void* ptr, std::size_t bytes, cudaMemoryAdvise advice,
                          cudaMemLocation location) {
    std::lock_guard<std::mutex> lock(napkin::emu::g_managed_mutex);
    if (napkin::emu::find_locked(ptr, bytes) == nullptr)
        return napkin::emu::refuse("cudaMemAdvise of " + std::to_string(bytes) +
                                   " bytes outside managed memory");
    if (advice == cudaMemAdviseSetPreferredLocation && location.type == cudaMemLocationTypeHost)
        napkin::emu::g_stats.advised_host_bytes += bytes;
    return cudaSuccess;
}

cudaError_t cudaMemPrefetchAsync(const void* ptr, std::size_t bytes, cudaMemLocation location,
                                 unsigned /*flags*/, cudaStream_t /*stream*/) {
    std::lock_guard<std::mutex> lock(napkin::emu::g_managed_mutex);
    napkin::emu::Managed* m = napkin::emu::find_locked(ptr, bytes);
    if (m == nullptr)
        return napkin::emu::refuse("cudaMemPrefetchAsync of " + std::to_string(bytes) +
                                   " bytes outside managed memory");
    const bool to_device = location.type == cudaMemLocationTypeDevice;
    if (to_device && location.id != 0)
        return napkin::emu::refuse("cudaMemPrefetchAsync to device " + std::to_string(location.id) +
                                   " (the emulator has device 0)");
    // Residency is per allocation: a prefetch of part of one moves only part of it, which the
    // flag cannot say, so the emulator asks for whole allocations (the engine prefetches tensors).
    if (bytes != m->bytes)
        return napkin::emu::refuse("cudaMemPrefetchAsync of " + std::to_string(bytes) +
                                   " bytes of a managed allocation of " + std::to_string(m->bytes));
    m->on_device = to_device;
    ++napkin::emu::g_stats.prefetches;
    (to_device ? napkin::emu::g_stats.to_device_bytes : napkin::emu::g_stats.to_host_bytes) +=
        bytes;
    return cudaSuccess;
}

}  // extern "C"
