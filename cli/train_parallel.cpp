#include "cli/train_parallel.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/flag_names.h"
#include "cli/version.h"
#include "core/check.h"
#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"
#include "core/engine/zero.h"

namespace napkin::cli {

void run_with_ranks(const std::function<void(Communicator&)>& body) {
    std::unique_ptr<Communicator> comm = make_communicator();
    if (comm->world_size() == 1) return body(*comm);
    try {
        body(*comm);
    } catch (const RunMismatchError&) {
        throw;  // every rank knows: a clean exit (status 2) everywhere
    } catch (const GradientsNotFinite&) {
        throw;  // every rank stops in the same step, its report written: exit 1 everywhere
    } catch (const std::exception& e) {
        const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
        std::fprintf(stderr, "napkin: rank %d of %d: error: %s; ending every rank\n", comm->rank(),
                     comm->world_size(), message_with_flags(e).c_str());
        std::fflush(stderr);
        comm->abort(usage ? 2 : 1);
    }
}

void check_same_flags(const std::vector<std::pair<std::string, std::string>>& flags,
                      Communicator& comm) {
    if (comm.world_size() == 1) return;
    std::vector<std::uint64_t> mine, root;
    for (const auto& [name, value] : flags)
        mine.push_back(fnv1a64(value.data(), value.size()));
    root = mine;
    comm.broadcast(root.data(), root.size() * sizeof(std::uint64_t), 0, "flag hashes");
    std::vector<double> differ(mine.size());  // summed: how many ranks differ from rank 0
    for (std::size_t i = 0; i < mine.size(); ++i)
        differ[i] = mine[i] != root[i] ? 1.0 : 0.0;
    comm.all_reduce(differ.data(), differ.size(), "flag check");
    std::string names, here;
    int count = 0;
    for (std::size_t i = 0; i < flags.size(); ++i) {
        if (differ[i] == 0) continue;
        names += (count++ == 0 ? "" : ", ") + flags[i].first;
        if (mine[i] != root[i]) {
            here += (here.empty() ? "" : ", ") + flags[i].first + " '" + flags[i].second + "'";
        }
    }
    if (names.empty()) return;
    throw RunMismatchError("rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.world_size()) + ": " + names +
                           (count == 1 ? " differs" : " differ") + " between the ranks" +
                           (here.empty() ? std::string(" (this rank has rank 0's)")
                                         : " (this rank: " + here + ", unlike rank 0)") +
                           "; start every rank with the same flags");
}

std::filesystem::path rank_out_dir(const std::filesystem::path& run_dir, Communicator& comm) {
    if (comm.rank() == 0) return run_dir;
    if (std::freopen("/dev/null", "w", stdout) == nullptr)
        std::fprintf(stderr, "napkin: cannot silence stdout\n");
    return run_dir / ("rank" + std::to_string(comm.rank()));
}

void print_parallel_summary(Trainer& trainer, const Estimate& predicted) {
    Communicator& comm = *trainer.comm();
    const CommunicationEstimate& c = predicted.comm;
    std::printf(
        "  data parallel: %d rank%s (%s), ZeRO-%d; each rank runs G micro-batches of every W G, "
        "predicted per step per rank %.3f MB sent, %.3f MB received\n",
        comm.world_size(), comm.world_size() == 1 ? "" : "s", comm.backend().c_str(),
        trainer.zero()->stage(), c.sent_bytes / 1e6, c.received_bytes / 1e6);
}

profiler::StepTraffic step_traffic(const StepRecord& r) {
    return {r.comm_state_sent_bytes, r.comm_state_received_bytes, r.comm_sent_bytes,
            r.comm_received_bytes, r.comm_seconds};
}

std::string build_id() {
    std::ifstream f("/proc/self/exe", std::ios::binary);
    std::uint64_t h = kFnv1a64Basis;
    std::vector<char> buf(1 << 20);
    while (f) {
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        h = fnv1a64(buf.data(), static_cast<std::size_t>(f.gcount()), h);
    }
    char out[64];
    std::snprintf(out, sizeof out, "napkin %s exe %016llx", NAPKIN_VERSION,
                  static_cast<unsigned long long>(h));
    return out;
}

std::optional<profiler::CommunicationReport> communication_report(
    Trainer& trainer, const Estimate& predicted, const std::vector<profiler::StepReport>& steps) {
    Communicator* comm = trainer.comm();
    ZeroEngine* zero = trainer.zero();
    if (comm == nullptr || zero == nullptr) return std::nullopt;
    profiler::CommunicationReport r;
    r.backend = comm->backend();
    // The run clock's zero (trace.json ts 0, memory.json t 0) on the steady clock, which ranks on
    // one host share: napkin export lines the ranks' traces up by it.
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    r.host = host;
    r.clock_origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            trainer.allocator().start().time_since_epoch())
                            .count();
    r.rank = comm->rank();
    r.local_rank = comm->local_rank();
    r.world = comm->world_size();
    r.zero = zero->stage();
    // Per step: every step moves the same bytes; the report keeps the largest and smallest so a
    // reader sees that they agree.
    if (!steps.empty()) {
        const profiler::StepTraffic last = steps.back().comm.value_or(profiler::StepTraffic{});
        std::uint64_t lo = UINT64_MAX, hi = 0;
        for (const profiler::StepReport& st : steps) {
            const std::uint64_t v = st.comm ? st.comm->state_sent_bytes : 0;
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        r.measured_per_step = {last.state_sent_bytes, last.state_received_bytes, lo, hi,
                               last.sent_bytes,       last.received_bytes};
    }
    const CommCounters& c = comm->counters();
    const CommCounters& s = zero->state_traffic();
    for (std::size_t i = 0; i < kCollectiveCount; ++i) {
        r.measured_total
            .by_op[std::string(enum_name(kCollectiveNames, static_cast<Collective>(i)))] = {
            c.calls[i], c.sent_bytes[i], c.received_bytes[i],
            s.calls[i], s.sent_bytes[i], s.received_bytes[i]};
    }
    r.measured_total.sent_bytes = c.total_sent();
    r.measured_total.received_bytes = c.total_received();
    r.measured_total.seconds = static_cast<double>(c.total_ns()) * 1e-9;
    const CommunicationEstimate& p = predicted.comm;
    r.predicted_per_step = {p.sent_bytes, p.received_bytes, p.paper_volume_elements, p.padding, {}};
    for (const CommLine& l : p.lines) {
        r.predicted_per_step.collectives.push_back({l.what,
                                                    std::string(enum_name(kCollectiveNames, l.op)),
                                                    std::string(dtype_name(l.dtype)), l.calls,
                                                    l.elements, l.sent_bytes, l.received_bytes});
    }
    return r;
}

}  // namespace napkin::cli
