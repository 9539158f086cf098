// The CUPTI Activity API inside the CUDA plugin: the device side of the profiler's GPU
// collection (napkin's side: profiler/cupti_collector.h). CUPTI fills buffers it asks us for on
// its own thread; each completed buffer is parsed at once into plain GpuActivity records
// (profiler/gpu_activity.h) and kept until the engine's next flush takes them through the table
// (core/cuda/cuda_engine_api.h, the "GPU activity" block).
//
// A profiler never stops the run it observes (libkineto's rule): every function is noexcept, a
// failed CUPTI call warns once on stderr and is counted, buffers are capped (kMaxBuffers of
// kBufferBytes in flight; past that CUPTI drops records and counts them), and every count goes
// back in GpuActivityStats. CUPTI's callbacks are process-wide, so is this state: one collection
// at a time (a second enable fails with a reason).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/gpu_activity.h"

namespace napkin::cuda {

inline constexpr std::size_t kActivityBufferBytes = std::size_t{8} << 20;
inline constexpr std::size_t kActivityMaxBuffers = 64;  // 512 MiB of records in flight at most

// Enables concurrent kernel, memcpy, memset, runtime, driver, synchronization and external
// correlation records, and subscribes to CUPTI's graph-node resource callbacks: a CUDA graph
// node made while an external id is pushed (stream capture), or cloned from one
// (instantiation), comes back as a graph_node record mapping its id to that external id, and
// graph-launched records carry their node's id (docs/CUDA.md "CUDA graphs"). false with the
// reason in error (NUL-terminated) when it cannot; a failed subscription only warns and counts.
bool activity_enable(char* error, std::size_t error_bytes) noexcept;
void activity_disable() noexcept;  // flushes (forced) and disables; pending records are kept
// CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 ids around the engine's kernel calls (mirrored per
// thread: CUPTI shows its stack to no callback).
void activity_push_external(std::uint64_t id) noexcept;
void activity_pop_external() noexcept;
std::uint64_t activity_timestamp() noexcept;  // cuptiGetTimestamp, ns
// cuptiActivityFlushAll (forced when wait), then moves the parsed records into *out and the
// totals since enable into *stats.
void activity_flush(bool wait, std::vector<profiler::GpuActivity>* out,
                    profiler::GpuActivityStats* stats) noexcept;

}  // namespace napkin::cuda
