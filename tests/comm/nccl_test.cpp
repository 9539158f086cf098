// The NCCL backend at world size 1 on one GPU (label gpu): every collective goes through NCCL
// on device buffers, leaves them as a one-rank sum leaves them, and is counted like the other
// backends (one call each, no bytes on a one-rank ring). Without a device the GPU test skips
// and the refusal is checked instead. Several ranks need one GPU each: docs/ZERO.md.
#include "core/comm/comm_nccl.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_engine_api.h"
#include "core/device.h"

namespace napkin {
namespace {

TEST(Nccl, WorldOneCollectivesGoThroughNccl) {
    std::string reason;
    const CudaEngineApi* api = cuda_engine_api(&reason);
    if (api == nullptr) GTEST_SKIP() << "no CUDA device (" << reason << "): the NCCL backend is compiled but not run";
    std::unique_ptr<Communicator> boot = make_single_communicator();
    std::unique_ptr<Communicator> comm = make_nccl_communicator(*boot);
    EXPECT_EQ(comm->backend().rfind("nccl (NCCL ", 0), 0u) << comm->backend();
    EXPECT_EQ(comm->world_size(), 1);
    EXPECT_EQ(comm->rank(), 0);

    RawMemory* mem = api->memory_create();
    CUstream_st* stream = api->stream_create();
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    const std::uint64_t n = 1000 + rng() % 100;  // odd sizes
    std::vector<float> want(n);
    for (float& v : want) v = u(rng);
    const std::size_t bytes = n * sizeof(float);
    void* d = mem->allocate(bytes);
    api->copy_to_device(d, want.data(), bytes, stream);

    comm->all_reduce(d, n, DType::f32, "test");
    comm->reduce_scatter(d, n, DType::f32, "test");
    comm->all_gather(d, n, DType::f32, "test");
    comm->barrier();
    std::vector<float> got(n, -1.0f);
    api->copy_to_host(got.data(), d, bytes, stream);
    EXPECT_EQ(got, want);  // a one-rank sum, scatter and gather change nothing

    // A broadcast carries host values (a run hash, checkpoint sizes): bounced through the device,
    // since NCCL reads only device memory.
    std::uint64_t sent[2] = {12345, 0xfeedfacecafebeefull};
    comm->broadcast(sent, sizeof sent, 0, "test");
    EXPECT_EQ(sent[0], 12345u);
    EXPECT_EQ(sent[1], 0xfeedfacecafebeefull);

    // fp64 scalars are host values (the loss, the norm), bounced through the device; a second,
    // longer call grows the bounce buffer.
    const std::vector<double> scalars = {0.5, -1e300, 3.0};
    std::vector<double> back = scalars;
    comm->all_reduce(back.data(), back.size(), "scalars");
    EXPECT_EQ(back, scalars);
    std::vector<double> more(37, 0.25);
    comm->all_reduce(more.data(), more.size(), "more scalars");
    EXPECT_EQ(more, std::vector<double>(37, 0.25));

    const CommCounters& c = comm->counters();
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::all_reduce)], 3u);
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::reduce_scatter)], 1u);
    EXPECT_EQ(c.calls[static_cast<std::size_t>(Collective::all_gather)], 1u);
    EXPECT_EQ(c.total_sent(), 0u);
    EXPECT_EQ(c.total_received(), 0u);

    mem->deallocate(d, bytes);
    api->stream_destroy(stream);
    api->memory_destroy(mem);
}

// Started collectives (--overlap) run on NCCL's stream and complete at wait(): three at once,
// polled, waited for in reverse order, each leaving its buffer as a one-rank collective does.
TEST(Nccl, StartedCollectivesCompleteAtWait) {
    std::string reason;
    const CudaEngineApi* api = cuda_engine_api(&reason);
    if (api == nullptr) GTEST_SKIP() << "no CUDA device (" << reason << "): the NCCL backend is compiled but not run";
    std::unique_ptr<Communicator> boot = make_single_communicator();
    std::unique_ptr<Communicator> comm = make_nccl_communicator(*boot);
    RawMemory* mem = api->memory_create();
    CUstream_st* stream = api->stream_create();
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    const std::uint64_t n = 4096 + rng() % 100;
    const std::size_t bytes = n * sizeof(float);
    std::vector<std::vector<float>> want(3, std::vector<float>(n));
    std::vector<void*> d(3);
    for (int i = 0; i < 3; ++i) {
        for (float& v : want[static_cast<std::size_t>(i)]) v = u(rng);
        d[static_cast<std::size_t>(i)] = mem->allocate(bytes);
        api->copy_to_device(d[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)].data(), bytes, stream);
    }
    const auto a = comm->start_all_reduce(d[0], n, DType::f32, "a");
    const auto b = comm->start_reduce_scatter(d[1], n, DType::f32, "b");
    const auto c = comm->start_all_gather(d[2], n, DType::f32, "c");
    EXPECT_EQ(comm->in_flight(), 3u);
    comm->progress();
    comm->wait(c);
    comm->wait(b);
    comm->wait(a);
    EXPECT_EQ(comm->in_flight(), 0u);
    for (int i = 0; i < 3; ++i) {
        std::vector<float> got(n, -1.0f);
        api->copy_to_host(got.data(), d[static_cast<std::size_t>(i)], bytes, stream);
        EXPECT_EQ(got, want[static_cast<std::size_t>(i)]) << "collective " << i;
        mem->deallocate(d[static_cast<std::size_t>(i)], bytes);
    }
    api->stream_destroy(stream);
    api->memory_destroy(mem);
}

TEST(Nccl, WithoutADeviceItIsRefusedInOneLine) {
    std::string reason;
    if (cuda_engine_api(&reason) != nullptr) GTEST_SKIP() << "a CUDA device is present: nothing to refuse";
    std::unique_ptr<Communicator> boot = make_single_communicator();
    try {
        make_nccl_communicator(*boot);
        ADD_FAILURE() << "no error without a device";
    } catch (const UsageError& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("NCCL: no CUDA device (", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
}

}  // namespace
}  // namespace napkin
