// NcclCommunicator: core/comm/comm_nccl.h over the CUDA plugin's NCCL calls.
#include "core/comm/comm_nccl.h"

#include <algorithm>
#include <cstdlib>
#include <string>
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
    }
    ~NcclCommunicator() override {
        for (auto& [id, event] : started_)
            api_.event_destroy(event);
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
    void do_all_reduce(void* buf, std::uint64_t count, Wire t) override {
        if (t != Wire::f64) {
            api_.nccl_all_reduce(comm_, buf, count, type(t), stream_);
            return api_.stream_synchronize(stream_);
        }
        // fp64 scalars (a step's loss, the gradient norm's sum of squares) are host values: NCCL
        // takes device pointers only, so they go through a device buffer of this
        // communicator's. Both copies wait on stream_, so the host sees the sum on return.
        const std::size_t bytes = count * sizeof(double);
        if (bytes > scalar_bytes_) {
            if (scalars_ != nullptr) memory_->deallocate(scalars_, scalar_bytes_);
            scalars_ = nullptr;
            scalars_ = memory_->allocate(bytes);
            scalar_bytes_ = bytes;
        }
        api_.copy_to_device(scalars_, buf, bytes, stream_);
        api_.nccl_all_reduce(comm_, scalars_, count, cuda::NcclType::f64, stream_);
        api_.copy_to_host(buf, scalars_, bytes, stream_);
    }
    void do_reduce_scatter(void* buf, std::uint64_t shard, Wire t) override {
        api_.nccl_reduce_scatter(comm_, buf, shard, type(t), rank(), stream_);
        api_.stream_synchronize(stream_);
    }
    void do_all_gather(void* buf, std::uint64_t shard, Wire t) override {
        api_.nccl_all_gather(comm_, buf, shard, type(t), rank(), stream_);
        api_.stream_synchronize(stream_);
    }
    void do_broadcast(void* buf, std::uint64_t bytes, int root) override {
        api_.nccl_broadcast(comm_, buf, bytes, root, stream_);
    }
    // NCCL has no barrier: an all-reduce of one float every rank must join.
    void do_barrier() override {
        api_.nccl_all_reduce(comm_, barrier_buf_, 1, cuda::NcclType::f32, stream_);
        api_.stream_synchronize(stream_);
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
        started_.emplace_back(++last_handle_, api_.event_record(stream_, false));
        return last_handle_;
    }
    bool do_test(std::uint64_t handle) override {
        auto it = find(handle);
        if (!api_.event_done(it->second)) return false;
        api_.event_destroy(it->second);
        started_.erase(it);
        return true;
    }
    void do_wait(std::uint64_t handle) override {
        auto it = find(handle);
        api_.event_wait(it->second);
        api_.event_destroy(it->second);
        started_.erase(it);
    }

private:
    static constexpr std::size_t kBarrierBytes = 256;
    using Started = std::vector<std::pair<std::uint64_t, cuda::CudaEvent*>>;
    Started::iterator find(std::uint64_t handle) {
        auto it = std::find_if(started_.begin(), started_.end(), [&](const auto& s) { return s.first == handle; });
        NAPKIN_ASSERT(it != started_.end(), "no started NCCL collective " << handle);
        return it;
    }

    static cuda::NcclType type(Wire t) {
        switch (t) {
            case Wire::f32: return cuda::NcclType::f32;
            case Wire::f16: return cuda::NcclType::f16;
            case Wire::bf16: return cuda::NcclType::bf16;
            case Wire::f64: return cuda::NcclType::f64;
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
    Started started_;  // started collectives: handle and completion event
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

}  // namespace napkin
