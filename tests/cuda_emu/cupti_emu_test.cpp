// The emulated CUPTI (tests/cuda_emu/cupti_emu.cpp) against the plugin's collection code
// (core/cuda/cupti_activity.cpp), on emulated kernels, copies, sets and waits: each launch comes
// back once with its name, shape and stream, linked to its cudaLaunchKernel record and to the
// external ids pushed around it; copies and sets with their bytes and direction; waits as
// synchronization records; nothing while disabled. With the test's own buffer callbacks, the
// raw CUPTI calls: the record structs, full and partly filled buffers, dropped records, threads.
// CUPTI's state is process-wide: every test leaves collection disabled and no buffer held.
// First: it defines what the CUDA headers then keep (run_kernel, for a launch on a stream).
#include "tests/cuda_emu/cuda_emu.h"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cupti_activity.h"
#include "profiler/gpu_activity.h"
#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/selftest_kernels.h"

namespace napkin::emu {
namespace {

using profiler::GpuActivity;
using profiler::GpuActivityKind;
using profiler::GpuActivityStats;

constexpr std::uint32_t kNoStream = CUPTI_SYNCHRONIZATION_INVALID_VALUE;

// Device memory of `bytes`, freed at scope exit.
class DeviceMemory {
public:
    explicit DeviceMemory(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess); }
    ~DeviceMemory() { cudaFree(p_); }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    int* ints() const { return static_cast<int*>(p_); }
    void* get() const { return p_; }

private:
    void* p_ = nullptr;
};

// A stream, destroyed at scope exit.
class Stream {
public:
    Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess); }
    ~Stream() { cudaStreamDestroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

// block_sum over `blocks` blocks of `threads` ones: one launch of "block_sum_kernel".
void launch_block_sum(int blocks, int threads) {
    const std::size_t n = static_cast<std::size_t>(blocks) * static_cast<std::size_t>(threads);
    DeviceMemory in(n * sizeof(int)), out(static_cast<std::size_t>(blocks) * sizeof(int));
    ASSERT_EQ(cudaMemset(in.get(), 0, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(selftest::block_sum(in.ints(), out.ints(), blocks, threads), cudaSuccess);
}

// An emulated kernel with an empty body, launched on `stream` (block_sum takes none).
void launch_on(cudaStream_t stream, dim3 grid, dim3 block, std::size_t smem) {
    run_kernel("stream_probe", __FILE__, __LINE__, nullptr, grid, block, smem, stream, [] {});
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- through the plugin's collection (core/cuda/cupti_activity.h) ----

// Collection on for the scope, and off at its end whatever happened. `drain`: first take what
// an earlier collection left pending.
class Collection {
public:
    explicit Collection(bool drain = true) {
        reset_for_test();
        char error[256] = "";
        const bool on = cuda::activity_enable(error, sizeof error);
        EXPECT_TRUE(on) << error;
        if (drain) flush();
    }
    ~Collection() {
        cuda::activity_disable();
        std::vector<GpuActivity> rest;
        cuda::activity_flush(true, &rest, &stats_);
    }
    Collection(const Collection&) = delete;
    Collection& operator=(const Collection&) = delete;

    std::vector<GpuActivity> flush(bool wait = true) {
        std::vector<GpuActivity> out;
        cuda::activity_flush(wait, &out, &stats_);
        return out;
    }
    const GpuActivityStats& stats() const { return stats_; }

private:
    GpuActivityStats stats_;
};

std::vector<GpuActivity> of_kind(const std::vector<GpuActivity>& records, GpuActivityKind kind) {
    std::vector<GpuActivity> out;
    for (const GpuActivity& a : records)
        if (a.kind == kind) out.push_back(a);
    return out;
}

// The runtime record of the call whose correlation id is `correlation`; fails unless exactly one.
GpuActivity runtime_of(const std::vector<GpuActivity>& records, std::uint32_t correlation) {
    std::vector<GpuActivity> calls;
    for (const GpuActivity& a : records)
        if (a.kind == GpuActivityKind::runtime && a.correlation_id == correlation)
            calls.push_back(a);
    EXPECT_EQ(calls.size(), 1u) << "runtime records of correlation " << correlation;
    return calls.empty() ? GpuActivity{} : calls.front();
}

// `work` was caused by the runtime call named `call`: inside it when the call is synchronous;
// after it when asynchronous (a launch, an *Async copy or set returns once its work is queued,
// so a launch's flow, from the call's middle to the kernel's, runs forward in time).
void expect_caused_by(const std::vector<GpuActivity>& records, const GpuActivity& work,
                      const std::string& call) {
    const GpuActivity api = runtime_of(records, work.correlation_id);
    EXPECT_EQ(api.name, call) << work.name;
    EXPECT_LE(api.start_ns, work.start_ns) << work.name;
    EXPECT_LE(work.start_ns, work.end_ns) << work.name;
    const bool async =
        call.find("Async") != std::string::npos || call.find("Launch") != std::string::npos;
    if (async)
        EXPECT_LE(api.end_ns, work.start_ns) << work.name << ": " << call << " returns when queued";
    else
        EXPECT_LE(work.end_ns, api.end_ns) << work.name << ": " << call << " waits for its work";
    EXPECT_EQ(api.host_thread, static_cast<std::uint32_t>(pthread_self()));
}

TEST(CuptiEmu, EveryKernelComesBackOnceWithItsShapeStreamAndLaunch) {
    Collection collection;
    Stream stream;
    const std::uint64_t before = cuda::activity_timestamp();
    launch_block_sum(3, 64);
    launch_block_sum(2, 32);
    launch_on(stream.get(), dim3(2, 3), dim3(32, 2), 128);
    launch_on(stream.get(), dim3(5), dim3(64), 0);
    const std::uint64_t after = cuda::activity_timestamp();
    const std::vector<GpuActivity> records = collection.flush();

    const std::vector<GpuActivity> kernels = of_kind(records, GpuActivityKind::kernel);
    ASSERT_EQ(kernels.size(), 4u);
    struct Want {
        const char* name;
        std::int32_t grid[3], block[3], shared;
    };
    const Want want[] = {{"block_sum_kernel", {3, 1, 1}, {16, 4, 1}, 0},
                         {"block_sum_kernel", {2, 1, 1}, {8, 4, 1}, 0},
                         {"stream_probe", {2, 3, 1}, {32, 2, 1}, 128},
                         {"stream_probe", {5, 1, 1}, {64, 1, 1}, 0}};
    std::set<std::uint32_t> correlations;
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const GpuActivity& k = kernels[i];
        EXPECT_EQ(k.name, want[i].name);
        for (int d = 0; d < 3; ++d) {
            EXPECT_EQ(k.grid[d], want[i].grid[d]) << i << " grid " << d;
            EXPECT_EQ(k.block[d], want[i].block[d]) << i << " block " << d;
        }
        EXPECT_EQ(k.shared_bytes, want[i].shared) << i;
        EXPECT_EQ(k.device, 0u);
        EXPECT_LE(before, k.start_ns);
        EXPECT_LE(k.end_ns, after);
        EXPECT_TRUE(correlations.insert(k.correlation_id).second) << "correlation reused";
        expect_caused_by(records, k, "cudaLaunchKernel_v7000");
    }
    // One id per stream, the same for every launch on it.
    EXPECT_EQ(kernels[0].stream, kernels[1].stream);
    EXPECT_EQ(kernels[2].stream, kernels[3].stream);
    EXPECT_NE(kernels[0].stream, kernels[2].stream);

    EXPECT_EQ(collection.stats().records, records.size());
    EXPECT_EQ(collection.stats().dropped_records, 0u);
    EXPECT_EQ(collection.stats().failures, 0u);
}

TEST(CuptiEmu, CopiesAndSetsCarryTheirBytesDirectionAndStream) {
    Collection collection;
    Stream stream;
    DeviceMemory a(1024), b(1024);
    std::vector<char> host(1024, 5), back(1024);
    ASSERT_EQ(cudaMemcpy(a.get(), host.data(), 1024, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(b.get(), a.get(), 512, cudaMemcpyDeviceToDevice, stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), b.get(), 256, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), host.data(), 64, cudaMemcpyHostToHost), cudaSuccess);
    ASSERT_EQ(cudaMemset(a.get(), 0, 100), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.get(), 7, 200, stream.get()), cudaSuccess);
    launch_on(stream.get(), dim3(1), dim3(32), 0);
    const std::vector<GpuActivity> records = collection.flush();

    const std::vector<GpuActivity> copies = of_kind(records, GpuActivityKind::memcpy);
    ASSERT_EQ(copies.size(), 4u);
    const char* names[] = {"memcpy HtoD", "memcpy DtoD", "memcpy DtoH", "memcpy HtoH"};
    const std::uint64_t bytes[] = {1024, 512, 256, 64};
    const char* calls[] = {"cudaMemcpy_v3020", "cudaMemcpyAsync_v3020", "cudaMemcpy_v3020",
                           "cudaMemcpy_v3020"};
    for (std::size_t i = 0; i < copies.size(); ++i) {
        EXPECT_EQ(copies[i].name, names[i]);
        EXPECT_EQ(copies[i].bytes, bytes[i]) << names[i];
        expect_caused_by(records, copies[i], calls[i]);
    }
    const std::vector<GpuActivity> sets = of_kind(records, GpuActivityKind::memset);
    ASSERT_EQ(sets.size(), 2u);
    EXPECT_EQ(sets[0].bytes, 100u);
    EXPECT_EQ(sets[1].bytes, 200u);
    expect_caused_by(records, sets[0], "cudaMemset_v3020");
    expect_caused_by(records, sets[1], "cudaMemsetAsync_v3020");

    // The stream's work shares its id; the default stream's has another.
    const std::vector<GpuActivity> kernels = of_kind(records, GpuActivityKind::kernel);
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(copies[1].stream, kernels[0].stream);
    EXPECT_EQ(sets[1].stream, kernels[0].stream);
    EXPECT_EQ(copies[0].stream, sets[0].stream);
    EXPECT_NE(copies[0].stream, kernels[0].stream);
}

TEST(CuptiEmu, WaitsComeBackAsSynchronizationRecords) {
    Collection collection;
    Stream stream;
    DeviceMemory a(64);
    cudaEvent_t event = nullptr;
    ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(a.get(), 0, 64, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(event, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
    const std::vector<GpuActivity> records = collection.flush();

    const std::vector<GpuActivity> waits = of_kind(records, GpuActivityKind::synchronization);
    ASSERT_EQ(waits.size(), 3u);
    expect_caused_by(records, waits[0], "cudaDeviceSynchronize_v3020");
    expect_caused_by(records, waits[1], "cudaStreamSynchronize_v3020");
    expect_caused_by(records, waits[2], "cudaEventSynchronize_v3020");
    const std::vector<GpuActivity> sets = of_kind(records, GpuActivityKind::memset);
    ASSERT_EQ(sets.size(), 1u);
    EXPECT_EQ(waits[0].stream, kNoStream);  // a context wait names no stream
    EXPECT_EQ(waits[1].stream, sets[0].stream);
    EXPECT_EQ(waits[2].stream, kNoStream);  // an event wait names its event instead
}

TEST(CuptiEmu, ExternalIdsPushedAroundALaunchComeBackLinkedToIt) {
    Collection collection;
    cuda::activity_push_external(41);
    launch_block_sum(1, 32);  // 41
    cuda::activity_push_external(42);
    launch_block_sum(1, 32);  // 42: the top of the stack
    cuda::activity_pop_external();
    launch_block_sum(1, 32);  // 41 again
    cuda::activity_pop_external();
    launch_block_sum(1, 32);  // none
    const std::vector<GpuActivity> records = collection.flush();

    std::map<std::uint32_t, std::vector<std::uint64_t>> external;  // correlation -> ids
    for (const GpuActivity& a : of_kind(records, GpuActivityKind::external_correlation)) {
        external[a.correlation_id].push_back(a.external_id);
        runtime_of(records, a.correlation_id);  // every one names a traced call
    }
    const std::vector<GpuActivity> kernels = of_kind(records, GpuActivityKind::kernel);
    ASSERT_EQ(kernels.size(), 4u);
    const std::vector<std::uint64_t> want[] = {{41}, {42}, {41}, {}};
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        auto it = external.find(kernels[i].correlation_id);
        const std::vector<std::uint64_t> got =
            it == external.end() ? std::vector<std::uint64_t>{} : it->second;
        EXPECT_EQ(got, want[i]) << "launch " << i;
    }
    // The copies and sets inside the regions are linked too: every traced call is.
    for (const GpuActivity& a : of_kind(records, GpuActivityKind::memset)) {
        const bool inside = a.start_ns < kernels[2].end_ns;
        EXPECT_EQ(external.count(a.correlation_id), inside ? 1u : 0u);
    }
    EXPECT_EQ(collection.stats().failures, 0u);  // every pop found its push
}

// CUDA graphs: each node captured while an external id is pushed comes back as a graph_node
// record, and so does its clone at instantiation; the launched work's records carry the clone's
// id (and the executable graph's), which maps to that id, and the launch's correlation id. A
// node captured under no id maps to nothing. Nothing runs at the capture.
TEST(CuptiEmu, GraphNodesAreReportedAndTheirWorkCarriesTheirIds) {
    Collection collection;
    Stream stream;
    DeviceMemory mem(64);
    ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    cuda::activity_push_external(51);
    launch_on(stream.get(), dim3(2), dim3(32), 0);
    cuda::activity_pop_external();
    cuda::activity_push_external(52);
    ASSERT_EQ(cudaMemsetAsync(mem.get(), 0, 64, stream.get()), cudaSuccess);
    cuda::activity_pop_external();
    launch_on(stream.get(), dim3(1), dim3(32), 0);  // under no id
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    for (int launch = 0; launch < 2; ++launch)
        ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    const std::vector<GpuActivity> records = collection.flush();

    std::map<std::uint64_t, std::uint64_t> node_external;
    for (const GpuActivity& a : of_kind(records, GpuActivityKind::graph_node)) {
        EXPECT_NE(a.graph_node_id, 0u);
        EXPECT_EQ(node_external.count(a.graph_node_id), 0u) << "node " << a.graph_node_id;
        node_external[a.graph_node_id] = a.external_id;
    }
    EXPECT_EQ(node_external.size(), 4u);  // the two captured under ids, and their clones
    const std::vector<GpuActivity> kernels = of_kind(records, GpuActivityKind::kernel);
    const std::vector<GpuActivity> sets = of_kind(records, GpuActivityKind::memset);
    ASSERT_EQ(kernels.size(), 4u);  // two per launch, none at the capture
    ASSERT_EQ(sets.size(), 2u);
    std::set<std::uint64_t> launched_nodes;
    for (std::size_t launch = 0; launch < 2; ++launch) {
        SCOPED_TRACE(testing::Message() << "launch " << launch);
        const GpuActivity &first = kernels[2 * launch], &set = sets[launch],
                          &last = kernels[2 * launch + 1];
        EXPECT_EQ(node_external[first.graph_node_id], 51u);
        EXPECT_EQ(node_external[set.graph_node_id], 52u);
        EXPECT_NE(last.graph_node_id, 0u);
        EXPECT_EQ(node_external.count(last.graph_node_id), 0u);
        for (const GpuActivity* a : {&first, &set, &last}) {
            EXPECT_EQ(a->correlation_id, first.correlation_id);
            EXPECT_EQ(a->graph_id, kernels[0].graph_id);
            EXPECT_NE(a->graph_id, 0u);
            launched_nodes.insert(a->graph_node_id);
        }
        EXPECT_EQ(runtime_of(records, first.correlation_id).name, "cudaGraphLaunch_v10000");
    }
    EXPECT_EQ(launched_nodes.size(), 3u);  // the executable graph's nodes, the same each launch
    EXPECT_EQ(collection.stats().failures, 0u);
}

TEST(CuptiEmu, NothingIsRecordedWhileDisabled) {
    { Collection on; }  // registered, then every kind disabled again
    cuda::activity_push_external(7);
    launch_block_sum(2, 32);
    Stream stream;
    launch_on(stream.get(), dim3(1), dim3(32), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cuda::activity_pop_external();

    Collection collection(false);  // a drain would hide what was recorded
    EXPECT_TRUE(collection.flush().empty());
    EXPECT_EQ(collection.stats().records, 0u);
    EXPECT_EQ(collection.stats().dropped_records, 0u);
    // And collecting again works.
    launch_block_sum(1, 32);
    EXPECT_EQ(of_kind(collection.flush(), GpuActivityKind::kernel).size(), 1u);
}

// The profiler's collector flushes, then disables: the disable's own flush may still hand over
// records (another thread's API calls, in a real process), which nobody takes. The next
// collection in the process must not start with them: its external ids start again at 1.
TEST(CuptiEmu, ANewCollectionDropsWhatTheLastOneLeftPending) {
    reset_for_test();
    char error[256] = "";
    ASSERT_TRUE(cuda::activity_enable(error, sizeof error)) << error;
    cuda::activity_push_external(1);
    launch_block_sum(1, 32);
    cuda::activity_pop_external();
    cuda::activity_disable();  // its forced flush delivers the launch, pending from now on

    Collection collection(false);
    EXPECT_TRUE(collection.flush().empty()) << "records of the previous collection";
    launch_block_sum(1, 32);
    EXPECT_EQ(of_kind(collection.flush(), GpuActivityKind::kernel).size(), 1u);
}

TEST(CuptiEmu, AFlushWithoutWaitKeepsAPartlyFilledBuffer) {
    Collection collection;
    launch_block_sum(1, 32);
    EXPECT_TRUE(collection.flush(false).empty());
    EXPECT_EQ(collection.stats().records, 0u);
    const std::vector<GpuActivity> records = collection.flush(true);
    EXPECT_EQ(of_kind(records, GpuActivityKind::kernel).size(), 1u);
    EXPECT_EQ(collection.stats().records, records.size());
}

TEST(CuptiEmu, ASecondCollectionIsRefused) {
    Collection collection;
    char error[256] = "";
    EXPECT_FALSE(cuda::activity_enable(error, sizeof error));
    EXPECT_NE(std::string(error).find("already"), std::string::npos) << error;
}

// ---- the raw CUPTI calls, with this test's own buffer callbacks ----

// What the callbacks below hand out and got back. Plain globals: CUPTI takes C functions.
struct Raw {
    // Requests: refuse the first `refuse_first`, then give `buffer_bytes` (0: refuse) at
    // `misalign` bytes past an 8-byte boundary, at most `max_records` records each.
    int refuse_first = 0;
    std::size_t buffer_bytes = 1 << 16;
    std::size_t misalign = 0;
    std::size_t max_records = 0;
    int requests = 0;
    int outstanding = 0;                          // handed out, not yet back
    std::map<std::uint8_t*, std::uint8_t*> base;  // handed out -> allocation
    // Completions: each record copied out (8-byte aligned storage), and per buffer its count.
    std::vector<std::vector<std::uint64_t>> records;
    std::vector<std::size_t> buffer_records;
    std::vector<std::size_t> valid_sizes;
    std::size_t dropped = 0;  // cuptiActivityGetNumDroppedRecords, summed at each completion
    int misaligned_records = 0;
    int bad_ends = 0;  // iterations that ended other than CUPTI_ERROR_MAX_LIMIT_REACHED
};
Raw g_raw;
std::mutex g_raw_mutex;  // the threads test requests buffers from several threads

std::size_t struct_bytes(CUpti_ActivityKind kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            return sizeof(CUpti_ActivityKernel10);
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            return sizeof(CUpti_ActivityMemcpy6);
        case CUPTI_ACTIVITY_KIND_MEMSET:
            return sizeof(CUpti_ActivityMemset4);
        case CUPTI_ACTIVITY_KIND_RUNTIME:
            return sizeof(CUpti_ActivityAPI);
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
            return sizeof(CUpti_ActivitySynchronization2);
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
            return sizeof(CUpti_ActivityExternalCorrelation);
        default:
            return sizeof(CUpti_Activity);
    }
}

void CUPTIAPI raw_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    std::lock_guard<std::mutex> lock(g_raw_mutex);
    ++g_raw.requests;
    *buffer = nullptr;
    *size = 0;
    *max_records = g_raw.max_records;
    if (g_raw.requests <= g_raw.refuse_first || g_raw.buffer_bytes == 0) return;
    auto* allocation = new std::uint8_t[g_raw.buffer_bytes + g_raw.misalign];
    *buffer = allocation + g_raw.misalign;
    *size = g_raw.buffer_bytes;
    g_raw.base[*buffer] = allocation;
    ++g_raw.outstanding;
}

void CUPTIAPI raw_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                            std::size_t valid) {
    std::size_t dropped = 0;
    const CUptiResult dropped_status = cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    std::lock_guard<std::mutex> lock(g_raw_mutex);
    EXPECT_EQ(dropped_status, CUPTI_SUCCESS);
    g_raw.dropped += dropped;
    CUpti_Activity* record = nullptr;
    std::size_t n = 0;
    CUptiResult status;
    while ((status = cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
        if (reinterpret_cast<std::uintptr_t>(record) % 8 != 0) ++g_raw.misaligned_records;
        const std::size_t bytes = struct_bytes(record->kind);
        std::vector<std::uint64_t> copy((bytes + 7) / 8);
        std::memcpy(copy.data(), record, bytes);
        g_raw.records.push_back(std::move(copy));
        ++n;
    }
    if (status != CUPTI_ERROR_MAX_LIMIT_REACHED) ++g_raw.bad_ends;
    g_raw.buffer_records.push_back(n);
    g_raw.valid_sizes.push_back(valid);
    auto it = g_raw.base.find(buffer);
    ASSERT_NE(it, g_raw.base.end()) << "a buffer this test never handed out";
    delete[] it->second;
    g_raw.base.erase(it);
    --g_raw.outstanding;
}

constexpr CUpti_ActivityKind kAllKinds[] = {
    CUPTI_ACTIVITY_KIND_KERNEL,          CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,         CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// The test's callbacks registered and `kinds` enabled for the scope; at its end every kind
// disabled, every buffer back (a forced flush) and the dropped count read.
class RawSession {
public:
    explicit RawSession(std::initializer_list<CUpti_ActivityKind> kinds) {
        reset_for_test();
        g_raw = Raw{};
        EXPECT_EQ(cuptiActivityRegisterCallbacks(raw_requested, raw_completed), CUPTI_SUCCESS);
        for (CUpti_ActivityKind kind : kinds)
            EXPECT_EQ(cuptiActivityEnable(kind), CUPTI_SUCCESS);
    }
    ~RawSession() {
        for (CUpti_ActivityKind kind : kAllKinds)
            cuptiActivityDisable(kind);
        EXPECT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
        EXPECT_EQ(g_raw.outstanding, 0) << "buffers CUPTI kept after a forced flush";
        std::size_t dropped = 0;
        cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    }
    RawSession(const RawSession&) = delete;
    RawSession& operator=(const RawSession&) = delete;
};

CUpti_ActivityKind kind_of(const std::vector<std::uint64_t>& record) {
    CUpti_Activity a;
    std::memcpy(&a, record.data(), sizeof a);
    return a.kind;
}

// The delivered records of `kind` (both kernel kinds for either), as their struct.
template <class Record>
std::vector<Record> raw_records(std::initializer_list<CUpti_ActivityKind> kinds) {
    std::vector<Record> out;
    for (const auto& r : g_raw.records) {
        if (std::find(kinds.begin(), kinds.end(), kind_of(r)) == kinds.end()) continue;
        Record typed;
        std::memcpy(&typed, r.data(), sizeof typed);
        out.push_back(typed);
    }
    return out;
}

std::vector<CUpti_ActivityKind> raw_kinds() {
    std::vector<CUpti_ActivityKind> out;
    for (const auto& r : g_raw.records)
        out.push_back(kind_of(r));
    return out;
}

TEST(CuptiEmuRaw, RecordsAreTheStructsThePluginReads) {
    RawSession session({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                        CUPTI_ACTIVITY_KIND_SYNCHRONIZATION});
    Stream stream;
    DeviceMemory a(256);
    std::vector<char> host(256, 1);
    cudaEvent_t event = nullptr;
    ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
    launch_block_sum(2, 32);
    launch_block_sum(1, 64);
    ASSERT_EQ(cudaMemcpyAsync(a.get(), host.data(), 256, cudaMemcpyHostToDevice, stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaEventRecord(event, stream.get()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.misaligned_records, 0);
    EXPECT_EQ(g_raw.bad_ends, 0);

    const auto kernels =
        raw_records<CUpti_ActivityKernel10>({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL});
    ASSERT_EQ(kernels.size(), 2u);
    ASSERT_NE(kernels[0].name, nullptr);
    EXPECT_STREQ(kernels[0].name, "block_sum_kernel");
    EXPECT_EQ(kernels[0].name, kernels[1].name);  // interned: one string per name
    EXPECT_NE(kernels[0].gridId, kernels[1].gridId);
    EXPECT_EQ(kernels[0].deviceId, 0u);
    EXPECT_EQ(kernels[0].gridX, 2);
    EXPECT_EQ(kernels[1].blockX, 16);
    EXPECT_EQ(kernels[0].completed, kernels[0].end);

    const auto calls = raw_records<CUpti_ActivityAPI>({CUPTI_ACTIVITY_KIND_RUNTIME});
    ASSERT_FALSE(calls.empty());
    std::map<std::uint32_t, CUpti_ActivityAPI> by_correlation;
    for (const auto& c : calls) {
        EXPECT_EQ(c.processId, static_cast<std::uint32_t>(getpid()));
        EXPECT_EQ(c.threadId, static_cast<std::uint32_t>(pthread_self()));
        EXPECT_EQ(c.returnValue, 0u);
        EXPECT_LE(c.start, c.end);
        EXPECT_TRUE(by_correlation.emplace(c.correlationId, c).second);
    }
    EXPECT_EQ(by_correlation.at(kernels[0].correlationId).cbid,
              CUpti_CallbackId{CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000});

    const auto copies = raw_records<CUpti_ActivityMemcpy6>({CUPTI_ACTIVITY_KIND_MEMCPY});
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].copyKind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    EXPECT_EQ(copies[0].dstKind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    EXPECT_EQ(copies[0].flags, CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC);
    EXPECT_EQ(copies[0].bytes, 256u);
    EXPECT_EQ(copies[0].runtimeCorrelationId, copies[0].correlationId);
    EXPECT_EQ(by_correlation.at(copies[0].correlationId).cbid,
              CUpti_CallbackId{CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020});
    EXPECT_NE(copies[0].streamId, kernels[0].streamId);

    const auto waits =
        raw_records<CUpti_ActivitySynchronization2>({CUPTI_ACTIVITY_KIND_SYNCHRONIZATION});
    ASSERT_EQ(waits.size(), 4u);
    EXPECT_EQ(waits[0].type, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);
    EXPECT_EQ(waits[0].streamId, kNoStream);
    EXPECT_EQ(waits[0].cudaEventId, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    EXPECT_EQ(waits[1].type, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE);
    EXPECT_EQ(waits[1].streamId, copies[0].streamId);
    EXPECT_EQ(waits[1].cudaEventId, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    EXPECT_EQ(waits[2].type, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE);
    EXPECT_EQ(waits[2].streamId, kNoStream);
    EXPECT_NE(waits[2].cudaEventId, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
    EXPECT_EQ(waits[3].cudaEventId, waits[2].cudaEventId);  // the same event
    EXPECT_NE(waits[3].cudaEventSyncId, waits[2].cudaEventSyncId);
    for (const auto& w : waits)
        EXPECT_EQ(by_correlation.count(w.correlationId), 1u) << "a wait without its call";
}

TEST(CuptiEmuRaw, OnlyTheEnabledKindsAreWritten) {
    RawSession session({CUPTI_ACTIVITY_KIND_RUNTIME});
    launch_block_sum(1, 32);  // a memset and a launch: two runtime records
    ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL), CUPTI_SUCCESS);
    launch_block_sum(1, 32);  // now its kernel too, as KERNEL: CONCURRENT_KERNEL is off
    ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing: neither kind is on
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    const std::vector<CUpti_ActivityKind> want = {
        CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME,
        CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME};
    EXPECT_EQ(raw_kinds(), want);
}

TEST(CuptiEmuRaw, ExternalRecordsPrecedeTheirCallAndNeedTheRuntimeKind) {
    RawSession session({CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION});
    ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 5),
              CUPTI_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // no API record, so no external one
    ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 6),
              CUPTI_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::uint64_t last = 0;
    ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &last),
              CUPTI_SUCCESS);
    EXPECT_EQ(last, 6u);
    ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
              CUPTI_SUCCESS);
    EXPECT_EQ(last, 5u);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // outside: its API record alone
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);

    const std::vector<CUpti_ActivityKind> want = {
        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
        CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME};
    ASSERT_EQ(raw_kinds(), want);
    const auto external =
        raw_records<CUpti_ActivityExternalCorrelation>({CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION});
    const auto calls = raw_records<CUpti_ActivityAPI>({CUPTI_ACTIVITY_KIND_RUNTIME});
    EXPECT_EQ(external[0].externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    EXPECT_EQ(external[0].externalId, 5u);
    EXPECT_EQ(external[1].externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    EXPECT_EQ(external[1].externalId, 6u);
    EXPECT_EQ(external[0].correlationId, calls[0].correlationId);
    EXPECT_EQ(external[1].correlationId, calls[0].correlationId);
    EXPECT_NE(calls[1].correlationId, calls[0].correlationId);
}

TEST(CuptiEmuRaw, ExternalIdsAreAStackPerKindAndPerThread) {
    const auto custom0 = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    std::uint64_t last = 0;
    EXPECT_EQ(cuptiActivityPopExternalCorrelationId(custom0, &last), CUPTI_ERROR_QUEUE_EMPTY);
    ASSERT_EQ(cuptiActivityPushExternalCorrelationId(custom0, 1), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiActivityPushExternalCorrelationId(custom0, 2), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 9),
              CUPTI_SUCCESS);
    CUptiResult other_thread = CUPTI_SUCCESS;
    std::thread([&] {
        other_thread = cuptiActivityPopExternalCorrelationId(custom0, nullptr);
    }).join();
    EXPECT_EQ(other_thread, CUPTI_ERROR_QUEUE_EMPTY);
    ASSERT_EQ(cuptiActivityPopExternalCorrelationId(custom0, &last), CUPTI_SUCCESS);
    EXPECT_EQ(last, 2u);
    ASSERT_EQ(cuptiActivityPopExternalCorrelationId(custom0, &last), CUPTI_SUCCESS);
    EXPECT_EQ(last, 1u);
    EXPECT_EQ(cuptiActivityPopExternalCorrelationId(custom0, &last), CUPTI_ERROR_QUEUE_EMPTY);
    ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, &last),
              CUPTI_SUCCESS);
    EXPECT_EQ(last, 9u);
    EXPECT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1),
              CUPTI_ERROR_INVALID_PARAMETER);
    EXPECT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_SIZE, 1),
              CUPTI_ERROR_INVALID_PARAMETER);
}

TEST(CuptiEmuRaw, APlainFlushHandsOverOnlyFullBuffers) {
    RawSession session({CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION});
    g_raw.max_records = 3;
    for (int i = 0; i < 10; ++i)
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // 20 records
    ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.buffer_records, std::vector<std::size_t>(6, 3));
    EXPECT_EQ(g_raw.outstanding, 1);  // the seventh, two records in it
    ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.records.size(), 18u);
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.records.size(), 20u);
    EXPECT_EQ(g_raw.buffer_records.back(), 2u);
    EXPECT_EQ(g_raw.outstanding, 0);
    // In order: each call's wait, then its API record, correlation ids rising.
    const auto calls = raw_records<CUpti_ActivityAPI>({CUPTI_ACTIVITY_KIND_RUNTIME});
    ASSERT_EQ(calls.size(), 10u);
    for (std::size_t i = 1; i < calls.size(); ++i)
        EXPECT_GT(calls[i].correlationId, calls[i - 1].correlationId);
}

TEST(CuptiEmuRaw, ABufferIsFullWhenTheNextRecordDoesNotFit) {
    RawSession session({CUPTI_ACTIVITY_KIND_RUNTIME});
    // Room for three records and 2 bytes, but misaligned by 3: 5 bytes of pad, so two fit.
    g_raw.buffer_bytes = 3 * sizeof(CUpti_ActivityAPI) + 2;
    g_raw.misalign = 3;
    for (int i = 0; i < 7; ++i)
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.buffer_records, (std::vector<std::size_t>{2, 2, 2}));
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.records.size(), 7u);
    EXPECT_EQ(g_raw.misaligned_records, 0);
    EXPECT_EQ(g_raw.bad_ends, 0);
    EXPECT_EQ(g_raw.dropped, 0u);
}

TEST(CuptiEmuRaw, RecordsWithoutABufferAreDroppedAndCounted) {
    RawSession session({CUPTI_ACTIVITY_KIND_RUNTIME});
    g_raw.refuse_first = 3;
    for (int i = 0; i < 5; ++i)
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(g_raw.requests, 4);  // one per record until a buffer came
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.records.size(), 2u);
    EXPECT_EQ(g_raw.dropped, 3u);
    std::size_t dropped = 99;
    ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
    EXPECT_EQ(dropped, 0u);  // reset by the read in the completed callback

    // A buffer too small for the record: handed back empty, the record dropped.
    g_raw.buffer_bytes = sizeof(CUpti_ActivityAPI) - 8;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
    EXPECT_EQ(dropped, 1u);
    EXPECT_EQ(g_raw.outstanding, 1);
    ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.outstanding, 0);
    EXPECT_EQ(g_raw.valid_sizes.back(), 0u);
    EXPECT_EQ(g_raw.records.size(), 2u);
}

TEST(CuptiEmuRaw, ThreadsRecordConcurrentlyWithNothingLost) {
    RawSession session({CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION});
    g_raw.buffer_bytes = 512;  // a few records each: many requests, from every thread
    constexpr int kThreads = 4, kCalls = 200;
    std::vector<std::thread> threads;
    std::vector<std::uint32_t> ids(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([t, &ids] {
            ids[static_cast<std::size_t>(t)] = static_cast<std::uint32_t>(pthread_self());
            cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                   static_cast<std::uint64_t>(100 + t));
            for (int i = 0; i < kCalls; ++i)
                cudaDeviceSynchronize();
            cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
        });
    }
    for (std::thread& t : threads)
        t.join();
    ASSERT_EQ(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), CUPTI_SUCCESS);
    EXPECT_EQ(g_raw.dropped, 0u);
    EXPECT_EQ(g_raw.records.size(), 3u * kThreads * kCalls);
    EXPECT_EQ(g_raw.bad_ends, 0);

    std::map<std::uint32_t, std::uint32_t> thread_of;  // correlation -> thread
    for (const auto& c : raw_records<CUpti_ActivityAPI>({CUPTI_ACTIVITY_KIND_RUNTIME}))
        EXPECT_TRUE(thread_of.emplace(c.correlationId, c.threadId).second);
    EXPECT_EQ(thread_of.size(), static_cast<std::size_t>(kThreads * kCalls));
    for (const auto& e : raw_records<CUpti_ActivityExternalCorrelation>(
             {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})) {
        const std::uint64_t t = e.externalId - 100;  // pushed by thread t, linked to its calls
        ASSERT_LT(t, static_cast<std::uint64_t>(kThreads));
        EXPECT_EQ(thread_of.at(e.correlationId), ids[t]);
    }
}

TEST(CuptiEmuRaw, RefusesWhatItDoesNotEmulate) {
    EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_INVALID), CUPTI_ERROR_INVALID_KIND);
    EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_COUNT), CUPTI_ERROR_INVALID_KIND);
    EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE), CUPTI_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), CUPTI_SUCCESS);  // and stays empty
    EXPECT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER), CUPTI_SUCCESS);
    EXPECT_EQ(cuptiActivityRegisterCallbacks(nullptr, raw_completed),
              CUPTI_ERROR_INVALID_PARAMETER);
    CUpti_Activity* record = nullptr;
    EXPECT_EQ(cuptiActivityGetNextRecord(nullptr, 8, &record), CUPTI_ERROR_INVALID_PARAMETER);
    std::uint64_t empty[4] = {};
    EXPECT_EQ(cuptiActivityGetNextRecord(reinterpret_cast<std::uint8_t*>(empty), 0, &record),
              CUPTI_ERROR_MAX_LIMIT_REACHED);
    EXPECT_EQ(
        cuptiActivityGetNextRecord(reinterpret_cast<std::uint8_t*>(empty), sizeof empty, &record),
        CUPTI_ERROR_INVALID_KIND);  // kind 0 is no record
    EXPECT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, nullptr),
              CUPTI_ERROR_INVALID_PARAMETER);
}

TEST(CuptiEmuRaw, NamesResultsVersionAndClock) {
    const std::pair<std::uint32_t, const char*> calls[] = {
        {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel_v7000"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, "cudaMemcpy_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, "cudaMemset_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, "cudaMemsetAsync_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize_v3020"},
        {CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, "cudaEventSynchronize_v3020"}};
    for (const auto& [cbid, want] : calls) {
        const char* name = nullptr;
        ASSERT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name), CUPTI_SUCCESS);
        EXPECT_STREQ(name, want);
    }
    const char* name = "unset";
    EXPECT_EQ(cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API,
                                   CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020, &name),
              CUPTI_ERROR_INVALID_PARAMETER);
    EXPECT_EQ(name, nullptr);
    EXPECT_NE(cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, 1, &name), CUPTI_SUCCESS);

    const std::pair<CUptiResult, const char*> results[] = {
        {CUPTI_SUCCESS, "CUPTI_SUCCESS"},
        {CUPTI_ERROR_NOT_SUPPORTED, "CUPTI_ERROR_NOT_SUPPORTED"},
        {CUPTI_ERROR_QUEUE_EMPTY, "CUPTI_ERROR_QUEUE_EMPTY"},
        {CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
        {CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND"}};
    for (const auto& [result, want] : results) {
        const char* s = nullptr;
        ASSERT_EQ(cuptiGetResultString(result, &s), CUPTI_SUCCESS);
        EXPECT_STREQ(s, want);
    }

    std::uint32_t version = 0;
    ASSERT_EQ(cuptiGetVersion(&version), CUPTI_SUCCESS);
    EXPECT_EQ(version, static_cast<std::uint32_t>(CUPTI_API_VERSION));
    std::uint64_t t0 = 0, t1 = 0;
    ASSERT_EQ(cuptiGetTimestamp(&t0), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiGetTimestamp(&t1), CUPTI_SUCCESS);
    EXPECT_LE(t0, t1);
    EXPECT_GT(t0, std::uint64_t{1'500'000'000} * 1'000'000'000);  // after 2017, as CUPTI's reads
}

}  // namespace
}  // namespace napkin::emu
