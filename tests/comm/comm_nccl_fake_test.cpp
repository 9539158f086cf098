// The NCCL communicator's waits (core/comm/comm_nccl.cpp) on a machine without a GPU: a fake
// plugin table whose collectives do nothing and whose completion events finish when the test
// says, under a world-size-2 bootstrap that only pretends to broadcast. Collectives that
// complete are counted as before; one that never completes ends the job after --comm-timeout
// with the MPI backend's line, after ncclCommAbort and then the launcher's abort; an
// asynchronous NCCL error ends it at once with NCCL's text; a started collective's wait obeys
// the same rules. The real NCCL calls run in tests/comm/nccl_test.cpp (label gpu).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/comm/comm.h"
#include "core/comm/comm_nccl.h"
#include "core/cuda/cuda_engine_api.h"

namespace napkin {
namespace {

// ---- the fake plugin: what the test controls ----

int g_done_after = 1;           // event_done is true on this poll of an event; < 0: never
int g_polls = 0;                // polls of the current event
const char* g_async_error = nullptr;  // what nccl_async_error reports
int g_collectives = 0;          // NCCL collectives queued
int g_event_waits = 0;          // blocking event waits (no timeout)

int g_token = 0;  // the address every fake handle points at
template <class T>
T* fake() {
    return reinterpret_cast<T*>(&g_token);
}

CudaEngineApi fake_api() {
    CudaEngineApi a;
    a.stream_create = [] { return fake<CUstream_st>(); };
    a.stream_destroy = [](CUstream_st*) noexcept {};
    a.stream_synchronize = [](CUstream_st*) {};
    a.memory_create = []() -> RawMemory* { return new HostMemory(); };
    a.memory_destroy = [](RawMemory* m) noexcept { delete m; };
    a.memset_zero = [](void*, std::size_t, CUstream_st*) {};
    a.copy_to_device = [](void*, const void*, std::size_t, CUstream_st*) {};
    a.copy_to_host = [](void*, const void*, std::size_t, CUstream_st*) {};
    a.nccl_version = [] { return std::string("NCCL (fake)"); };
    a.nccl_unique_id = [](unsigned char*) {};
    a.nccl_set_device = [](int) {};
    a.nccl_init = [](int, int, const unsigned char*) { return fake<cuda::NcclComm>(); };
    a.nccl_destroy = [](cuda::NcclComm*) noexcept {};
    a.nccl_abort = [](cuda::NcclComm*) noexcept { std::fputs("fake: ncclCommAbort\n", stderr); };
    a.nccl_async_error = [](cuda::NcclComm*) noexcept { return g_async_error; };
    a.nccl_all_reduce = [](cuda::NcclComm*, void*, std::uint64_t, cuda::NcclType, CUstream_st*) { ++g_collectives; };
    a.nccl_reduce_scatter = [](cuda::NcclComm*, void*, std::uint64_t, cuda::NcclType, int, CUstream_st*) {
        ++g_collectives;
    };
    a.nccl_all_gather = [](cuda::NcclComm*, void*, std::uint64_t, cuda::NcclType, int, CUstream_st*) {
        ++g_collectives;
    };
    a.nccl_broadcast = [](cuda::NcclComm*, void*, std::uint64_t, int, CUstream_st*) { ++g_collectives; };
    a.event_record = [](CUstream_st*, bool) {
        g_polls = 0;
        return fake<cuda::CudaEvent>();
    };
    a.event_done = [](cuda::CudaEvent*) { return g_done_after >= 0 && ++g_polls >= g_done_after; };
    a.event_wait = [](cuda::CudaEvent*) { ++g_event_waits; };
    a.event_destroy = [](cuda::CudaEvent*) noexcept {};
    return a;
}

// Rank 0 of 2 whose broadcast (of NCCL's unique id) does nothing and whose abort is the
// launcher's: a line, then the process ends with the code.
class FakeBootstrap final : public Communicator {
public:
    FakeBootstrap() : Communicator(0, 2, 0) {}
    std::string backend() const override { return "fake"; }
    [[noreturn]] void abort(int code) override {
        std::fputs("fake: launcher abort\n", stderr);
        std::fflush(stderr);
        std::_Exit(code);
    }

protected:
    void do_all_reduce(void*, std::uint64_t, Wire) override {}
    void do_reduce_scatter(void*, std::uint64_t, Wire) override {}
    void do_all_gather(void*, std::uint64_t, Wire) override {}
    void do_broadcast(void*, std::uint64_t, int) override {}
    void do_barrier() override {}
};

class NcclWaits : public testing::Test {
protected:
    void SetUp() override {
        g_done_after = 1;
        g_async_error = nullptr;
        g_collectives = 0;
        g_event_waits = 0;
        comm_ = make_nccl_communicator(boot_, api_);
        buf_.assign(1024, 0.0f);  // stands for device memory: the fake touches nothing
    }
    const CudaEngineApi api_ = fake_api();
    FakeBootstrap boot_;
    std::unique_ptr<Communicator> comm_;
    std::vector<float> buf_;
};

TEST_F(NcclWaits, CollectivesThatCompleteReturnAndAreCounted) {
    comm_->set_timeout_s(30);
    g_done_after = 3;  // each event completes on its third poll
    comm_->all_reduce(buf_.data(), 1024, DType::f32);
    comm_->reduce_scatter(buf_.data(), 512, DType::f32);
    comm_->all_gather(buf_.data(), 512, DType::bf16);
    comm_->broadcast(buf_.data(), 64, 0);
    comm_->barrier();
    double scalars[2] = {1, 2};
    comm_->all_reduce(scalars, 2);
    const Communicator::Ticket t = comm_->start_reduce_scatter(buf_.data(), 512, DType::f32);
    comm_->wait(t);
    EXPECT_EQ(g_collectives, 7);
    EXPECT_EQ(g_event_waits, 0) << "with a timeout every wait polls";
    const CommCounters& c = comm_->counters();
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::all_reduce)], 2u);
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::reduce_scatter)], 2u);
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::all_gather)], 1u);
    EXPECT_GT(c.total_sent(), 0u);

    comm_->set_timeout_s(0);  // forever: the driver's blocking wait
    comm_->all_reduce(buf_.data(), 1024, DType::f32);
    EXPECT_EQ(g_event_waits, 1);
}

using NcclWaitsDeathTest = NcclWaits;

TEST_F(NcclWaitsDeathTest, AStuckCollectiveEndsTheJobAfterTheTimeout) {
    comm_->set_timeout_s(0.2);
    g_done_after = -1;  // a peer never joins
    EXPECT_EXIT(comm_->all_reduce(buf_.data(), 1024, DType::f32), testing::ExitedWithCode(1),
                "napkin: rank 0 of 2: error: all_reduce of 4096 bytes did not complete within 0.2 s "
                "\\(comm_timeout\\); another rank is stuck or gone; ending every rank\n"
                "fake: ncclCommAbort\nfake: launcher abort");
}

// The timeout and the flag's name come from the launcher's communicator (napkin train sets them
// there, cli/train_flags.cpp): the NCCL communicator made from it keeps both.
TEST_F(NcclWaitsDeathTest, TheTimeoutAndItsNameComeFromTheBootstrap) {
    boot_.set_timeout_s(0.2);
    boot_.set_field_namer([](std::string_view f) { return "--" + std::string(f); });
    comm_ = make_nccl_communicator(boot_, api_);
    g_done_after = -1;
    EXPECT_EXIT(comm_->all_reduce(buf_.data(), 1024, DType::f32), testing::ExitedWithCode(1),
                "did not complete within 0.2 s \\(--comm_timeout\\)");
}

TEST_F(NcclWaitsDeathTest, AStartedCollectiveIsBoundedAtItsWait) {
    comm_->set_timeout_s(0.2);
    g_done_after = -1;
    const Communicator::Ticket t = comm_->start_all_gather(buf_.data(), 512, DType::f32);
    EXPECT_EXIT(comm_->wait(t), testing::ExitedWithCode(1),
                "error: all_gather of 4096 bytes did not complete within 0.2 s \\(comm_timeout\\)");
}

TEST_F(NcclWaitsDeathTest, AnAsyncNcclErrorEndsTheJobAtOnce) {
    comm_->set_timeout_s(600);  // not what ends it
    g_done_after = -1;
    g_async_error = "remote process exited or there was a network error";
    EXPECT_EXIT(comm_->reduce_scatter(buf_.data(), 256, DType::bf16), testing::ExitedWithCode(1),
                "napkin: rank 0 of 2: error: reduce_scatter of 1024 bytes failed: NCCL reports 'remote "
                "process exited or there was a network error'; ending every rank\nfake: ncclCommAbort");
}

}  // namespace
}  // namespace napkin
