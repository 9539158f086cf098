#include "profiler/cupti_records.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

namespace napkin::profiler {

namespace {

// Flow ids of CUPTI correlations live above the engine's own (Recorder::next_flow_id counts
// from 1), so the two kinds never collide in one trace.
constexpr std::uint64_t kCorrelationFlowBase = std::uint64_t{1} << 40;
// A graph launch's records share its correlation id: each gets a flow id of its own, above
// every correlation's.
constexpr std::uint64_t kGraphFlowBase = std::uint64_t{1} << 41;

// Keeps at most this many launches waiting for their kernel: calls that launch nothing
// (cudaMemcpy's API record has a memcpy, cudaMalloc has nothing) would otherwise pile up.
constexpr std::size_t kMaxPending = 1 << 20;

// The shortest span over which ClockSync fits a rate, and the largest error the pairs' read
// windows may put on it: the host time of a pair is known to +-half its window, so two pairs
// dc apart bound the fitted rate's error by (window_a + window_b) / (2 dc). A rate is fitted only
// when that bound is 1e-5 or less (0.1 ns on a 10 us kernel); until then the rate stays 1.
constexpr double kMinFitNs = 1e6;
constexpr double kMaxRateError = 1e-5;
// Clocks that disagree by more than this (CLOCK_MONOTONIC is slewed by at most 500 ppm; device
// oscillators drift by a few ppm) have jumped: the pair is not used for a rate.
constexpr double kMaxDrift = 1e-3;

std::string demangle(const std::string& name) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> out(
        abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
    return status == 0 && out ? std::string(out.get()) : name;
}

bool is_device(const GpuActivity& a) {
    return a.kind == GpuActivityKind::kernel || a.kind == GpuActivityKind::memcpy ||
           a.kind == GpuActivityKind::memset;
}

std::string dims(const std::int32_t d[3]) {
    return std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]);
}

}  // namespace

void ClockSync::add_pair(std::uint64_t cupti_ns, std::int64_t run_ns, std::int64_t window_ns) {
    pairs_.push_back(Pair{cupti_ns, run_ns, window_ns > 0 ? window_ns : 0});
    if (pairs_.size() < 2) return;
    const Pair& a = pairs_.front();
    const Pair& b = pairs_.back();
    // Differences in integers first: CUPTI's clock reads ~1.7e18 ns (the Unix epoch), where a
    // double steps by 256 ns.
    const double dc = static_cast<double>(static_cast<std::int64_t>(b.cupti_ns - a.cupti_ns));
    const double dr = static_cast<double>(b.run_ns - a.run_ns);
    if (dc < kMinFitNs) return;  // the reads' own jitter, not the clocks' drift
    const double bound = static_cast<double>(a.window_ns + b.window_ns) / (2.0 * dc);
    if (bound > kMaxRateError) return;  // keep the last rate that was known well enough
    const double rate = dr / dc;
    if (rate < 1.0 - kMaxDrift || rate > 1.0 + kMaxDrift) return;  // a clock jump
    rate_ = rate;
}

std::int64_t ClockSync::to_run_ns(std::uint64_t cupti_ns) const {
    if (pairs_.empty()) return static_cast<std::int64_t>(cupti_ns);
    const Pair& a = pairs_.front();
    const auto dc = static_cast<std::int64_t>(cupti_ns - a.cupti_ns);  // exact, either sign
    return a.run_ns + std::llround(static_cast<double>(dc) * rate_);
}

void CuptiTranslator::register_external(std::uint64_t external_id, std::string name,
                                        const KernelCost& cost, std::string op) {
    external_[external_id] = Registered{std::move(name), cost, std::move(op)};
}

TrackId CuptiTranslator::stream_track(std::uint32_t device, std::uint32_t stream) {
    const auto key = std::make_pair(device, stream);
    auto it = stream_tracks_.find(key);
    if (it != stream_tracks_.end()) return it->second;
    const TrackId id =
        recorder_.add_track("GPU " + std::to_string(device) + " stream " + std::to_string(stream),
                            static_cast<int>(100 + 100 * device + stream % 100));
    stream_tracks_.emplace(key, id);
    return id;
}

TrackId CuptiTranslator::api_track() {
    if (api_track_ == 0) api_track_ = recorder_.add_track("cuda api", 2);
    return api_track_;
}

// A graph-launched record's call is its node's (the correlation id is the launch's); any other
// record's, its launch call's.
std::uint64_t CuptiTranslator::external_of(const GpuActivity& a) const {
    if (a.graph_node_id != 0) {
        auto node = node_to_external_.find(a.graph_node_id);
        return node != node_to_external_.end() ? node->second : 0;
    }
    auto ext = corr_to_external_.find(a.correlation_id);
    return ext != corr_to_external_.end() ? ext->second : 0;
}

const CuptiTranslator::Registered* CuptiTranslator::registered(const GpuActivity& a) const {
    const std::uint64_t external = external_of(a);
    if (external == 0) return nullptr;
    auto reg = external_.find(external);
    return reg != external_.end() ? &reg->second : nullptr;
}

CuptiTranslator::CostGroups CuptiTranslator::cost_groups(
    const std::vector<GpuActivity>& batch) const {
    CostGroups groups;
    for (const GpuActivity& a : batch) {
        if (!is_device(a)) continue;
        if (const Registered* reg = registered(a)) {
            CostGroup& g = groups[cost_key(a, external_of(a))];
            if (g.records == 0) {
                g.flops_left = reg->cost.flops;
                g.bytes_left = reg->cost.bytes();
            }
            const double d = static_cast<double>(a.end_ns > a.start_ns ? a.end_ns - a.start_ns : 0);
            ++g.records;
            ++g.left;
            g.dur += d;
            if (a.kind == GpuActivityKind::kernel) {
                ++g.kernels;
                ++g.kernels_left;
                g.kernel_dur += d;
            }
        }
    }
    return groups;
}

// One stream's work is one track, whose events must nest; but Hopper's programmatic dependent
// launch (cuBLASLt's kernels use it) lets a kernel begin while its predecessor on the stream
// drains, about a tenth of a microsecond before it ends. Such a kernel's event starts where its
// predecessor's ends, and the trimmed time is kept in its args (started_early_ns): the track then
// shows the stream's busy time, each instant counted once. Returns index in the batch -> ns
// trimmed.
std::map<std::size_t, std::int64_t> CuptiTranslator::early_starts(
    const std::vector<GpuActivity>& batch) {
    std::map<std::size_t, std::int64_t> early;
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::size_t>> by_stream;
    for (std::size_t i = 0; i < batch.size(); ++i) {
        if (is_device(batch[i])) by_stream[{batch[i].device, batch[i].stream}].push_back(i);
    }
    for (auto& [key, idx] : by_stream) {
        std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
            return batch[a].start_ns < batch[b].start_ns;
        });
        auto& [last_start, last_end] = stream_last_[key];
        for (const std::size_t i : idx) {
            const GpuActivity& a = batch[i];
            const std::uint64_t end = std::max(a.end_ns, a.start_ns);
            if (a.start_ns >= last_start && a.start_ns < last_end)
                early[i] = static_cast<std::int64_t>(std::min(last_end, end) - a.start_ns);
            last_start = a.start_ns;
            last_end = std::max(last_end, end);
        }
    }
    return early;
}

void CuptiTranslator::flow_pair(std::uint64_t flow_id, std::int64_t launch_ns, TrackId kernel_track,
                                std::int64_t kernel_ns) {
    recorder_.flow("launch", FlowPhase::start, flow_id, api_track(), launch_ns);
    recorder_.flow("launch", FlowPhase::end, flow_id, kernel_track, kernel_ns);
}

void CuptiTranslator::add(const std::vector<GpuActivity>& batch) {
    for (const GpuActivity& a : batch) {
        if (a.kind == GpuActivityKind::external_correlation)
            corr_to_external_[a.correlation_id] = a.external_id;
        if (a.kind == GpuActivityKind::graph_node)
            node_to_external_[a.graph_node_id] = a.external_id;
    }
    CostGroups groups = cost_groups(batch);
    const std::map<std::size_t, std::int64_t> early = early_starts(batch);
    for (std::size_t index = 0; index < batch.size(); ++index) {
        const GpuActivity& a = batch[index];
        if (a.kind == GpuActivityKind::external_correlation ||
            a.kind == GpuActivityKind::graph_node)
            continue;
        const auto trimmed = early.find(index);
        const std::int64_t started_early = trimmed != early.end() ? trimmed->second : 0;
        const std::int64_t start =
            clock_.to_run_ns(a.start_ns + static_cast<std::uint64_t>(started_early));
        const std::int64_t end = clock_.to_run_ns(a.end_ns > a.start_ns ? a.end_ns : a.start_ns);
        RangeEvent r;
        r.start_ns = start;
        r.dur_ns = end - start;
        if (is_device(a)) {
            add_device_record(a, std::move(r), started_early, groups);
        } else {
            add_host_record(a, std::move(r));
        }
    }
}

// Runtime and driver calls (launches) on "cuda api", synchronization on "cuda sync"; a launch
// starts the flow to its kernel, or ends one whose kernel came first.
void CuptiTranslator::add_host_record(const GpuActivity& a, RangeEvent r) {
    const bool launch = a.kind == GpuActivityKind::runtime || a.kind == GpuActivityKind::driver;
    r.name = a.name;
    r.category = launch ? Category::launch : Category::marker;
    r.track = api_track();
    if (!launch) {
        // Synchronization spans the API call that waited: a track of its own keeps nesting.
        if (sync_track_ == 0) sync_track_ = recorder_.add_track("cuda sync", 3);
        r.track = sync_track_;
    }
    r.args.push_back(Arg{"correlation", static_cast<std::int64_t>(a.correlation_id)});
    r.args.push_back(Arg{"host_thread", static_cast<std::int64_t>(a.host_thread)});
    if (a.kind == GpuActivityKind::driver) r.args.push_back(Arg{"api", std::string("driver")});
    const std::int64_t mid = r.start_ns + r.dur_ns / 2;  // inside the launch range
    // cudaGraphLaunch, cuGraphLaunch: its nodes' records may come in later batches too.
    const bool graph = a.name.find("GraphLaunch") != std::string::npos;
    recorder_.record(std::move(r));
    if (!launch) return;
    const auto [first, last] = kernel_waiting_.equal_range(a.correlation_id);
    const bool matched = first != last;
    for (auto it = first; it != last; ++it)
        flow_pair(it->second.flow_id, mid, it->second.track, it->second.t_ns);
    kernel_waiting_.erase(first, last);
    if (!matched || graph) {
        if (launch_at_.size() >= kMaxPending) launch_at_.clear();  // launched nothing
        launch_at_[a.correlation_id] = mid;
    }
}

// The flow from a device record's launch: its correlation's, or for a graph launch's records
// one each, the launch kept for the graph's other nodes.
void CuptiTranslator::launch_flow(const GpuActivity& a, TrackId track, std::int64_t start,
                                  std::int64_t end) {
    const bool graph = a.graph_node_id != 0;
    const std::uint64_t id =
        graph ? kGraphFlowBase + ++graph_flows_ : kCorrelationFlowBase + a.correlation_id;
    const std::int64_t mid = start + (end - start) / 2;
    auto launch = launch_at_.find(a.correlation_id);
    if (launch != launch_at_.end()) {
        flow_pair(id, launch->second, track, mid);
        if (!graph) launch_at_.erase(launch);  // one record per plain launch
    } else if (a.correlation_id != 0) {
        if (kernel_waiting_.size() >= kMaxPending) {
            unmatched_ += kernel_waiting_.size();
            kernel_waiting_.clear();
        }
        kernel_waiting_.emplace(a.correlation_id, Waiting{mid, track, id});
    }
}

// Kernels, copies and sets on their stream's track, with the engine's name and its share of the
// call's cost when the engine registered the call; the flow from its launch.
void CuptiTranslator::add_device_record(const GpuActivity& a, RangeEvent r,
                                        std::int64_t started_early, CostGroups& groups) {
    const std::int64_t start = r.start_ns, end = r.start_ns + r.dur_ns;
    r.track = stream_track(a.device, a.stream);
    r.category = Category::kernel;
    r.args.push_back(Arg{"stream", static_cast<std::int64_t>(a.stream)});
    r.args.push_back(Arg{"correlation", static_cast<std::int64_t>(a.correlation_id)});
    if (started_early > 0) r.args.push_back(Arg{"started_early_ns", started_early});
    const std::string own = a.kind == GpuActivityKind::kernel ? demangle(a.name) : a.name;
    r.name = own;
    if (a.kind != GpuActivityKind::kernel) r.bytes = a.bytes;
    if (a.graph_node_id != 0)
        r.args.push_back(Arg{"graph_node", static_cast<std::int64_t>(a.graph_node_id)});
    if (const Registered* reg = registered(a)) {
        CostGroup& g = groups[cost_key(a, external_of(a))];
        const double d = static_cast<double>(a.end_ns > a.start_ns ? a.end_ns - a.start_ns : 0);
        // The last record of a split takes what is left, so the parts sum to the call's cost.
        const auto part = [](std::uint64_t total, std::uint64_t& left, double share, bool last) {
            std::uint64_t p =
                last ? left : static_cast<std::uint64_t>(static_cast<double>(total) * share);
            if (p > left) p = left;
            left -= p;
            return p;
        };
        --g.left;
        r.name = reg->name;
        r.bytes = part(reg->cost.bytes(), g.bytes_left,
                       g.dur > 0 ? d / g.dur : 1.0 / static_cast<double>(g.records), g.left == 0);
        r.flops = 0;
        if (a.kind == GpuActivityKind::kernel) {
            --g.kernels_left;
            r.flops =
                part(reg->cost.flops, g.flops_left,
                     g.kernel_dur > 0 ? d / g.kernel_dur : 1.0 / static_cast<double>(g.kernels),
                     g.kernels_left == 0);
        }
        r.args.push_back(Arg{"kernel", own});
        r.args.push_back(Arg{"cost_split", static_cast<std::int64_t>(g.records)});
        if (!reg->op.empty()) r.args.push_back(Arg{"op", reg->op});
        ++tagged_;
    } else if (a.graph_node_id != 0) {  // a node the capture made outside every engine call
        r.args.push_back(Arg{"op", std::string(kUnmappedGraphOp)});
    }
    if (a.kind == GpuActivityKind::kernel) {
        ++kernels_;
        r.args.push_back(Arg{"grid", dims(a.grid)});
        r.args.push_back(Arg{"block", dims(a.block)});
        r.args.push_back(Arg{"registers", static_cast<std::int64_t>(a.registers)});
        r.args.push_back(Arg{"shared_bytes", static_cast<std::int64_t>(a.shared_bytes)});
    }
    const TrackId track = r.track;
    recorder_.record(std::move(r));
    launch_flow(a, track, start, end);
}

void CuptiTranslator::finish() {
    unmatched_ += kernel_waiting_.size();
    kernel_waiting_.clear();
    launch_at_.clear();
}

}  // namespace napkin::profiler
