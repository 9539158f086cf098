// The communication interface of data parallelism: the five collectives napkin's ZeRO engine
// needs, over buffers of fp32, fp16 or bf16 (and fp64 scalars), with the backend behind it:
//   world size 1   no launcher: every collective is a no-op (and counts no bytes)
//   MPI            CPU ranks under mpirun (libnapkin_comm_mpi.so, loaded only then)
//   NCCL           one rank per GPU, bootstrapped by one of the above (core/comm/comm_nccl.h)
// Rank, world size and local rank come from the launcher's environment (OMPI_COMM_WORLD_*,
// PMI_*). Every collective is a profiler range carrying its bytes, and each rank counts what
// it sends and receives by the ring algorithm (core/comm/collective.h), the same formula the
// estimator predicts with. Collectives return when done, or are started and waited for
// (start_*, wait: overlap with computation); buffers are host memory.
// Failures throw CommError naming the collective and MPI's reason. A collective still waiting
// for another rank after the timeout (set_timeout_s) means that rank is stuck or gone: the
// backend prints one line and ends the job. docs/ZERO.md.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/comm/collective.h"
#include "core/dtype.h"

namespace napkin {

namespace profiler {
class Recorder;
}

class CommError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct CommCounters {
    std::array<std::uint64_t, kCollectiveCount> calls{};
    std::array<std::uint64_t, kCollectiveCount> sent_bytes{};
    std::array<std::uint64_t, kCollectiveCount> received_bytes{};
    // Wall time inside the collectives: blocking calls, so it includes waiting for slower ranks.
    std::array<std::int64_t, kCollectiveCount> ns{};
    std::uint64_t total_sent() const;
    std::uint64_t total_received() const;
    std::int64_t total_ns() const;
    CommCounters operator-(const CommCounters& o) const;
};

class Communicator {
public:
    virtual ~Communicator() = default;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    int rank() const { return rank_; }
    int world_size() const { return world_; }
    int local_rank() const { return local_rank_; }
    virtual std::string backend() const = 0;  // "single", "mpi (Open MPI v4.1.4)"

    // Sum over ranks, in place: count elements of `dtype` (fp32, fp16 or bf16).
    void all_reduce(void* buf, std::uint64_t count, DType dtype, std::string_view what = {});
    void all_reduce(double* values, std::uint64_t count,
                    std::string_view what = {});  // fp64 scalars
    // Maximum over ranks, in place: count fp32 values (fp8-amp's amaxes, core/engine/gpt_fp8.h).
    // Counted as an all-reduce of fp32.
    void all_reduce_max(float* buf, std::uint64_t count, std::string_view what = {});
    // buf: world_size() * shard elements. Afterwards chunk rank() (elements [rank shard,
    // (rank + 1) shard)) holds the sum over ranks of that chunk; the other chunks are scratch.
    void reduce_scatter(void* buf, std::uint64_t shard, DType dtype, std::string_view what = {});
    // buf: world_size() * shard elements with this rank's chunk in place; afterwards every chunk.
    void all_gather(void* buf, std::uint64_t shard, DType dtype, std::string_view what = {});
    // bytes of host memory at buf from rank root to every rank (small values: a run hash,
    // checkpoint sizes; NCCL bounces them through the device).
    void broadcast(void* buf, std::uint64_t bytes, int root, std::string_view what = {});
    void barrier();

    // Nonblocking collectives, to overlap communication with computation. start_*() begins one
    // and returns a ticket at once; the buffer belongs to the collective until wait(ticket)
    // returns. Every rank must start the same collectives in the same order (MPI's rule and
    // NCCL's); waits may come in any order. Open MPI advances a started collective only inside
    // its calls, so progress() (a test of each one, cheap) is worth calling between pieces of
    // work. Bytes are counted at the start; the time counted is the start's and the wait's: what
    // the caller was held up by ("exposed" communication). The profiler gets a range for the
    // start and one for the wait ("wait all_reduce gradients h.3"). Backends without
    // nonblocking collectives (world size 1) complete them at the start.
    using Ticket = std::uint64_t;
    Ticket start_all_reduce(void* buf, std::uint64_t count, DType dtype,
                            std::string_view what = {});
    Ticket start_reduce_scatter(void* buf, std::uint64_t shard, DType dtype,
                                std::string_view what = {});
    Ticket start_all_gather(void* buf, std::uint64_t shard, DType dtype,
                            std::string_view what = {});
    void wait(Ticket ticket);
    void progress();
    std::size_t in_flight() const { return started_.size(); }

    const CommCounters& counters() const { return counters_; }
    // Each collective becomes a range "all_gather h.3" with its bytes as args; null: none.
    void set_recorder(profiler::Recorder* recorder) { rec_ = recorder; }
    // Ends the job now on every rank (MPI_Abort): for an error on one rank, which the others,
    // blocked in a collective, would otherwise wait for forever.
    [[noreturn]] virtual void abort(int exit_code) = 0;
    // How long one collective may wait for the other ranks (0: forever, the default). Past it
    // the MPI and NCCL backends print "napkin: rank R of W: error: all_reduce of 1.8 MB did not
    // complete within S s (--comm-timeout); ..." to stderr and call abort(1), without
    // unwinding: the library still owns the collective's buffer. World size 1 has nothing to
    // wait for.
    virtual void set_timeout_s(double seconds) { timeout_s_ = seconds > 0 ? seconds : 0; }
    double timeout_s() const { return timeout_s_; }
    // How the lines it prints itself name a setting (core/check.h): the CLI's flags; bare
    // fields ("comm_timeout") by default.
    void set_field_namer(FieldNamer namer) { field_namer_ = namer; }
    FieldNamer field_namer() const { return field_namer_; }

protected:
    Communicator(int rank, int world, int local_rank)
        : rank_(rank), world_(world), local_rank_(local_rank) {}
    // f32_max: fp32 reduced by maximum (all-reduce only); every other wire type is summed.
    enum class Wire : std::uint8_t { f32, f16, bf16, f64, f32_max };
    virtual void do_all_reduce(void* buf, std::uint64_t count, Wire t) = 0;
    virtual void do_reduce_scatter(void* buf, std::uint64_t shard, Wire t) = 0;
    virtual void do_all_gather(void* buf, std::uint64_t shard, Wire t) = 0;
    virtual void do_broadcast(void* buf, std::uint64_t bytes, int root) = 0;
    virtual void do_barrier() = 0;
    // Nonblocking, for start_*(): `n` is the count of an all-reduce, the shard of the others.
    // Returns the backend's handle of the started collective, or 0 when it is complete already
    // (the default: the blocking call). do_test returns true once the collective completed
    // (the handle is then finished); do_wait returns when it has.
    virtual std::uint64_t do_start(Collective op, void* buf, std::uint64_t n, Wire t);
    virtual bool do_test(std::uint64_t handle);
    virtual void do_wait(std::uint64_t handle);
    static Wire wire(DType dtype);
    static std::uint64_t wire_size(Wire t) {
        return t == Wire::f64 ? 8 : t == Wire::f32 || t == Wire::f32_max ? 4 : 2;
    }
    // Ends the job from inside a collective that cannot finish: one line "napkin: rank R of W:
    // error: <op> of <size> <why>; ending every rank" to stderr, then abort(1), without
    // unwinding (the library may still write into the buffer). ended_by_timeout is the
    // --comm-timeout case ("did not complete within S s (--comm-timeout); another rank is stuck
    // or gone").
    [[noreturn]] void end_job(Collective op, std::uint64_t bytes, const std::string& why);
    [[noreturn]] void ended_by_timeout(Collective op, std::uint64_t bytes);

private:
    struct Started {
        Ticket ticket = 0;
        std::uint64_t handle = 0;  // the backend's; 0 once complete
        Collective op = Collective::all_reduce;
        std::string name;          // "all_reduce gradients h.3"
        std::uint64_t elements = 0;
        RingTraffic traffic;
        std::int64_t start_ns = 0, done_ns = -1;  // recorder time; done_ns once seen complete
    };
    Ticket start(Collective op, std::string_view what, void* buf, std::uint64_t n,
                 std::uint64_t elements, DType dtype);
    // One call of `op` with traffic t, timed from wall0 to now, into the counters.
    void count(Collective op, const RingTraffic& t, std::chrono::steady_clock::time_point wall0);
    void record_range(std::string name, std::int64_t t0, Collective op, std::uint64_t elements,
                      const RingTraffic& t, std::int64_t in_flight_ns);

    template <class F>
    void run(Collective op, std::string_view what, std::uint64_t elements,
             std::uint64_t element_bytes, int root, F&& call);

    int rank_, world_, local_rank_;
    CommCounters counters_;
    profiler::Recorder* rec_ = nullptr;
    double timeout_s_ = 0;
    FieldNamer field_namer_ = nullptr;
    std::vector<Started> started_;
    Ticket last_ticket_ = 0;
};

// What the launcher's environment says: OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK} (Open MPI),
// PMI_{SIZE,RANK} and MPI_LOCALRANKID (MPICH, Intel MPI). Size 1 and no launcher alike are one
// process.
struct LaunchEnv {
    int world = 1, rank = 0, local_rank = 0;
    int local_size = 1;  // ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS)
    std::string launcher;  // "Open MPI", "PMI", "" (none)
};
LaunchEnv launch_env();

// The communicator the environment asks for: world size 1 without a launcher, else MPI.
// Throws UsageError when a launcher started several ranks but napkin was built without MPI,
// and CommError when MPI cannot start or reports a rank or size other than the environment's.
std::unique_ptr<Communicator> make_communicator();
std::unique_ptr<Communicator> make_single_communicator();
bool mpi_built();

}  // namespace napkin
