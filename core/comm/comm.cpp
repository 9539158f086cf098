#include "core/comm/comm.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "profiler/event.h"

#if defined(NAPKIN_HAVE_MPI)
#include "core/comm/comm_mpi_plugin.h"
#endif

namespace napkin {

std::uint64_t CommCounters::total_sent() const {
    std::uint64_t s = 0;
    for (auto b : sent_bytes)
        s += b;
    return s;
}
std::uint64_t CommCounters::total_received() const {
    std::uint64_t s = 0;
    for (auto b : received_bytes)
        s += b;
    return s;
}
std::int64_t CommCounters::total_ns() const {
    std::int64_t s = 0;
    for (auto t : ns)
        s += t;
    return s;
}
CommCounters CommCounters::operator-(const CommCounters& o) const {
    CommCounters d;
    for (std::size_t i = 0; i < kCollectiveCount; ++i) {
        d.ns[i] = ns[i] - o.ns[i];
        d.calls[i] = calls[i] - o.calls[i];
        d.sent_bytes[i] = sent_bytes[i] - o.sent_bytes[i];
        d.received_bytes[i] = received_bytes[i] - o.received_bytes[i];
    }
    return d;
}

namespace {

std::uint64_t wire_bytes(DType t) {
    NAPKIN_ASSERT(t == DType::f32 || t == DType::f16 || t == DType::bf16,
                  "collectives take fp32, fp16 or bf16 buffers, not " << dtype_name(t));
    return storage_bytes(t, 1);
}

}  // namespace

Communicator::Wire Communicator::wire(DType dtype) {
    wire_bytes(dtype);  // checks the type
    return dtype == DType::f32 ? Wire::f32 : dtype == DType::f16 ? Wire::f16 : Wire::bf16;
}

void Communicator::record_range(std::string name, std::int64_t t0, Collective op,
                                std::uint64_t elements, const RingTraffic& t,
                                std::int64_t in_flight_ns) {
    if (rec_ == nullptr) return;
    profiler::RangeEvent e;
    e.name = std::move(name);
    e.category = profiler::Category::op;
    e.start_ns = t0;
    e.dur_ns = rec_->now_ns() - t0;
    e.bytes = t.sent_bytes + t.received_bytes;
    e.args = {{"elements", static_cast<std::int64_t>(elements)},
              {"sent_bytes", static_cast<std::int64_t>(t.sent_bytes)},
              {"received_bytes", static_cast<std::int64_t>(t.received_bytes)},
              {"world", static_cast<std::int64_t>(world_)}};
    if (in_flight_ns >= 0) e.args.push_back({"in_flight_ns", in_flight_ns});
    e.args.push_back({"collective", std::string(enum_name(kCollectiveNames, op))});
    rec_->record(std::move(e));
}

void Communicator::count(Collective op, const RingTraffic& t,
                         std::chrono::steady_clock::time_point wall0) {
    const auto i = static_cast<std::size_t>(op);
    counters_.ns[i] += std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - wall0)
                           .count();
    ++counters_.calls[i];
    counters_.sent_bytes[i] += t.sent_bytes;
    counters_.received_bytes[i] += t.received_bytes;
}

template <class F>
void Communicator::run(Collective op, std::string_view what, std::uint64_t elements,
                       std::uint64_t element_bytes, int root, F&& call) {
    const RingTraffic t = ring_traffic(op, elements, element_bytes, world_, rank_, root);
    const std::int64_t t0 = rec_ != nullptr ? rec_->now_ns() : 0;
    const auto wall0 = std::chrono::steady_clock::now();
    call();
    count(op, t, wall0);
    std::string name(enum_name(kCollectiveNames, op));
    if (!what.empty()) name.append(1, ' ').append(what);
    record_range(std::move(name), t0, op, elements, t, -1);
}

void Communicator::all_reduce(void* buf, std::uint64_t count, DType dtype, std::string_view what) {
    run(Collective::all_reduce, what, count, wire_bytes(dtype), 0,
        [&] { do_all_reduce(buf, count, wire(dtype)); });
}
void Communicator::all_reduce(double* values, std::uint64_t count, std::string_view what) {
    run(Collective::all_reduce, what, count, 8, 0,
        [&] { do_all_reduce(values, count, Wire::f64); });
}
void Communicator::all_reduce_max(float* buf, std::uint64_t count, std::string_view what) {
    run(Collective::all_reduce, what, count, 4, 0,
        [&] { do_all_reduce(buf, count, Wire::f32_max); });
}
void Communicator::reduce_scatter(void* buf, std::uint64_t shard, DType dtype,
                                  std::string_view what) {
    const std::uint64_t n = shard * static_cast<std::uint64_t>(world_);
    run(Collective::reduce_scatter, what, n, wire_bytes(dtype), 0,
        [&] { do_reduce_scatter(buf, shard, wire(dtype)); });
}
void Communicator::all_gather(void* buf, std::uint64_t shard, DType dtype, std::string_view what) {
    const std::uint64_t n = shard * static_cast<std::uint64_t>(world_);
    run(Collective::all_gather, what, n, wire_bytes(dtype), 0,
        [&] { do_all_gather(buf, shard, wire(dtype)); });
}
void Communicator::broadcast(void* buf, std::uint64_t bytes, int root, std::string_view what) {
    NAPKIN_ASSERT(root >= 0 && root < world_,
                  "broadcast root " << root << " outside [0, " << world_ << ")");
    run(Collective::broadcast, what, bytes, 1, root, [&] { do_broadcast(buf, bytes, root); });
}
void Communicator::barrier() {
    run(Collective::barrier, {}, 0, 0, 0, [&] { do_barrier(); });
}

void Communicator::end_job(Collective op, std::uint64_t bytes, const std::string& why) {
    char size[48] = {};
    if (bytes >= 1000000)
        std::snprintf(size, sizeof size, " of %.1f MB", static_cast<double>(bytes) / 1e6);
    else if (bytes > 0)
        std::snprintf(size, sizeof size, " of %llu bytes", static_cast<unsigned long long>(bytes));
    std::fprintf(stderr, "napkin: rank %d of %d: error: %s%s %s; ending every rank\n", rank(),
                 world_size(), std::string(enum_name(kCollectiveNames, op)).c_str(), size,
                 name_fields(why, field_namer_).c_str());
    std::fflush(stderr);
    abort(1);
    std::abort();  // not reached: abort() ends the process
}

void Communicator::ended_by_timeout(Collective op, std::uint64_t bytes) {
    char why[96];
    std::snprintf(why, sizeof why,
                  "did not complete within %g s ({comm_timeout}); another rank is stuck or gone",
                  timeout_s());
    end_job(op, bytes, why);
}

std::uint64_t Communicator::do_start(Collective op, void* buf, std::uint64_t n, Wire t) {
    switch (op) {
        case Collective::all_reduce:
            do_all_reduce(buf, n, t);
            return 0;
        case Collective::reduce_scatter:
            do_reduce_scatter(buf, n, t);
            return 0;
        case Collective::all_gather:
            do_all_gather(buf, n, t);
            return 0;
        case Collective::broadcast:
        case Collective::barrier:
            break;
    }
    NAPKIN_ASSERT(false, "no nonblocking " << enum_name(kCollectiveNames, op));
    return 0;
}
bool Communicator::do_test(std::uint64_t) {
    return true;
}
void Communicator::do_wait(std::uint64_t) {}

Communicator::Ticket Communicator::start(Collective op, std::string_view what, void* buf,
                                         std::uint64_t n, std::uint64_t elements, DType dtype) {
    const RingTraffic t = ring_traffic(op, elements, wire_bytes(dtype), world_, rank_, 0);
    const std::int64_t t0 = rec_ != nullptr ? rec_->now_ns() : 0;
    const auto wall0 = std::chrono::steady_clock::now();
    Started s;
    s.handle = do_start(op, buf, n, wire(dtype));
    count(op, t, wall0);
    s.ticket = ++last_ticket_;
    s.op = op;
    s.name = std::string(enum_name(kCollectiveNames, op));
    if (!what.empty()) s.name.append(1, ' ').append(what);
    s.elements = elements;
    s.traffic = t;
    s.start_ns = t0;
    if (s.handle == 0) s.done_ns = rec_ != nullptr ? rec_->now_ns() : 0;
    record_range("start " + s.name, t0, op, elements, t, -1);
    started_.push_back(std::move(s));
    return started_.back().ticket;
}

Communicator::Ticket Communicator::start_all_reduce(void* buf, std::uint64_t count, DType dtype,
                                                    std::string_view what) {
    return start(Collective::all_reduce, what, buf, count, count, dtype);
}
Communicator::Ticket Communicator::start_reduce_scatter(void* buf, std::uint64_t shard,
                                                        DType dtype, std::string_view what) {
    return start(Collective::reduce_scatter, what, buf, shard,
                 shard * static_cast<std::uint64_t>(world_), dtype);
}
Communicator::Ticket Communicator::start_all_gather(void* buf, std::uint64_t shard, DType dtype,
                                                    std::string_view what) {
    return start(Collective::all_gather, what, buf, shard,
                 shard * static_cast<std::uint64_t>(world_), dtype);
}

void Communicator::progress() {
    for (Started& s : started_) {
        if (s.handle != 0 && do_test(s.handle)) {
            s.handle = 0;
            s.done_ns = rec_ != nullptr ? rec_->now_ns() : 0;
        }
    }
}

void Communicator::wait(Ticket ticket) {
    auto it = std::find_if(started_.begin(), started_.end(),
                           [&](const Started& s) { return s.ticket == ticket; });
    NAPKIN_ASSERT(it != started_.end(), "wait for collective " << ticket << ", not in flight");
    const std::int64_t t0 = rec_ != nullptr ? rec_->now_ns() : 0;
    const auto wall0 = std::chrono::steady_clock::now();
    if (it->handle != 0) {
        do_wait(it->handle);
        it->handle = 0;
        it->done_ns = rec_ != nullptr ? rec_->now_ns() : 0;
    }
    counters_.ns[static_cast<std::size_t>(it->op)] +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                             wall0)
            .count();
    record_range("wait " + it->name, t0, it->op, it->elements, RingTraffic{},
                 it->done_ns - it->start_ns);
    started_.erase(it);
}

namespace {

class SingleCommunicator final : public Communicator {
public:
    SingleCommunicator() : Communicator(0, 1, 0) {}
    std::string backend() const override { return "single process"; }
    [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }

protected:
    // One rank: the sum is the buffer, its chunk is the buffer, it is its own root.
    void do_all_reduce(void*, std::uint64_t, Wire) override {}
    void do_reduce_scatter(void*, std::uint64_t, Wire) override {}
    void do_all_gather(void*, std::uint64_t, Wire) override {}
    void do_broadcast(void*, std::uint64_t, int) override {}
    void do_barrier() override {}
};

int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < 0 || x > 1 << 24)
        throw UsageError(std::string(name) + ": not a rank or size ('" + v + "')");
    return static_cast<int>(x);
}

#if defined(NAPKIN_HAVE_MPI)
class MpiCommunicator final : public Communicator {
public:
    MpiCommunicator(const NapkinMpiApi& api, int rank, int world, int local_rank)
        : Communicator(rank, world, local_rank), api_(api) {}
    ~MpiCommunicator() override {
        char err[kNapkinMpiErrBytes] = {};
        api_.finalize(err);  // a failure here has nobody left to tell
    }
    std::string backend() const override {
        return std::string("mpi (") + api_.library_version() + ")";
    }
    [[noreturn]] void abort(int exit_code) override {
        api_.abort(exit_code);
        std::_Exit(exit_code);
    }
    void set_timeout_s(double seconds) override {
        Communicator::set_timeout_s(seconds);
        api_.set_timeout(timeout_s());
    }

protected:
    void do_all_reduce(void* buf, std::uint64_t count, Wire t) override {
        check(api_.all_reduce(buf, count, type(t), err_), Collective::all_reduce,
              count * wire_size(t));
    }
    void do_reduce_scatter(void* buf, std::uint64_t shard, Wire t) override {
        check(api_.reduce_scatter(buf, shard, type(t), err_), Collective::reduce_scatter,
              shard * static_cast<std::uint64_t>(world_size()) * wire_size(t));
    }
    void do_all_gather(void* buf, std::uint64_t shard, Wire t) override {
        check(api_.all_gather(buf, shard, type(t), err_), Collective::all_gather,
              shard * static_cast<std::uint64_t>(world_size()) * wire_size(t));
    }
    void do_broadcast(void* buf, std::uint64_t bytes, int root) override {
        check(api_.broadcast(buf, bytes, root, err_), Collective::broadcast, bytes);
    }
    void do_barrier() override { check(api_.barrier(err_), Collective::barrier, 0); }
    std::uint64_t do_start(Collective op, void* buf, std::uint64_t n, Wire t) override {
        const int c = op == Collective::all_reduce       ? napkin_mpi_all_reduce
                      : op == Collective::reduce_scatter ? napkin_mpi_reduce_scatter
                                                         : napkin_mpi_all_gather;
        NAPKIN_ASSERT(op == Collective::all_reduce || op == Collective::reduce_scatter ||
                          op == Collective::all_gather,
                      "no nonblocking " << enum_name(kCollectiveNames, op));
        std::uint64_t handle = 0;
        check(api_.start(c, buf, n, type(t), &handle, err_), op, 0);
        NAPKIN_ASSERT(handle != 0, "the MPI backend started a collective without a handle");
        handles_.push_back({handle, op, op == Collective::all_reduce ? n : n * static_cast<std::uint64_t>(world_size()), t});
        return handle;
    }
    bool do_test(std::uint64_t handle) override {
        int done = 0;
        const Handle h = find(handle);
        check(api_.test(handle, &done, err_), h.op, h.elements * wire_size(h.wire));
        if (done != 0) forget(handle);
        return done != 0;
    }
    void do_wait(std::uint64_t handle) override {
        const Handle h = find(handle);
        check(api_.wait(handle, err_), h.op, h.elements * wire_size(h.wire));
        forget(handle);
    }

private:
    // What a started collective is, for the timeout's message.
    struct Handle {
        std::uint64_t id = 0;
        Collective op = Collective::all_reduce;
        std::uint64_t elements = 0;
        Wire wire = Wire::f32;
    };
    Handle find(std::uint64_t id) const {
        for (const Handle& h : handles_) {
            if (h.id == id) return h;
        }
        NAPKIN_ASSERT(false, "no started collective " << id);
        return {};
    }
    void forget(std::uint64_t id) {
        handles_.erase(std::remove_if(handles_.begin(), handles_.end(),
                                      [&](const Handle& h) { return h.id == id; }),
                       handles_.end());
    }
    std::vector<Handle> handles_;

    static int type(Wire t) {
        switch (t) {
            case Wire::f32:
                return napkin_mpi_f32;
            case Wire::f16:
                return napkin_mpi_f16;
            case Wire::bf16:
                return napkin_mpi_bf16;
            case Wire::f64:
                return napkin_mpi_f64;
            case Wire::f32_max:
                return napkin_mpi_f32_max;
        }
        return napkin_mpi_f32;
    }
    // A timeout ends the job here rather than throwing: the collective is still pending and MPI
    // may yet write into its buffer, which unwinding would free.
    void check(int rc, Collective op, std::uint64_t bytes) {
        if (rc == kNapkinMpiTimedOut) ended_by_timeout(op, bytes);
        if (rc != 0) throw CommError("rank " + std::to_string(rank()) + ": " + err_);
    }
    NapkinMpiApi api_;
    mutable char err_[kNapkinMpiErrBytes] = {};
};
#endif

}  // namespace

LaunchEnv launch_env() {
    LaunchEnv e;
    if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
        e.launcher = "Open MPI";
        e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
        e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
        e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
        e.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", e.world);
    } else if (std::getenv("PMI_SIZE") != nullptr) {
        e.launcher = "PMI";
        e.world = env_int("PMI_SIZE", 1);
        e.rank = env_int("PMI_RANK", 0);
        e.local_rank = env_int("MPI_LOCALRANKID", 0);
        e.local_size = env_int("MPI_LOCALNRANKS", e.world);
    }
    if (e.world < 1 || e.rank >= e.world) {
        throw UsageError(e.launcher + " environment: rank " + std::to_string(e.rank) +
                         " of world size " + std::to_string(e.world));
    }
    return e;
}

bool mpi_built() {
#if defined(NAPKIN_HAVE_MPI)
    return true;
#else
    return false;
#endif
}

std::unique_ptr<Communicator> make_single_communicator() {
    return std::make_unique<SingleCommunicator>();
}

std::unique_ptr<Communicator> make_communicator() {
    const LaunchEnv env = launch_env();
    if (env.world == 1) return make_single_communicator();
#if defined(NAPKIN_HAVE_MPI)
    // RTLD_GLOBAL: Open MPI's components (mca_*.so) resolve libmpi's symbols globally.
    void* lib = dlopen(NAPKIN_MPI_PLUGIN, RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
        const char* err = dlerror();
        throw CommError(std::string("cannot load the MPI backend: ") +
                        (err != nullptr ? err : NAPKIN_MPI_PLUGIN));
    }
    auto get = reinterpret_cast<int (*)(NapkinMpiApi*)>(dlsym(lib, kNapkinMpiApiSymbol));
    NapkinMpiApi api{};
    if (get == nullptr || get(&api) != kNapkinMpiAbi) {
        throw CommError(std::string("the MPI backend ") + NAPKIN_MPI_PLUGIN + " has another ABI");
    }
    char err[kNapkinMpiErrBytes] = {};
    int rank = 0, world = 0;
    if (api.init(&rank, &world, err) != 0) throw CommError(err);
    if (rank != env.rank || world != env.world) {
        api.abort(1);
        throw CommError("MPI reports rank " + std::to_string(rank) + " of " +
                        std::to_string(world) + ", the " + env.launcher + " environment rank " +
                        std::to_string(env.rank) + " of " + std::to_string(env.world));
    }
    return std::make_unique<MpiCommunicator>(api, rank, world, env.local_rank);
#else
    throw UsageError(
        env.launcher + " started " + std::to_string(env.world) +
        " ranks, but napkin was built without MPI (install libopenmpi-dev and reconfigure)");
#endif
}

}  // namespace napkin
