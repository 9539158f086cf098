#include "cli/train_parallel.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "cli/version.h"
#include "core/check.h"
#include "core/engine/checkpoint.h"

namespace napkin::cli {

void run_with_ranks(const std::function<void(Communicator&)>& body) {
    std::unique_ptr<Communicator> comm = make_communicator();
    if (comm->world_size() == 1) return body(*comm);
    try {
        body(*comm);
    } catch (const RunMismatchError&) {
        throw;  // every rank knows: a clean exit (status 2) everywhere
    } catch (const std::exception& e) {
        const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
        std::fprintf(stderr, "napkin: rank %d of %d: error: %s; ending every rank\n", comm->rank(),
                     comm->world_size(), e.what());
        std::fflush(stderr);
        comm->abort(usage ? 2 : 1);
    }
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

void add_step_communication(nlohmann::json& step, const StepRecord& r) {
    step["comm_state_sent_bytes"] = r.comm_state_sent_bytes;
    step["comm_state_received_bytes"] = r.comm_state_received_bytes;
    step["comm_sent_bytes"] = r.comm_sent_bytes;
    step["comm_received_bytes"] = r.comm_received_bytes;
    step["comm_seconds"] = r.comm_seconds;
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

nlohmann::json communication_report(Trainer& trainer, const Estimate& predicted,
                                    const nlohmann::json& steps) {
    using nlohmann::json;
    Communicator* comm = trainer.comm();
    ZeroEngine* zero = trainer.zero();
    if (comm == nullptr || zero == nullptr) return nullptr;
    const CommCounters& c = comm->counters();
    const CommCounters& s = zero->state_traffic();
    json by_op = json::object();
    for (std::size_t i = 0; i < kCollectiveCount; ++i) {
        by_op[std::string(enum_name(kCollectiveNames, static_cast<Collective>(i)))] = {
            {"calls", c.calls[i]},
            {"sent_bytes", c.sent_bytes[i]},
            {"received_bytes", c.received_bytes[i]},
            {"state_calls", s.calls[i]},
            {"state_sent_bytes", s.sent_bytes[i]},
            {"state_received_bytes", s.received_bytes[i]}};
    }
    // Per step: every step moves the same bytes; the report keeps the largest and smallest so a
    // reader sees that they agree.
    std::uint64_t lo = UINT64_MAX, hi = 0;
    for (const json& st : steps) {
        const auto v = st.value("comm_state_sent_bytes", std::uint64_t{0});
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    const json last = steps.empty() ? json::object() : steps.back();
    json lines = json::array();
    for (const CommLine& l : predicted.comm.lines) {
        lines.push_back({{"what", l.what},
                         {"op", enum_name(kCollectiveNames, l.op)},
                         {"dtype", dtype_name(l.dtype)},
                         {"calls", l.calls},
                         {"elements", l.elements},
                         {"sent_bytes", l.sent_bytes},
                         {"received_bytes", l.received_bytes}});
    }
    // The run clock's zero (trace.json ts 0, memory.json t 0) on the steady clock, which ranks on
    // one host share: napkin export lines the ranks' traces up by it.
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    const std::int64_t clock_origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             trainer.allocator().start().time_since_epoch())
                                             .count();
    return {{"backend", comm->backend()},
            {"host", std::string(host)},
            {"clock_origin_ns", clock_origin_ns},
            {"rank", comm->rank()},
            {"local_rank", comm->local_rank()},
            {"world", comm->world_size()},
            {"zero", zero->stage()},
            {"measured_per_step",
             {{"state_sent_bytes", last.value("comm_state_sent_bytes", std::uint64_t{0})},
              {"state_received_bytes", last.value("comm_state_received_bytes", std::uint64_t{0})},
              {"state_sent_bytes_min", steps.empty() ? 0 : lo},
              {"state_sent_bytes_max", hi},
              {"sent_bytes", last.value("comm_sent_bytes", std::uint64_t{0})},
              {"received_bytes", last.value("comm_received_bytes", std::uint64_t{0})}}},
            {"measured_total",
             {{"by_op", by_op},
              {"sent_bytes", c.total_sent()},
              {"received_bytes", c.total_received()},
              {"seconds", static_cast<double>(c.total_ns()) * 1e-9}}},
            {"predicted_per_step",
             {{"sent_bytes", predicted.comm.sent_bytes},
              {"received_bytes", predicted.comm.received_bytes},
              {"paper_volume_elements", predicted.comm.paper_volume_elements},
              {"padding_elements", predicted.comm.padding},
              {"collectives", lines}}}};
}

}  // namespace napkin::cli
