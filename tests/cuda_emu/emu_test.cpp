// The emulator against itself (tests/cuda_emu/cuda_emu.h): kernels that use each intrinsic
// compute what a GPU computes, a kernel that races gets caught by the shuffled schedule, and the
// mistakes a GPU leaves undefined or hangs on (a barrier some threads never reach, a deadlock, a
// shuffle outside its mask, a bad launch, a copy of the wrong kind) fail with a message that
// names the kernel, the block and the thread. WMMA (tests/cuda_emu/emu_wmma.h): products against
// a CPU loop, fragment mappings that change per launch, and the invalid calls refused.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda_emu/emu_buffer.h"
#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/selftest_kernels.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin::emu {
namespace {

namespace st = selftest;

// Device memory for n ints, freed at scope exit.
class Ints {
public:
    explicit Ints(std::size_t n) : n_(n) {
        EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(int)), cudaSuccess);
    }
    explicit Ints(const std::vector<int>& host) : Ints(host.size()) {
        EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(int), cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    ~Ints() { cudaFree(p_); }
    Ints(const Ints&) = delete;
    Ints& operator=(const Ints&) = delete;
    int* get() const { return p_; }
    std::vector<int> host() const {
        std::vector<int> h(n_);
        EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
        return h;
    }

private:
    std::size_t n_;
    int* p_ = nullptr;
};

class CudaEmu : public ::testing::Test {
protected:
    void SetUp() override { reset_for_test(); }
    void TearDown() override { reset_for_test(); }
};

TEST_F(CudaEmu, BlockReductionWithBarriersIsExact) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> d(-1000, 1000);
    const int blocks = 5;
    for (int threads : {4, 64, 256, 1024}) {
        std::vector<int> in(static_cast<std::size_t>(blocks * threads));
        for (int& v : in)
            v = d(rng);
        Ints in_d(in), out_d(static_cast<std::size_t>(blocks));
        ASSERT_EQ(st::block_sum(in_d.get(), out_d.get(), blocks, threads), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int> out = out_d.host();
        for (int b = 0; b < blocks; ++b) {
            const auto first = in.begin() + b * threads;
            EXPECT_EQ(out[static_cast<std::size_t>(b)], std::accumulate(first, first + threads, 0))
                << threads << " threads, block " << b;
        }
    }
}

TEST_F(CudaEmu, ReductionWithoutBarriersIsCaughtByTheShuffledSchedule) {
    const int blocks = 8, threads = 256;
    std::vector<int> in(static_cast<std::size_t>(blocks * threads), 1);
    Ints in_d(in), out_d(static_cast<std::size_t>(blocks));
    ASSERT_EQ(st::block_sum_without_barriers(in_d.get(), out_d.get(), blocks, threads),
              cudaSuccess);
    int wrong = 0;
    for (int v : out_d.host())
        wrong += v != threads;
    EXPECT_GT(wrong, 0) << "every block summed right without its barriers";
}

TEST_F(CudaEmu, WarpIntrinsicsMatchTheirDefinitions) {
    Ints out_d(132);
    ASSERT_EQ(st::warp_ops(out_d.get()), cudaSuccess);
    const std::vector<int> out = out_d.host();
    for (int l = 0; l < 32; ++l) {
        const int v = l + 1;
        EXPECT_EQ(out[l], 32 * 33 / 2) << "xor butterfly, lane " << l;
        EXPECT_EQ(out[32 + l], l + 1 < 32 ? v + 1 : v) << "shfl_down, lane " << l;
        EXPECT_EQ(out[64 + l], l >= 2 ? v - 2 : v) << "shfl_up, lane " << l;
        EXPECT_EQ(out[96 + l], l / 8 * 8 + 3 + 1) << "shfl width 8, lane " << l;
    }
    EXPECT_EQ(static_cast<unsigned>(out[128]), 0xaaaaaaaau) << "ballot of odd lanes";
    EXPECT_EQ(out[129], 1) << "any(lane == 31)";
    EXPECT_EQ(out[130], 0) << "all(lane < 31)";
    EXPECT_EQ(out[131], 16) << "__syncthreads_count(lane even)";
}

// __fmul_rn and __fdiv_rn as CUDA documents them: IEEE products and quotients rounded to nearest
// even, the product never fused into a following add (a fused a b + c differs on the first
// values: a b = 1 + 2^-11 + 2^-24 exactly, a tie that rounds to even before c is added).
TEST_F(CudaEmu, RoundedProductAndQuotientAreIeeeAndNeverFused) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const float e = std::ldexp(1.0f, -12);
    std::vector<float> a{1 + e, 3.0f, -1.0f, 0.0f}, b{1 + e, 7.0f, 0.0f, 0.0f},
        c{-(1 + 2 * e), 0.0f, 0.0f, 0.0f};
    std::uniform_real_distribution<float> d(-4.0f, 4.0f);
    for (int i = 0; i < 1000; ++i) {
        a.push_back(d(rng));
        b.push_back(d(rng));
        c.push_back(d(rng));
    }
    const int n = static_cast<int>(a.size());
    Buffer<float> a_d(a), b_d(b), c_d(c), out_d(2 * a.size());
    ASSERT_EQ(st::rounded_arithmetic(a_d.get(), b_d.get(), c_d.get(), out_d.get(), n), cudaSuccess);
    const std::vector<float> out = out_d.host();
    EXPECT_EQ(out[0], 0.0f) << "a b + c was fused into one rounding";
    for (int i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        // In double a product of two floats is exact, a quotient rounded with room to spare
        // (53 >= 2 * 24 + 2 bits), so one rounding to float is the IEEE float result.
        const auto product = static_cast<float>(static_cast<double>(a[k]) * b[k]);
        const auto quotient = static_cast<float>(static_cast<double>(a[k]) / b[k]);
        EXPECT_EQ(out[2 * k], product + c[k]) << i;
        if (std::isnan(quotient))
            EXPECT_TRUE(std::isnan(out[2 * k + 1])) << i;
        else
            EXPECT_EQ(out[2 * k + 1], quotient) << i;
    }
    EXPECT_EQ(out[5], -std::numeric_limits<float>::infinity()) << "-1 / 0";
}

TEST_F(CudaEmu, BarrierAfterSomeThreadsReturnedFailsTheLaunch) {
    EXPECT_EQ(st::barrier_after_return(), cudaErrorLaunchFailure);
    const std::string m = last_error_message();
    EXPECT_NE(m.find("barrier_after_return_kernel"), std::string::npos) << m;
    EXPECT_NE(m.find("selftest_kernels.cu"), std::string::npos) << m;
    EXPECT_NE(m.find("not every thread reaches"), std::string::npos) << m;
    // Sticky, as a fault in a real context is: every later call reports it.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
}

TEST_F(CudaEmu, DeadlockIsReportedWithWhoWaitsWhere) {
    EXPECT_EQ(st::deadlock(), cudaErrorLaunchFailure);
    const std::string m = last_error_message();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("__shfl_sync"), std::string::npos) << m;
}

TEST_F(CudaEmu, ShuffleFromALaneOutsideTheMaskFails) {
    Ints out_d(32);
    EXPECT_EQ(st::shuffle_outside_mask(out_d.get()), cudaErrorLaunchFailure);
    const std::string m = last_error_message();
    EXPECT_NE(m.find("reads lane 20"), std::string::npos) << m;
}

TEST_F(CudaEmu, LaunchConfigurationIsCheckedAndNotSticky) {
    Ints out_d(1);
    EXPECT_EQ(st::dynamic_shared(out_d.get(), 2048, 0, false), cudaErrorInvalidConfiguration);
    EXPECT_NE(last_error_message().find("2048 threads"), std::string::npos) << last_error_message();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a configuration error is cleared once read";
    // Dynamic shared memory: 48 KiB without asking, more once cudaFuncSetAttribute allows it.
    EXPECT_EQ(st::dynamic_shared(out_d.get(), 32, 48 * 1024, false), cudaSuccess);
    EXPECT_EQ(st::dynamic_shared(out_d.get(), 32, 64 * 1024, false), cudaErrorInvalidConfiguration);
    EXPECT_NE(last_error_message().find("cudaFuncSetAttribute"), std::string::npos)
        << last_error_message();
    EXPECT_EQ(st::dynamic_shared(out_d.get(), 32, 64 * 1024, true), cudaSuccess);
    EXPECT_EQ(out_d.host()[0], 42);
    EXPECT_NE(st::dynamic_shared(out_d.get(), 32, 300 * 1024, true), cudaSuccess)
        << "more than the device's 227 KiB";
}

TEST_F(CudaEmu, CopiesMustNameDeviceMemoryAsTheirKindSays) {
    Ints dev(4);
    std::vector<int> host(4, 7);
    EXPECT_EQ(cudaMemcpy(dev.get(), host.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), dev.get(), 16, cudaMemcpyHostToDevice),
              cudaErrorInvalidValue);
    EXPECT_EQ(cudaMemcpy(dev.get(), host.data(), 32, cudaMemcpyHostToDevice), cudaErrorInvalidValue)
        << "past the end of the allocation";
    EXPECT_EQ(cudaMemset(host.data(), 0, 16), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
}

// Pinned host memory (the trainer's batch staging) is host memory: a copy's source, never a
// kernel's or a memset's, outside cudaMemGetInfo; cudaFreeHost takes only what cudaHostAlloc
// returned. cudaStreamWaitEvent checks its stream and event (work is done when queued).
TEST_F(CudaEmu, PinnedHostMemoryAndStreamWaitsAreCheckedAndCounted) {
    const StreamStats before = stream_stats();
    std::size_t free_before = 0, total = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    void* pinned = nullptr;
    ASSERT_EQ(cudaHostAlloc(&pinned, 16, cudaHostAllocDefault), cudaSuccess);
    std::size_t free_after = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    EXPECT_EQ(free_after, free_before) << "pinned memory is not device memory";
    EXPECT_EQ(stream_stats().pinned_bytes - before.pinned_bytes, 16u);
    std::vector<int> values{1, 2, 3, 4};
    std::memcpy(pinned, values.data(), 16);
    Ints dev(4);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(dev.get(), pinned, 16, cudaMemcpyHostToDevice, stream), cudaSuccess);
    EXPECT_EQ(dev.host(), values);
    EXPECT_EQ(cudaMemset(pinned, 0, 16), cudaErrorInvalidValue);
    cudaEvent_t event = nullptr;
    ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(nullptr, event, 0), cudaSuccess);
    EXPECT_EQ(stream_stats().stream_waits - before.stream_waits, 1u);
    ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(stream, event, 0), cudaErrorInvalidResourceHandle)
        << "a destroyed event";
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(values.data()), cudaErrorInvalidValue) << "not cudaHostAlloc's";
    EXPECT_EQ(cudaFree(pinned), cudaErrorInvalidValue) << "not device memory";
    EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
    EXPECT_EQ(stream_stats().pinned_bytes, before.pinned_bytes);
    EXPECT_EQ(stream_stats().pinned_allocations - before.pinned_allocations, 1u);
}

// A kernel handed a host pointer reads host memory here and would pass; on a GPU it faults.
TEST_F(CudaEmu, AHostPointerArgumentFailsTheLaunch) {
    const std::vector<int> host(32, 1);
    Ints out(1);
    EXPECT_EQ(st::block_sum(host.data(), out.get(), 1, 32), cudaErrorIllegalAddress);
    EXPECT_NE(last_error_message().find("argument 0 is a host pointer"), std::string::npos)
        << last_error_message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress) << "a fault sticks";
    reset_for_test();
    Ints in(host);
    EXPECT_EQ(st::block_sum(in.get(), out.get(), 1, 32), cudaSuccess);
    EXPECT_EQ(out.host(), std::vector<int>{32});
}

// The emulated cuBLASLt reads its operands on the CPU; a host pointer, or a layout running past
// its allocation's end, would pass there and fault on a GPU, so it is refused.
TEST_F(CudaEmu, GemmOperandsMustLieInDeviceMemory) {
    cublasLtHandle_t handle = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t square = nullptr, tall = nullptr;
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&square, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&tall, CUDA_R_32F, 2, 2, 3), CUBLAS_STATUS_SUCCESS);
    float *a = nullptr, *d = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), 4 * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)), cudaSuccess);
    const std::vector<float> ones(4, 1.0f);
    ASSERT_EQ(cudaMemcpy(a, ones.data(), sizeof(float) * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const float alpha = 1.0f, beta = 0.0f;
    const auto gemm = [&](const float* a_ptr, cublasLtMatrixLayout_t d_layout) {
        return cublasLtMatmul(handle, op, &alpha, a_ptr, square, a, square, &beta, d, d_layout, d,
                              d_layout, nullptr, nullptr, 0, nullptr);
    };
    EXPECT_EQ(gemm(a, square), CUBLAS_STATUS_SUCCESS);
    std::vector<float> out(4);
    ASSERT_EQ(cudaMemcpy(out.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(out, std::vector<float>(4, 2.0f));
    EXPECT_EQ(gemm(ones.data(), square), CUBLAS_STATUS_INVALID_VALUE) << "A on the host";
    EXPECT_EQ(gemm(a, tall), CUBLAS_STATUS_INVALID_VALUE) << "D's ld 3: 5 floats of 4";
    cudaFree(d);
    cudaFree(a);
    cublasLtMatrixLayoutDestroy(tall);
    cublasLtMatrixLayoutDestroy(square);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(handle);
}

// fp8 GEMMs as cublasLtMatmul documents them for Ada and Hopper: TN only, compute 32F, E4M3 or
// E5M2 each but not both E5M2, dimensions multiples of 16, the A/B scale factors device fp32,
// 16-byte aligned (as an H200 showed), multiplying the product (and refused on other types). What
// the library refuses, refused.
TEST_F(CudaEmu, Fp8GemmTakesWhatCublasLtDocumentsOnly) {
    cublasLtHandle_t handle = nullptr;
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    constexpr int kN = 32;
    std::uint8_t *a = nullptr, *b = nullptr;
    float *d = nullptr, *scales = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), kN * kN), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), kN * kN), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), kN * kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), 8 * sizeof(float)), cudaSuccess);
    const std::vector<std::uint8_t> ones(kN * kN, 0x38);  // 1.0 in E4M3
    const std::vector<float> host_scales = {0.5f, 0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.25f};
    ASSERT_EQ(cudaMemcpy(a, ones.data(), ones.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b, ones.data(), ones.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(scales, host_scales.data(), 32, cudaMemcpyHostToDevice), cudaSuccess);
    struct Case {
        cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3;
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
        std::uint64_t m = 16, n = 16, k = 16;
        const float* a_scale = nullptr;
        const float* b_scale = nullptr;
    };
    const auto run = [&](const Case& c) {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
        EXPECT_EQ(cublasLtMatmulDescCreate(&op, c.compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &c.ta, sizeof c.ta);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &c.tb, sizeof c.tb);
        if (c.a_scale != nullptr)
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &c.a_scale,
                                           sizeof c.a_scale);
        if (c.b_scale != nullptr)
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &c.b_scale,
                                           sizeof c.b_scale);
        const bool ta = c.ta == CUBLAS_OP_T, tb = c.tb == CUBLAS_OP_T;
        cublasLtMatrixLayoutCreate(&la, c.a_type, ta ? c.k : c.m, ta ? c.m : c.k, kN);
        cublasLtMatrixLayoutCreate(&lb, c.b_type, tb ? c.n : c.k, tb ? c.k : c.n, kN);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, c.m, c.n, kN);
        const float alpha = 1.0f, beta = 0.0f;
        const cublasStatus_t st = cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, d, ld, d,
                                                 ld, nullptr, nullptr, 0, nullptr);
        cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatmulDescDestroy(op);
        return st;
    };
    Case ok;
    ok.a_scale = scales;
    ok.b_scale = scales + 4;  // 16 bytes in
    ASSERT_EQ(run(ok), CUBLAS_STATUS_SUCCESS);
    std::vector<float> out(kN * kN);
    ASSERT_EQ(cudaMemcpy(out.data(), d, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(out[0], 16 * 0.5f * 0.25f) << "16 products of 1, times both scales";
    Case unaligned_scale = ok;
    unaligned_scale.b_scale = scales + 1;  // 4 bytes in: refused by cublasLtMatmul on an H200
    EXPECT_EQ(run(unaligned_scale), CUBLAS_STATUS_NOT_SUPPORTED) << "scale 4 bytes in";
    Case nn = ok;
    nn.ta = CUBLAS_OP_N;
    EXPECT_EQ(run(nn), CUBLAS_STATUS_NOT_SUPPORTED) << "NN";
    Case nt = ok;
    nt.ta = CUBLAS_OP_N, nt.tb = CUBLAS_OP_T;
    EXPECT_EQ(run(nt), CUBLAS_STATUS_NOT_SUPPORTED) << "NT";
    Case e5e5 = ok;
    e5e5.a_type = e5e5.b_type = CUDA_R_8F_E5M2;
    EXPECT_EQ(run(e5e5), CUBLAS_STATUS_NOT_SUPPORTED) << "E5M2 x E5M2";
    Case mixed = ok;
    mixed.b_type = CUDA_R_8F_E5M2;
    EXPECT_EQ(run(mixed), CUBLAS_STATUS_SUCCESS) << "E4M3 x E5M2";
    Case odd = ok;
    odd.m = 8;
    EXPECT_EQ(run(odd), CUBLAS_STATUS_NOT_SUPPORTED) << "m = 8";
    Case odd_k = ok;
    odd_k.k = 24;
    EXPECT_EQ(run(odd_k), CUBLAS_STATUS_NOT_SUPPORTED) << "k = 24";
    Case tf32 = ok;
    tf32.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    EXPECT_EQ(run(tf32), CUBLAS_STATUS_NOT_SUPPORTED) << "fp8 with FAST_TF32";
    Case host_scale = ok;
    host_scale.a_scale = host_scales.data();
    EXPECT_EQ(run(host_scale), CUBLAS_STATUS_INVALID_VALUE) << "a scale in host memory";
    Case bf16_scaled = ok;
    bf16_scaled.a_type = bf16_scaled.b_type = CUDA_R_16BF;
    bf16_scaled.ta = CUBLAS_OP_N;
    EXPECT_EQ(run(bf16_scaled), CUBLAS_STATUS_INVALID_VALUE) << "scale pointers on bf16";
    cudaFree(scales);
    cudaFree(d);
    cudaFree(b);
    cudaFree(a);
    cublasLtDestroy(handle);
}

// On a GPU the host cannot read device memory through its pointer (a segfault); under the host
// guard it cannot here either, while copies, sets and kernels still reach it.
TEST(CudaEmuDeathTest, HostGuardFaultsAHostReadOfDeviceMemory) {
    set_host_guard(true);
    {
        const std::vector<int> values(256, 1);
        Ints in(values), out(1);
        EXPECT_EQ(st::block_sum(in.get(), out.get(), 1, 256), cudaSuccess);
        EXPECT_EQ(out.host(), std::vector<int>{256});
        EXPECT_EQ(cudaMemset(out.get(), 0, sizeof(int)), cudaSuccess);
        EXPECT_EQ(out.host(), std::vector<int>{0});
        const volatile int* host_view = in.get();
        EXPECT_DEATH((void)host_view[0], "");
    }
    set_host_guard(false);
}

// The guard opens what the device touches, one 64 KiB chunk at a time, and only chunks of live
// allocations: the device reading memory already freed (through a pointer the launch's
// argument check cannot see, one stored in device memory) faults, as it may on a GPU.
TEST(CudaEmuDeathTest, HostGuardFaultsADeviceReadOfFreedMemory) {
    set_host_guard(true);
    int* freed = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&freed), 256 * sizeof(int)), cudaSuccess);
    {
        const DeviceAccess device;
        EXPECT_EQ(*static_cast<volatile int*>(freed), -1);  // 0xff bytes: live, let in
    }
    ASSERT_EQ(cudaFree(freed), cudaSuccess);
    const auto read_freed = [freed] {
        const DeviceAccess device;
        (void)*static_cast<volatile int*>(freed);
    };
    EXPECT_DEATH(read_freed(), "");
    set_host_guard(false);
}

// More chunks opened in one access than the guard notes one by one (8192): it opens its whole
// arena, and the access's end closes it whole, so the host is kept out again.
TEST(CudaEmuDeathTest, HostGuardClosesEverythingAfterManyChunks) {
    set_host_guard(true);
    std::vector<int*> buffers(9000);
    for (int*& b : buffers)
        ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), sizeof(int)), cudaSuccess);
    {
        const DeviceAccess device;  // as a kernel would: each first touch opens a chunk
        for (int* b : buffers)
            *static_cast<volatile int*>(b) = 7;
    }
    ASSERT_EQ(cudaMemset(buffers.back(), 0, sizeof(int)), cudaSuccess);
    EXPECT_DEATH((void)*static_cast<volatile int*>(buffers.front()), "");
    for (int* b : buffers)
        ASSERT_EQ(cudaFree(b), cudaSuccess);
    set_host_guard(false);
}

// ---- WMMA ----

// A 16 x 16 matrix stored with leading dimension ld (row- or column-major), of 16-bit values
// (their bits) or floats, and the values as the CPU reads them.
struct Matrix16 {
    std::vector<float> values;  // (16, 16) row-major, exactly as stored
    std::vector<std::uint16_t> bits;
    std::vector<float> floats;
};

Matrix16 random_matrix(std::mt19937& rng, unsigned ld, bool col, bool half) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    Matrix16 m;
    m.values.resize(256);
    m.bits.assign(16 * ld, 0xffff);  // NaN in the padding, which no load may read
    m.floats.assign(16 * ld, std::numeric_limits<float>::quiet_NaN());
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
            const float v = d(rng);
            const std::size_t at = col ? c * ld + r : r * ld + c;
            if (half) {
                const f16_t h(v);
                m.values[r * 16 + c] = static_cast<float>(h);
                m.bits[at] = std::bit_cast<std::uint16_t>(h);
            } else {
                const bf16_t b(v);
                m.values[r * 16 + c] = static_cast<float>(b);
                m.bits[at] = b.bits;
            }
            m.floats[at] = v;
        }
    return m;
}

TEST_F(CudaEmu, WmmaProductMatchesACpuLoop) {
    const unsigned seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    int cases = 0;
    for (bool half : {false, true})
        for (int layouts = 0; layouts < 16; ++layouts) {
            st::WmmaProduct p;
            p.half = half;
            p.a_col = layouts & 1, p.b_col = layouts & 2, p.c_col = layouts & 4,
            p.d_col = layouts & 8;
            // Leading dimensions past 16 (multiples of 16 bytes, as WMMA requires), odd ones
            // among them in units of 16 bytes: 24 and 40 halves, 20 floats.
            p.lda = layouts % 3 == 0 ? 16 : 24;
            p.ldb = layouts % 2 == 0 ? 40 : 16;
            p.ldc = 20;
            p.ldd = layouts % 4 == 0 ? 16 : 28;
            SCOPED_TRACE(std::string(half ? "f16" : "bf16") + " layouts " +
                         std::to_string(layouts));
            const Matrix16 a = random_matrix(rng, p.lda, p.a_col, half);
            const Matrix16 b = random_matrix(rng, p.ldb, p.b_col, half);
            const Matrix16 c = random_matrix(rng, p.ldc, p.c_col, half);
            Buffer<std::uint16_t> a_d(a.bits), b_d(b.bits);
            Buffer<float> c_d(c.floats), d_d(std::vector<float>(16 * p.ldd, -7.0f));
            ASSERT_EQ(st::wmma_product(a_d.get(), b_d.get(), c_d.get(), d_d.get(), p), cudaSuccess)
                << last_error_message();
            const std::vector<float> d = d_d.host();
            for (int r = 0; r < 16; ++r)
                for (int col = 0; col < 16; ++col) {
                    double want = c.floats[p.c_col ? col * p.ldc + r : r * p.ldc + col];
                    for (int k = 0; k < 16; ++k)
                        want += static_cast<double>(a.values[r * 16 + k]) * b.values[k * 16 + col];
                    const float got = d[p.d_col ? col * p.ldd + r : r * p.ldd + col];
                    EXPECT_NEAR(got, 2.0 * want, 1e-5 * (1.0 + std::abs(want)))
                        << "d(" << r << ", " << col << ")";
                }
            // The store wrote the 16 x 16 elements and nothing between them.
            const long untouched = std::count(d.begin(), d.end(), -7.0f);
            EXPECT_EQ(untouched, static_cast<long>(16 * p.ldd) - 256);
            ++cases;
        }
    EXPECT_EQ(cases, 32);
}

TEST_F(CudaEmu, WmmaFragmentMappingIsAPermutationDrawnPerLaunch) {
    std::vector<std::uint16_t> bits(256);
    std::vector<float> floats(256);
    for (int e = 0; e < 256; ++e) {
        const f16_t h(static_cast<float>(e));
        bits[static_cast<std::size_t>(e)] = std::bit_cast<std::uint16_t>(h);
        floats[static_cast<std::size_t>(e)] = static_cast<float>(e);
    }
    Buffer<std::uint16_t> m(bits);
    Buffer<float> mf(floats), out(512 + 256);
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
        ASSERT_EQ(st::wmma_fragment_contents(m.get(), mf.get(), out.get()), cudaSuccess)
            << last_error_message();
        runs.push_back(out.host());
        // matrix_a __half: 16 slots per lane, so each element twice; the accumulator's 8: once.
        std::map<float, int> a_count, acc_count;
        for (int i = 0; i < 512; ++i)
            ++a_count[runs.back()[static_cast<std::size_t>(i)]];
        for (int i = 512; i < 768; ++i)
            ++acc_count[runs.back()[static_cast<std::size_t>(i)]];
        ASSERT_EQ(a_count.size(), 256u);
        ASSERT_EQ(acc_count.size(), 256u);
        for (const auto& [v, n] : a_count)
            EXPECT_EQ(n, 2) << "matrix_a element " << v;
        for (const auto& [v, n] : acc_count)
            EXPECT_EQ(n, 1) << "accumulator element " << v;
    }
    EXPECT_NE(runs[0], runs[1]) << "two launches mapped the fragments alike";
}

TEST_F(CudaEmu, WmmaKernelRelyingOnAFixedMappingIsCaught) {
    std::mt19937 rng(7);
    const Matrix16 a = random_matrix(rng, 16, false, false);
    const Matrix16 b = random_matrix(rng, 16, false, false);
    Buffer<std::uint16_t> a_d(a.bits), b_d(b.bits);
    Buffer<float> d_d(256);
    ASSERT_EQ(st::wmma_fixed_mapping(a_d.get(), b_d.get(), d_d.get()), cudaSuccess);
    const std::vector<float> d = d_d.host();
    int wrong = 0;
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
            double want = 0.0;
            for (int k = 0; k < 16; ++k)
                want += static_cast<double>(a.values[r * 16 + k]) * b.values[k * 16 + c];
            wrong += !(std::abs(d[static_cast<std::size_t>(r * 16 + c)] - want) <= 1e-4);
        }
    EXPECT_GT(wrong, 200) << "the emulator's mapping looks like the one the kernel assumed";
}

TEST_F(CudaEmu, WmmaInvalidCallsFailTheLaunch) {
    Buffer<std::uint16_t> m(std::vector<std::uint16_t>(512, 0));
    const std::pair<st::WmmaMisuse, const char*> cases[] = {
        {st::WmmaMisuse::kHalfWarp, "which has returned"},
        {st::WmmaMisuse::kOddLdm, "ldm 17 is not a multiple of 16 bytes"},
        {st::WmmaMisuse::kMisaligned, "not 256-bit aligned"},
        {st::WmmaMisuse::kLanesDisagree, "lane 1 passes another pointer"},
        {st::WmmaMisuse::kSmallBlock, "needs all 32 lanes"},
        {st::WmmaMisuse::kDifferentCalls, "all 32 lanes must make the same call"},
    };
    for (const auto& [how, says] : cases) {
        reset_for_test();
        EXPECT_EQ(st::wmma_misuse(m.get(), how), cudaErrorLaunchFailure) << says;
        const std::string message = last_error_message();
        EXPECT_NE(message.find("wmma::load_matrix_sync"), std::string::npos) << message;
        EXPECT_NE(message.find(says), std::string::npos) << message;
    }
}

#if defined(__SANITIZE_ADDRESS__)
// Device memory is exactly as long as asked: AddressSanitizer sees a kernel read past its end.
TEST(CudaEmuDeathTest, ReadPastTheEndIsCaughtUnderAddressSanitizer) {
    Ints in(std::vector<int>(5, 1)), out(1);
    EXPECT_DEATH(st::read_past_end(in.get(), 5, out.get()), "heap-buffer-overflow");
}
#endif

}  // namespace
}  // namespace napkin::emu
