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
//  - runtime and driver API calls both count as launches (cuBLASLt launches through the driver);
//  - a kernel carries its analytic FLOPs and bytes when the engine registered them: the engine
//    pushes an external correlation id around each kernel call
//    (cuptiActivityPushExternalCorrelationId) and registers the id's name and KernelCost here;
//    CUPTI's external-correlation records map correlation ids to those ids. The event takes the
//    engine's name ("matmul_backward", the CPU's device track's) with CUPTI's in arg "kernel". One
//    engine call may run several kernels (a backward matmul is two or three GEMMs): their share of
//    the call's cost is in proportion to their durations, so the shares add up to the cost exactly
//    and each kernel shows the call's achieved FLOP/s (arg "cost_split" says how many shared it);
//  - CUDA graphs: the kernels, copies and sets of a graph launch share the launch's correlation
//    id and carry their node's id (graph_node_id). graph_node records, made by the plugin when
//    the capture created each node while the engine's external id was pushed (and when
//    instantiation cloned it), map node ids to external ids; a graph-launched record takes the
//    engine's name, cost and op through its node, and shares its call's cost with the other
//    nodes of that call in the same launch. A node with no mapping keeps CUPTI's name and gets
//    the op "cuda_graph". Each graph-launched record gets a flow of its own from the launch;
//  - every record tagged with an op (the host range open when the engine made the call) carries
//    it in arg "op": the per-op table's attribution (profiler/step_profile.h), with or without
//    graphs;
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
#include "profiler/gpu_activity.h"

namespace napkin::profiler {

// CUPTI's clock to the run's: t_run = host_at_sync + (t_cupti - cupti_at_sync) * rate, the rate
// fitted between the first and the latest pair. A pair's run time is the middle of a host read
// window_ns wide; the rate stays 1 until two pairs are far enough apart for their windows to
// bound its error to 1e-5 (a slow or preempted read only delays the fit, it never skews it).
class ClockSync {
public:
    void add_pair(std::uint64_t cupti_ns, std::int64_t run_ns, std::int64_t window_ns = 0);
    std::int64_t to_run_ns(std::uint64_t cupti_ns) const;
    bool ready() const { return !pairs_.empty(); }
    double rate() const { return rate_; }

private:
    struct Pair {
        std::uint64_t cupti_ns;
        std::int64_t run_ns;
        std::int64_t window_ns;
    };
    std::vector<Pair> pairs_;
    double rate_ = 1.0;
};

class CuptiTranslator {
public:
    explicit CuptiTranslator(Recorder& recorder) : recorder_(recorder) {}

    // The engine names the kernel behind an external id before launching it, and the op range
    // it is called in ("" for none).
    void register_external(std::uint64_t external_id, std::string name, const KernelCost& cost,
                           std::string op = {});

    // The op of graph-launched work whose node maps to no engine call.
    static constexpr const char* kUnmappedGraphOp = "cuda_graph";

    ClockSync& clock() { return clock_; }

    // Translates a batch (any order) into events recorded on the recorder. Launches and
    // kernels are matched by correlation id across batches (CUPTI delivers them in separate
    // buffers): the flow is recorded once both ends are known.
    void add(const std::vector<GpuActivity>& batch);

    // Records lost before they reached us (CUPTI dropped, buffers over the cap).
    void count_lost(std::uint64_t n) { lost_ += n; }
    std::uint64_t lost() const { return lost_; }
    std::uint64_t kernels() const { return kernels_; }
    std::uint64_t tagged() const {
        return tagged_;
    }  // device records with the engine's name and cost
    std::uint64_t unmatched_flows() const { return unmatched_; }

    // The end of collection: kernels whose launch never came are counted as unmatched.
    void finish();

private:
    struct Registered {
        std::string name;
        KernelCost cost;
        std::string op;
    };
    // The device records of one engine call in a batch: their count and summed duration, so that
    // each gets its share of the call's cost, and what is left to share.
    // One engine call's device records. Bytes are split over all of them by duration; FLOPs
    // over its kernels only (a memset or copy inside a GEMM's call does none of the GEMM's math).
    struct CostGroup {
        std::uint64_t records = 0, left = 0;
        std::uint64_t kernels = 0, kernels_left = 0;
        double dur = 0, kernel_dur = 0;
        std::uint64_t flops_left = 0, bytes_left = 0;
    };
    // By (graph launch's correlation id or 0, external id): a graph launch runs every call of
    // its capture again, each a group of its own.
    using CostKey = std::pair<std::uint32_t, std::uint64_t>;
    using CostGroups = std::map<CostKey, CostGroup>;

    TrackId stream_track(std::uint32_t device, std::uint32_t stream);
    TrackId api_track();
    std::uint64_t external_of(const GpuActivity& a) const;  // 0: none known
    const Registered* registered(const GpuActivity& a) const;
    static CostKey cost_key(const GpuActivity& a, std::uint64_t external) {
        return {a.graph_node_id != 0 ? a.correlation_id : 0u, external};
    }
    void launch_flow(const GpuActivity& a, TrackId track, std::int64_t start, std::int64_t end);
    CostGroups cost_groups(const std::vector<GpuActivity>& batch) const;
    std::map<std::size_t, std::int64_t> early_starts(const std::vector<GpuActivity>& batch);
    void add_host_record(const GpuActivity& a, RangeEvent r);
    void add_device_record(const GpuActivity& a, RangeEvent r, std::int64_t started_early,
                           CostGroups& groups);
    void flow_pair(std::uint64_t flow_id, std::int64_t launch_ns, TrackId kernel_track,
                   std::int64_t kernel_ns);

    Recorder& recorder_;
    ClockSync clock_;
    std::map<std::pair<std::uint32_t, std::uint32_t>, TrackId> stream_tracks_;
    // Per stream, the last device record's start and the latest end so far (device clock).
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::pair<std::uint64_t, std::uint64_t>>
        stream_last_;
    TrackId api_track_ = 0, sync_track_ = 0;
    std::map<std::uint64_t, Registered> external_;  // external id -> what the engine said
    std::map<std::uint32_t, std::uint64_t> corr_to_external_;
    std::map<std::uint64_t, std::uint64_t> node_to_external_;  // graph node id -> external id
    std::map<std::uint32_t, std::int64_t>
        launch_at_;  // correlation id -> launch time (run ns), flow started
    // Device records seen before their launch: correlation id -> (time inside the record, its
    // track, its flow id); several for a graph launch.
    struct Waiting {
        std::int64_t t_ns;
        TrackId track;
        std::uint64_t flow_id;
    };
    std::multimap<std::uint32_t, Waiting> kernel_waiting_;
    std::uint64_t lost_ = 0, kernels_ = 0, tagged_ = 0, unmatched_ = 0;
    std::uint64_t graph_flows_ = 0;  // flow ids handed to graph-launched records
};

}  // namespace napkin::profiler
