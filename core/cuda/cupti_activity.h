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
// correlation records. false with the reason in error (NUL-terminated) when it cannot.
bool activity_enable(char* error, std::size_t error_bytes) noexcept;
void activity_disable() noexcept;  // flushes (forced) and disables; pending records are kept
// CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 ids around the engine's kernel calls.
void activity_push_external(std::uint64_t id) noexcept;
void activity_pop_external() noexcept;
std::uint64_t activity_timestamp() noexcept;  // cuptiGetTimestamp, ns
// cuptiActivityFlushAll (forced when wait), then moves the parsed records into *out and the
// totals since enable into *stats.
void activity_flush(bool wait, std::vector<profiler::GpuActivity>* out,
                    profiler::GpuActivityStats* stats) noexcept;

}  // namespace napkin::cuda
