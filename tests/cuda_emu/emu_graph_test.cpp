// Stream capture and CUDA graphs on the emulator (tests/cuda_emu/emu_graph.cpp): work queued on a
// capturing stream does not run until the graph is launched, then runs at every launch in the
// order it was queued; copies from pinned memory read it at each launch; cuBLASLt is captured
// with its host scalars read at the call; streams fork from and join into a capture through
// events; and what the real runtime refuses during a capture fails here too, invalidating it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/selftest_kernels.h"

namespace napkin::emu {
namespace {

constexpr int kGraphTestN = 300;  // more than one block of the self-test kernel

class CudaEmuGraph : public ::testing::Test {
protected:
    void SetUp() override {
        reset_for_test();
        ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), kGraphTestN * sizeof(int)),
                  cudaSuccess);
        set(std::vector<int>(kGraphTestN, 1));
    }
    void TearDown() override {
        cudaFree(data_);
        cudaStreamDestroy(stream_);
        reset_for_test();
    }
    void set(const std::vector<int>& v) {
        ASSERT_EQ(cudaMemcpy(data_, v.data(), v.size() * sizeof(int), cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    std::vector<int> get() {
        std::vector<int> v(kGraphTestN);
        EXPECT_EQ(cudaMemcpy(v.data(), data_, v.size() * sizeof(int), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        return v;
    }
    cudaStreamCaptureStatus status(cudaStream_t s) {
        cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
        return st;
    }
    // Ends the capture on stream_, expecting `want`; returns the graph (null on failure).
    cudaGraph_t end(cudaError_t want = cudaSuccess) {
        cudaGraph_t g = nullptr;
        EXPECT_EQ(cudaStreamEndCapture(stream_, &g), want) << last_error_message();
        EXPECT_EQ(g == nullptr, want != cudaSuccess);
        cudaGetLastError();  // the refusal's, so that later checks start clean
        return g;
    }

    cudaStream_t stream_ = nullptr;
    int* data_ = nullptr;
};

TEST_F(CudaEmuGraph, CapturedWorkRunsOnlyWhenTheGraphIsLaunchedAndAtEveryLaunch) {
    const GraphStats before = graph_stats();
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(status(stream_), cudaStreamCaptureStatusActive);
    EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 3, stream_), cudaSuccess);
    EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 5, stream_), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(data_ + 7, 0, sizeof(int), stream_), cudaSuccess);
    cudaGraph_t g = end();
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(status(stream_), cudaStreamCaptureStatusNone);
    EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 1));  // nothing ran
    std::size_t nodes = 0;
    EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, 3u);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);  // the executable graph keeps its own copy
    for (int launch = 1; launch <= 2; ++launch) {
        ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        // 1 -> 2 (2 + 3) + 5 = 15 -> 2 (2 15 + 3) + 5 = 71; element 7 zeroed after each.
        std::vector<int> want(kGraphTestN, launch == 1 ? 15 : 71);
        want[7] = 0;
        EXPECT_EQ(get(), want) << "launch " << launch;
    }
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaErrorInvalidValue);
    const GraphStats after = graph_stats();
    EXPECT_EQ(after.captures - before.captures, 1u);
    EXPECT_EQ(after.launches - before.launches, 2u);
    EXPECT_EQ(after.nodes_run - before.nodes_run, 6u);
}

// Each call the real runtime refuses while a stream captures in global mode: the call fails,
// the capture is invalidated, and its end fails.
TEST_F(CudaEmuGraph, CaptureUnsafeCallsFailAndInvalidateTheCapture) {
    cudaEvent_t event = nullptr;
    ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
    std::vector<int> host(kGraphTestN);
    const std::vector<std::pair<std::string, std::function<cudaError_t()>>> calls = {
        {"cudaMalloc",
         [] {
             void* p = nullptr;
             return cudaMalloc(&p, 256);
         }},
        {"cudaFree", [&] { return cudaFree(data_); }},
        {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(stream_); }},
        {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); }},
        {"cudaMemcpy",
         [&] { return cudaMemcpy(host.data(), data_, sizeof(int), cudaMemcpyDeviceToHost); }},
        {"cudaMemcpyAsync from pageable memory",
         [&] {
             return cudaMemcpyAsync(data_, host.data(), sizeof(int), cudaMemcpyHostToDevice,
                                    stream_);
         }},
        {"cudaEventQuery of a captured record",
         [&] {
             EXPECT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
             return cudaEventQuery(event);
         }},
        {"cudaEventSynchronize of a captured record",
         [&] {
             EXPECT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
             return cudaEventSynchronize(event);
         }},
    };
    for (const auto& [what, call] : calls) {
        SCOPED_TRACE(what);
        ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
        EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 1, stream_), cudaSuccess);
        EXPECT_NE(call(), cudaSuccess);
        EXPECT_EQ(status(stream_), cudaStreamCaptureStatusInvalidated);
        // Work queued on an invalidated capture is refused too.
        EXPECT_EQ(cudaMemsetAsync(data_, 0, sizeof(int), stream_),
                  cudaErrorStreamCaptureInvalidated);
        end(cudaErrorStreamCaptureInvalidated);
        EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 1));  // the recorded launch never ran
    }
    // Relaxed mode allows allocation.
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), cudaSuccess);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    cudaGraph_t g = end();
    EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(event), cudaSuccess);
}

TEST_F(CudaEmuGraph, TheLegacyStreamAndOutsideEventsAreRefusedDuringACapture) {
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 1, nullptr), cudaErrorStreamCaptureImplicit);
    end(cudaErrorStreamCaptureInvalidated);
    cudaEvent_t outside = nullptr;
    ASSERT_EQ(cudaEventCreate(&outside), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(outside, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(stream_, outside, 0), cudaErrorStreamCaptureIsolation);
    end(cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
              cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    EXPECT_EQ(cudaEventDestroy(outside), cudaSuccess);
    EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 1));
}

// A second stream forked from the capture (it waits for an event recorded in it) is captured
// too, and must be joined back before the capture ends.
TEST_F(CudaEmuGraph, AForkedStreamIsCapturedAndMustJoin) {
    cudaStream_t side = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t fork = nullptr, join = nullptr;
    ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
    for (const bool joined : {false, true}) {
        SCOPED_TRACE(joined ? "joined" : "not joined");
        ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
        EXPECT_EQ(cudaEventRecord(fork, stream_), cudaSuccess);
        EXPECT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
        EXPECT_EQ(status(side), cudaStreamCaptureStatusActive);
        EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 1, side), cudaSuccess);
        if (joined) {
            EXPECT_EQ(cudaEventRecord(join, side), cudaSuccess);
            EXPECT_EQ(cudaStreamWaitEvent(stream_, join, 0), cudaSuccess);
        }
        EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 2, stream_), cudaSuccess);
        cudaGraph_t g = end(joined ? cudaSuccess : cudaErrorStreamCaptureUnjoined);
        EXPECT_EQ(status(side), cudaStreamCaptureStatusNone);
        EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 1));
        if (g == nullptr) continue;
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, g, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 8));  // 2 (2 + 1) + 2: side first
        EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
        EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
    }
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(side);
}

// A graph's copy from pinned memory reads it at each launch: the host refills the buffer
// between launches, as the trainer's staging would.
TEST_F(CudaEmuGraph, ACapturedCopyFromPinnedMemoryReadsItAtEachLaunch) {
    int* pinned = nullptr;
    ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kGraphTestN * sizeof(int),
                            cudaHostAllocDefault),
              cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpyAsync(data_, pinned, kGraphTestN * sizeof(int), cudaMemcpyHostToDevice, stream_),
        cudaSuccess);
    EXPECT_EQ(selftest::double_add(data_, kGraphTestN, 0, stream_), cudaSuccess);
    cudaGraph_t g = end();
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    for (int v : {4, 9}) {
        for (int i = 0; i < kGraphTestN; ++i)
            pinned[i] = v;
        ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        EXPECT_EQ(get(), std::vector<int>(kGraphTestN, 2 * v));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cudaFreeHost(pinned);
}

// cuBLASLt on a capturing stream: recorded, D untouched until the launch; alpha and beta are
// the host values at the call (host pointer mode), not at the launch.
TEST_F(CudaEmuGraph, ACublasLtGemmIsCapturedWithItsHostScalars) {
    constexpr int n = 4;  // D (n, n) = alpha A B, column-major, A = 2 I, B = all ones
    std::vector<float> a(n * n, 0.0f), b(n * n, 1.0f), d(n * n, -1.0f);
    for (int i = 0; i < n; ++i)
        a[i * n + i] = 2.0f;
    float *da = nullptr, *db = nullptr, *dd = nullptr;
    for (auto [p, v] : {std::pair{&da, &a}, std::pair{&db, &b}, std::pair{&dd, &d}}) {
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(p), n * n * sizeof(float)), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(*p, v->data(), n * n * sizeof(float), cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    cublasLtHandle_t handle = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t layout = nullptr;
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, n, n, n), CUBLAS_STATUS_SUCCESS);
    float alpha = 3.0f, beta = 0.0f;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cublasLtMatmul(handle, op, &alpha, da, layout, db, layout, &beta, dd, layout, dd,
                             layout, nullptr, nullptr, 0, stream_),
              CUBLAS_STATUS_SUCCESS);
    alpha = 100.0f;  // after the call: not what the graph multiplies by
    cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(op);
    cudaGraph_t g = end();
    std::vector<float> out(n * n);
    ASSERT_EQ(cudaMemcpy(out.data(), dd, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(out, d);  // not run yet
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out.data(), dd, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(out, std::vector<float>(n * n, 6.0f));  // 3 x (2 I) x ones
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cublasLtDestroy(handle);
    for (float* p : {da, db, dd})
        cudaFree(p);
}

}  // namespace
}  // namespace napkin::emu
