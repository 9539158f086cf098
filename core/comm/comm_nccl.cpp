// NcclCommunicator: core/comm/comm_nccl.h over the CUDA plugin's NCCL calls.
#include "core/comm/comm_nccl.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_engine_api.h"
#include "core/device.h"

namespace napkin {

namespace {

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(Communicator& bootstrap, const CudaEngineApi& api)
        : Communicator(bootstrap.rank(), bootstrap.world_size(), bootstrap.local_rank()),
          bootstrap_(bootstrap),
          api_(api) {
        api_.nccl_set_device(local_rank());
        unsigned char id[cuda::kNcclIdBytes] = {};
        if (rank() == 0) api_.nccl_unique_id(id);
        bootstrap_.broadcast(id, sizeof id, 0, "nccl unique id");
        comm_ = api_.nccl_init(world_size(), rank(), id);
        stream_ = api_.stream_create();
        memory_ = api_.memory_create();
        barrier_buf_ = memory_->allocate(kBarrierBytes);
        api_.memset_zero(barrier_buf_, kBarrierBytes, stream_);
        backend_ = "nccl (" + api_.nccl_version() + ")";
        // The launcher's communicator carries the run's timeout and how its messages name it;
        // the collectives that move to NCCL keep both (a stuck rank ends the job here too).
        set_timeout_s(bootstrap.timeout_s());
        set_field_namer(bootstrap.field_namer());
    }
    ~NcclCommunicator() override {
        for (const Started& s : started_)
            api_.event_destroy(s.event);
        if (scalars_ != nullptr) memory_->deallocate(scalars_, scalar_bytes_);
        if (barrier_buf_ != nullptr) memory_->deallocate(barrier_buf_, kBarrierBytes);
        api_.memory_destroy(memory_);
        api_.stream_destroy(stream_);
        api_.nccl_destroy(comm_);
    }

    std::string backend() const override { return backend_; }

    [[noreturn]] void abort(int exit_code) override {
        api_.nccl_abort(comm_);  // releases collectives in flight before the launcher's abort
        bootstrap_.abort(exit_code);
        std::abort();  // not reached: the bootstrap's abort ends the process
    }

protected:
    // Each blocking collective is queued on stream_ and waited for through finish(): the same
    // bounded wait as a started one's.
    void do_all_reduce(void* buf, std::uint64_t count, Wire t) override {
        const std::uint64_t bytes = count * wire_size(t);
        if (t != Wire::f64) {
            api_.nccl_all_reduce(comm_, buf, count, type(t), stream_);
            return finish(Collective::all_reduce, bytes);
        }
        // fp64 scalars (a step's loss, the gradient norm's sum of squares) are host values: NCCL
        // takes device pointers only, so they go through a device buffer of this
        // communicator's. The copy back runs once the all-reduce is done (its own wait is then
        // immediate), so the host sees the sum on return.
        void* d = host_bounce(bytes);
        api_.copy_to_device(d, buf, bytes, stream_);
        api_.nccl_all_reduce(comm_, d, count, cuda::NcclType::f64, stream_);
        finish(Collective::all_reduce, bytes);
        api_.copy_to_host(buf, d, bytes, stream_);
    }
    void do_reduce_scatter(void* buf, std::uint64_t shard, Wire t) override {
        api_.nccl_reduce_scatter(comm_, buf, shard, type(t), rank(), stream_);
        finish(Collective::reduce_scatter, whole_bytes(shard, t));
    }
    void do_all_gather(void* buf, std::uint64_t shard, Wire t) override {
        api_.nccl_all_gather(comm_, buf, shard, type(t), rank(), stream_);
        finish(Collective::all_gather, whole_bytes(shard, t));
    }
    // Host values (a run hash, checkpoint sizes: comm.h), bounced through the device like the
    // fp64 scalars: NCCL would read a host pointer as a device address.
    void do_broadcast(void* buf, std::uint64_t bytes, int root) override {
        void* d = host_bounce(bytes);
        api_.copy_to_device(d, buf, bytes, stream_);
        api_.nccl_broadcast(comm_, d, bytes, root, stream_);
        finish(Collective::broadcast, bytes);
        api_.copy_to_host(buf, d, bytes, stream_);
    }
    // NCCL has no barrier: an all-reduce of one float every rank must join.
    void do_barrier() override {
        api_.nccl_all_reduce(comm_, barrier_buf_, 1, cuda::NcclType::f32, stream_);
        finish(Collective::barrier, 0);
    }
    // Started collectives run on this communicator's stream beside the engine's (whose work on
    // the buffer the caller has waited for: core/engine/zero.cpp), each followed by an event
    // that test and wait look at; started ones complete in their order on the one stream.
    std::uint64_t do_start(Collective op, void* buf, std::uint64_t n, Wire t) override {
        switch (op) {
            case Collective::all_reduce:
                api_.nccl_all_reduce(comm_, buf, n, type(t), stream_);
                break;
            case Collective::reduce_scatter:
                api_.nccl_reduce_scatter(comm_, buf, n, type(t), rank(), stream_);
                break;
            case Collective::all_gather:
                api_.nccl_all_gather(comm_, buf, n, type(t), rank(), stream_);
                break;
            case Collective::broadcast:
            case Collective::barrier:
                NAPKIN_ASSERT(false, "no nonblocking " << enum_name(kCollectiveNames, op));
        }
        const std::uint64_t bytes = op == Collective::all_reduce ? n * wire_size(t) : whole_bytes(n, t);
        started_.push_back({++last_handle_, api_.event_record(stream_, false), op, bytes});
        return last_handle_;
    }
    bool do_test(std::uint64_t handle) override {
        auto it = find(handle);
        if (!api_.event_done(it->event)) return false;
        api_.event_destroy(it->event);
        started_.erase(it);
        return true;
    }
    void do_wait(std::uint64_t handle) override {
        auto it = find(handle);
        wait_for(it->event, it->op, it->bytes);
        api_.event_destroy(it->event);
        started_.erase(it);
    }

private:
    // The device buffer host values go through, grown to `bytes` when needed.
    void* host_bounce(std::uint64_t bytes) {
        if (bytes > scalar_bytes_) {
            if (scalars_ != nullptr) memory_->deallocate(scalars_, scalar_bytes_);
            scalars_ = nullptr;
            scalars_ = memory_->allocate(bytes);
            scalar_bytes_ = bytes;
        }
        return scalars_;
    }

    static constexpr std::size_t kBarrierBytes = 256;
    struct Started {
        std::uint64_t handle = 0;
        cuda::CudaEvent* event = nullptr;  // recorded after the collective on stream_
        Collective op = Collective::all_reduce;
        std::uint64_t bytes = 0;  // the whole buffer, for the messages
    };
    std::vector<Started>::iterator find(std::uint64_t handle) {
        auto it = std::find_if(started_.begin(), started_.end(), [&](const Started& s) { return s.handle == handle; });
        NAPKIN_ASSERT(it != started_.end(), "no started NCCL collective " << handle);
        return it;
    }
    std::uint64_t whole_bytes(std::uint64_t shard, Wire t) const {
        return shard * static_cast<std::uint64_t>(world_size()) * wire_size(t);
    }

    // The collective just queued on stream_, waited for.
    void finish(Collective op, std::uint64_t bytes) {
        cuda::CudaEvent* event = api_.event_record(stream_, false);
        wait_for(event, op, bytes);
        api_.event_destroy(event);
    }

    // Returns when `event` has completed. A peer that is gone or stuck leaves NCCL's kernel
    // spinning and the event pending forever, so the wait polls: past timeout_s() it ends the
    // job with the MPI backend's line (Communicator::ended_by_timeout, which calls abort():
    // ncclCommAbort, then the launcher's abort), and an asynchronous NCCL error (a peer's
    // network gone) ends it at once with NCCL's text. Without a timeout it is the driver's wait.
    // The first ~2 ms spin with yields (a collective usually completes within them), then sleeps
    // grow to 1 ms: at most that much latency added to a collective that takes longer.
    void wait_for(cuda::CudaEvent* event, Collective op, std::uint64_t bytes) {
        using clock = std::chrono::steady_clock;
        if (timeout_s() <= 0) return api_.event_wait(event);
        const auto start = clock::now();
        auto nap = std::chrono::microseconds(25);
        while (!api_.event_done(event)) {
            if (const char* error = api_.nccl_async_error(comm_))
                end_job(op, bytes, std::string("failed: NCCL reports '") + error + "'");
            const double waited = std::chrono::duration<double>(clock::now() - start).count();
            if (waited > timeout_s()) ended_by_timeout(op, bytes);
            if (waited < 2e-3) {
                std::this_thread::yield();
            } else {
                std::this_thread::sleep_for(nap);
                nap = std::min(nap * 2, std::chrono::microseconds(1000));
            }
        }
    }

    static cuda::NcclType type(Wire t) {
        switch (t) {
            case Wire::f32: return cuda::NcclType::f32;
            case Wire::f16: return cuda::NcclType::f16;
            case Wire::bf16: return cuda::NcclType::bf16;
            case Wire::f64: return cuda::NcclType::f64;
            case Wire::f32_max: return cuda::NcclType::f32_max;
        }
        NAPKIN_ASSERT(false, "unknown wire type " << static_cast<int>(t));
        return cuda::NcclType::f32;
    }

    Communicator& bootstrap_;
    const CudaEngineApi& api_;
    cuda::NcclComm* comm_ = nullptr;
    CUstream_st* stream_ = nullptr;
    RawMemory* memory_ = nullptr;
    void* barrier_buf_ = nullptr;
    void* scalars_ = nullptr;  // the fp64 all-reduce's device copy of the host values
    std::size_t scalar_bytes_ = 0;
    std::vector<Started> started_;  // started collectives, with their completion events
    std::uint64_t last_handle_ = 0;
    std::string backend_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap) {
    std::string reason;
    const CudaEngineApi* api = cuda_engine_api(&reason);
    if (api == nullptr) throw UsageError("NCCL: no CUDA device (" + reason + ")");
    return std::make_unique<NcclCommunicator>(bootstrap, *api);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, const CudaEngineApi& api) {
    return std::make_unique<NcclCommunicator>(bootstrap, api);
}

}  // namespace napkin
