// The CUPTI collector on a real GPU (label gpu; skips without one): a cuBLAS GEMM, a memset and
// a copy come back as kernel, memset and memcpy events on stream tracks, with launch flows, the
// engine's name and cost on the GEMM, and a trace that passes the validator.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "profiler/chrome_trace_writer.h"
#include "profiler/cupti_collector.h"
#include "profiler/trace_check.h"
#include "tests/profiler/temp_dir.h"

namespace p = napkin::profiler;

TEST(CuptiCollector, RecordsKernelsCopiesAndFlows) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        GTEST_SKIP() << "no CUDA device: the CUPTI collector test needs a GPU";
    }
    p::Recorder rec;
    p::CuptiCollector collector(rec);
    ASSERT_TRUE(collector.active()) << collector.error();

    const int n = 256;
    float *a = nullptr, *b = nullptr, *c = nullptr;
    ASSERT_EQ(cudaMalloc(&a, n * n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b, n * n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&c, n * n * sizeof(float)), cudaSuccess);
    std::vector<float> host(static_cast<std::size_t>(n) * n, 1.0f);
    ASSERT_EQ(cudaMemcpy(a, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0, host.size() * sizeof(float)), cudaSuccess);
    cublasHandle_t handle = nullptr;
    ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    napkin::KernelCost cost;
    cost.flops = 2ull * n * n * n;
    cost.bytes_read = 2ull * n * n * sizeof(float);
    cost.bytes_written = 1ull * n * n * sizeof(float);
    for (int i = 0; i < 3; ++i) {
        collector.push_kernel("matmul_forward", cost);
        ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n),
                  CUBLAS_STATUS_SUCCESS);
        collector.pop_kernel();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    collector.flush(true);
    cublasDestroy(handle);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);

    const std::vector<p::Event> events = rec.take();
    int gemms = 0, copies = 0, sets = 0, flows = 0;
    for (const auto& e : events) {
        if (const auto* r = std::get_if<p::RangeEvent>(&e)) {
            if (r->name == "matmul_forward") {
                ++gemms;
                EXPECT_EQ(r->flops, cost.flops);
                EXPECT_GT(r->dur_ns, 0);
            }
            copies += r->name == "memcpy HtoD";
            sets += r->name == "memset";
        }
        flows += std::holds_alternative<p::FlowEvent>(e);
    }
    EXPECT_GE(gemms, 3);  // cuBLAS may split a GEMM; each part carries the registered cost
    EXPECT_EQ(copies, 1);
    EXPECT_EQ(sets, 1);
    EXPECT_GE(flows, 2 * 4);
    EXPECT_EQ(collector.dropped(), 0u);
    EXPECT_EQ(collector.failures(), 0u);

    napkin::profiler::test::TempDir dir;
    p::ChromeTraceWriter w(dir.path() / "trace.json");
    w.write(events);
    w.write_tracks(rec.tracks());
    ASSERT_TRUE(w.close().ok);
    const auto check = p::check_trace_file(dir.path() / "trace.json");
    for (const auto& problem : check.problems) ADD_FAILURE() << problem;
}
