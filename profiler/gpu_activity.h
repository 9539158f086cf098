// gpu_activity: GPU activity records as plain data, the one thing that crosses the boundary
// between the CUDA plugin (core/cuda/cupti_activity.cpp, which reads CUPTI's buffers) and the
// profiler (profiler/cupti_records.h, which turns records into trace events). No CUDA or CUPTI
// type here, and nothing to link: the plugin includes this header and stays free of
// napkin_profiler (docs/CUDA.md: `nm -u libnapkin_cuda.so | grep napkin` prints nothing).
//
// Timestamps are CUPTI's (ns, its own clock); the profiler maps them onto the run's clock.
// Tests feed synthetic records (tests/profiler/cupti_records_test.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace napkin::profiler {

enum class GpuActivityKind : std::uint8_t {
    kernel,
    memcpy,
    memset,
    runtime,               // a CUDA runtime API call on a host thread (cudaLaunchKernel, ...)
    driver,                // a driver API call (cuLaunchKernel: how cuBLAS(Lt) launches)
    synchronization,       // cudaStreamSynchronize, cudaEventSynchronize, ... ("synchronize");
                           // cudaStreamWaitEvent ("stream wait event")
    external_correlation,  // correlation_id -> external_id (the engine's kernel tag)
    graph_node,            // graph_node_id -> external_id: a CUDA graph node made while the
                           // engine's id was pushed (at capture), or cloned from one (at
                           // instantiation); no time, no device
};

// One CUPTI record, reduced to what the trace shows.
struct GpuActivity {
    GpuActivityKind kind = GpuActivityKind::kernel;
    std::string name;  // mangled kernel name, "cudaLaunchKernel", "memcpy HtoD"
    std::uint64_t start_ns = 0, end_ns = 0;
    std::uint32_t correlation_id = 0;
    std::uint64_t external_id = 0;  // external_correlation and graph_node records only
    // Device records of work a graph launch ran (CUPTI's graphId, graphNodeId; 0 otherwise): the
    // node of the executable graph, which graph_node records map to the engine's call.
    std::uint32_t graph_id = 0;
    std::uint64_t graph_node_id = 0;
    std::uint32_t device = 0, stream = 0;
    std::uint32_t host_thread = 0;  // runtime, driver and synchronization records
    std::int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    std::int32_t shared_bytes = 0, registers = 0;
    std::uint64_t bytes = 0;  // memcpy, memset
};

// What the plugin's collection lost or could not do, counted since activity was enabled.
struct GpuActivityStats {
    std::uint64_t records = 0;          // records handed over
    std::uint64_t dropped_records = 0;  // CUPTI's count (cuptiActivityGetNumDroppedRecords)
    std::uint64_t buffers_refused = 0;  // buffer requests refused at the cap (their records are
                                        // counted in dropped_records)
    std::uint64_t failures = 0;         // CUPTI calls that failed (each warned once on stderr)
};

}  // namespace napkin::profiler
