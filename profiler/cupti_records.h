// cupti_records: turns GPU activity, as the CUPTI Activity API reports it, into the profiler's
// events (profiler/event.h), with no CUDA or CUPTI header in sight. The collector
// (profiler/cupti_collector.*, CUDA builds only) copies each CUPTI record into a GpuActivity and
// hands batches here; the tests feed synthetic ones, so everything that decides what the trace
// shows is tested on machines without a GPU (libkineto keeps the same split).
//
// What it does:
//  - kernels, memcpys and memsets become ranges on one device track per (device, stream),
//    named "stream 7" and created on first use; runtime API calls (cudaLaunchKernel, ...) become
//    launch ranges on a "cuda api" track; synchronization records become ranges there too;
//  - each launch and the kernel it launched share CUPTI's correlation id: a flow starts at the
//    launch and ends at the kernel (the trace's launch -> kernel arrows);
//  - a kernel carries its analytic FLOPs and bytes when the engine registered them: the engine
//    pushes an external correlation id around each kernel call (cuptiActivityPushExternalCorrelationId)
//    and registers the id's name and KernelCost here; CUPTI's external-correlation records map
//    correlation ids to those ids;
//  - GPU timestamps (CUPTI's clock, ns) move to the run's clock through a ClockSync, a linear
//    map fitted from pairs of (cuptiGetTimestamp, steady_clock) taken at start and at each flush;
//  - records the collector lost (CUPTI's dropped count, buffers refused at the cap) are counted,
//    and records it cannot place (a flow whose launch never came) are counted, never thrown.
// Tests: tests/profiler/cupti_records_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cost.h"
#include "profiler/event.h"

namespace napkin::profiler {

enum class GpuActivityKind : std::uint8_t {
    kernel,
    memcpy,
    memset,
    runtime,          // a CUDA runtime API call on a host thread
    synchronization,  // cudaStreamSynchronize, cudaEventSynchronize, ...
    external_correlation,  // correlation_id -> external_id
};

// One CUPTI record, reduced to what the trace shows. Timestamps are CUPTI's (ns, its clock).
struct GpuActivity {
    GpuActivityKind kind = GpuActivityKind::kernel;
    std::string name;  // kernel name, "cudaLaunchKernel", "memcpy HtoD"
    std::uint64_t start_ns = 0, end_ns = 0;
    std::uint32_t correlation_id = 0;
    std::uint64_t external_id = 0;  // external_correlation records only
    std::uint32_t device = 0, stream = 0;
    std::uint32_t host_thread = 0;  // runtime and synchronization records
    std::int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    std::int32_t shared_bytes = 0, registers = 0;
    std::uint64_t bytes = 0;  // memcpy, memset
};

// CUPTI's clock to the run's: t_run = host_at_sync + (t_cupti - cupti_at_sync) * rate, the rate
// fitted between the first and the latest pair (1 until there are two pairs).
class ClockSync {
public:
    void add_pair(std::uint64_t cupti_ns, std::int64_t run_ns);
    std::int64_t to_run_ns(std::uint64_t cupti_ns) const;
    bool ready() const { return !pairs_.empty(); }

private:
    std::vector<std::pair<std::uint64_t, std::int64_t>> pairs_;
    double rate_ = 1.0;
};

class CuptiTranslator {
public:
    explicit CuptiTranslator(Recorder& recorder) : recorder_(recorder) {}

    // The engine names the kernel behind an external id before launching it.
    void register_external(std::uint64_t external_id, std::string name, const KernelCost& cost);

    ClockSync& clock() { return clock_; }

    // Translates a batch (any order) into events recorded on the recorder. Launches and
    // kernels are matched by correlation id across batches (CUPTI delivers them in separate
    // buffers): the flow is recorded once both ends are known.
    void add(const std::vector<GpuActivity>& batch);

    // Records lost before they reached us (CUPTI dropped, buffers over the cap).
    void count_lost(std::uint64_t n) { lost_ += n; }
    std::uint64_t lost() const { return lost_; }
    std::uint64_t kernels() const { return kernels_; }
    std::uint64_t unmatched_flows() const { return unmatched_; }

private:
    TrackId stream_track(std::uint32_t device, std::uint32_t stream);
    TrackId api_track();

    Recorder& recorder_;
    ClockSync clock_;
    std::map<std::pair<std::uint32_t, std::uint32_t>, TrackId> stream_tracks_;
    TrackId api_track_ = 0, sync_track_ = 0;
    struct Registered {
        std::string name;
        KernelCost cost;
    };
    std::map<std::uint64_t, Registered> external_;   // external id -> what the engine said
    std::map<std::uint32_t, std::uint64_t> corr_to_external_;
    std::map<std::uint32_t, std::int64_t> launch_at_;  // correlation id -> launch time (run ns), flow started
    // Kernels seen before their launch: correlation id -> (time inside the kernel, its track).
    std::map<std::uint32_t, std::pair<std::int64_t, TrackId>> kernel_waiting_;
    std::uint64_t lost_ = 0, kernels_ = 0, unmatched_ = 0;
};

}  // namespace napkin::profiler
