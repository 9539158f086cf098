#include "profiler/cupti_records.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace napkin::profiler {

namespace {

// Flow ids of CUPTI correlations live above the engine's own (Recorder::next_flow_id counts
// from 1), so the two kinds never collide in one trace.
constexpr std::uint64_t kCorrelationFlowBase = std::uint64_t{1} << 40;

// Keeps at most this many launches waiting for their kernel: calls that launch nothing
// (cudaMemcpy's API record has a memcpy, cudaMalloc has nothing) would otherwise pile up.
constexpr std::size_t kMaxPending = 1 << 20;

std::string demangle(const std::string& name) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
    return status == 0 && out ? std::string(out.get()) : name;
}

std::string dims(const std::int32_t d[3]) {
    return std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]);
}

}  // namespace

void ClockSync::add_pair(std::uint64_t cupti_ns, std::int64_t run_ns) {
    pairs_.emplace_back(cupti_ns, run_ns);
    if (pairs_.size() >= 2) {
        const auto& a = pairs_.front();
        const auto& b = pairs_.back();
        const double dc = static_cast<double>(b.first) - static_cast<double>(a.first);
        const double dr = static_cast<double>(b.second - a.second);
        // A rate far from 1 means a bad pair (a clock jump): keep the last good one.
        if (dc > 0 && dr / dc > 0.99 && dr / dc < 1.01) rate_ = dr / dc;
    }
}

std::int64_t ClockSync::to_run_ns(std::uint64_t cupti_ns) const {
    if (pairs_.empty()) return static_cast<std::int64_t>(cupti_ns);
    const auto& a = pairs_.front();
    const double dc = static_cast<double>(cupti_ns) - static_cast<double>(a.first);
    return a.second + static_cast<std::int64_t>(dc * rate_);
}

void CuptiTranslator::register_external(std::uint64_t external_id, std::string name, const KernelCost& cost) {
    external_[external_id] = Registered{std::move(name), cost};
}

TrackId CuptiTranslator::stream_track(std::uint32_t device, std::uint32_t stream) {
    const auto key = std::make_pair(device, stream);
    auto it = stream_tracks_.find(key);
    if (it != stream_tracks_.end()) return it->second;
    const TrackId id = recorder_.add_track("GPU " + std::to_string(device) + " stream " + std::to_string(stream),
                                           static_cast<int>(100 + 100 * device + stream % 100));
    stream_tracks_.emplace(key, id);
    return id;
}

TrackId CuptiTranslator::api_track() {
    if (api_track_ == 0) api_track_ = recorder_.add_track("cuda api", 2);
    return api_track_;
}

void CuptiTranslator::add(const std::vector<GpuActivity>& batch) {
    for (const GpuActivity& a : batch) {
        if (a.kind == GpuActivityKind::external_correlation) corr_to_external_[a.correlation_id] = a.external_id;
    }
    auto flow_pair = [&](std::uint32_t corr, std::int64_t launch_ns, TrackId kernel_track, std::int64_t kernel_ns) {
        const std::uint64_t id = kCorrelationFlowBase + corr;
        recorder_.flow("launch", FlowPhase::start, id, api_track(), launch_ns);
        recorder_.flow("launch", FlowPhase::end, id, kernel_track, kernel_ns);
    };
    for (const GpuActivity& a : batch) {
        if (a.kind == GpuActivityKind::external_correlation) continue;
        const std::int64_t start = clock_.to_run_ns(a.start_ns);
        const std::int64_t end = clock_.to_run_ns(a.end_ns > a.start_ns ? a.end_ns : a.start_ns);
        RangeEvent r;
        r.start_ns = start;
        r.dur_ns = end - start;
        if (a.kind == GpuActivityKind::runtime || a.kind == GpuActivityKind::synchronization) {
            r.name = a.name;
            r.category = a.kind == GpuActivityKind::runtime ? Category::launch : Category::marker;
            r.track = api_track();
            if (a.kind == GpuActivityKind::synchronization) {
                // Synchronization spans the API call that waited: a track of its own keeps nesting.
                if (sync_track_ == 0) sync_track_ = recorder_.add_track("cuda sync", 3);
                r.track = sync_track_;
            }
            r.args.push_back(Arg{"correlation", static_cast<std::int64_t>(a.correlation_id)});
            r.args.push_back(Arg{"host_thread", static_cast<std::int64_t>(a.host_thread)});
            recorder_.record(std::move(r));
            if (a.kind != GpuActivityKind::runtime) continue;
            const std::int64_t mid = start + (end - start) / 2;  // inside the launch range
            auto waiting = kernel_waiting_.find(a.correlation_id);
            if (waiting != kernel_waiting_.end()) {
                flow_pair(a.correlation_id, mid, waiting->second.second, waiting->second.first);
                kernel_waiting_.erase(waiting);
            } else {
                if (launch_at_.size() >= kMaxPending) {
                    unmatched_ += launch_at_.size();
                    launch_at_.clear();
                }
                launch_at_[a.correlation_id] = mid;
            }
            continue;
        }
        // Device work: kernels, copies, sets.
        r.track = stream_track(a.device, a.stream);
        r.category = Category::kernel;
        r.args.push_back(Arg{"stream", static_cast<std::int64_t>(a.stream)});
        r.args.push_back(Arg{"correlation", static_cast<std::int64_t>(a.correlation_id)});
        if (a.kind == GpuActivityKind::kernel) {
            ++kernels_;
            const std::string real = demangle(a.name);
            r.name = real;
            auto ext = corr_to_external_.find(a.correlation_id);
            if (ext != corr_to_external_.end()) {
                auto reg = external_.find(ext->second);
                if (reg != external_.end()) {
                    r.name = reg->second.name;
                    r.flops = reg->second.cost.flops;
                    r.bytes = reg->second.cost.bytes();
                    r.args.push_back(Arg{"kernel", real});
                }
            }
            r.args.push_back(Arg{"grid", dims(a.grid)});
            r.args.push_back(Arg{"block", dims(a.block)});
            r.args.push_back(Arg{"registers", static_cast<std::int64_t>(a.registers)});
            r.args.push_back(Arg{"shared_bytes", static_cast<std::int64_t>(a.shared_bytes)});
        } else {
            r.name = a.name;
            r.bytes = a.bytes;
        }
        const TrackId track = r.track;
        recorder_.record(std::move(r));
        auto launch = launch_at_.find(a.correlation_id);
        if (launch != launch_at_.end()) {
            flow_pair(a.correlation_id, launch->second, track, start + (end - start) / 2);
            launch_at_.erase(launch);
        } else if (a.correlation_id != 0) {
            if (kernel_waiting_.size() >= kMaxPending) {
                unmatched_ += kernel_waiting_.size();
                kernel_waiting_.clear();
            }
            kernel_waiting_[a.correlation_id] = {start + (end - start) / 2, track};
        }
    }
}

}  // namespace napkin::profiler
