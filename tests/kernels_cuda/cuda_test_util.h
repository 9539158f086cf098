// Shared by the CUDA kernel tests (tests/kernels_cuda/<op>_test.cpp), a harness in the manner
// of ggml's test-backend-ops: each test draws fresh random inputs (seed in a SCOPED_TRACE),
// runs the CPU kernel (napkin::cpu, the spec) and its CUDA twin on the same values, and compares
// element by element with the per-dtype tolerances of tests/kernels/kernel_test_util.h (NaN and
// inf never pass). Outputs the kernel overwrites are poisoned first (every byte 0xff: NaN in
// fp32, bf16 and fp16), so an element the kernel forgets to write fails; outputs it accumulates
// into start from the same random values on both sides.
// Every test starts with NAPKIN_SKIP_WITHOUT_GPU(): without a device it skips with the reason.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/half.h"
#include "kernels/launch.h"
#include "kernels/matmul.h"
#include "tests/kernels/kernel_test_util.h"

namespace napkin::test {

// Empty when a CUDA device is usable, else why not (cudaGetDeviceCount's answer).
inline const std::string& cuda_unavailable_reason() {
    static const std::string reason = [] {
        int n = 0;
        const cudaError_t err = cudaGetDeviceCount(&n);
        if (err != cudaSuccess) {
            cudaGetLastError();
            return std::string(cudaGetErrorString(err));
        }
        return n > 0 ? std::string() : std::string("no CUDA device");
    }();
    return reason;
}

#define NAPKIN_SKIP_WITHOUT_GPU()                                                           \
    do {                                                                                    \
        if (!::napkin::test::cuda_unavailable_reason().empty()) {                           \
            GTEST_SKIP() << "no CUDA device (" << ::napkin::test::cuda_unavailable_reason() \
                         << "): the CUDA kernels are compiled but not run";                 \
        }                                                                                   \
    } while (0)

// Device memory for n elements of T (at least one, so pointers are never null), `offset`
// elements past the start of an allocation (cudaMalloc's is 256-byte aligned): offset 1 puts
// every element off the 16-byte alignment of the kernels' vector loads, their scalar path.
template <class T>
class DeviceBuffer {
public:
    explicit DeviceBuffer(std::size_t n, std::size_t offset = 0) : n_(n) {
        void* p = nullptr;
        NAPKIN_CUDA_CHECK(cudaMalloc(&p, bytes_of(n + offset)));
        base_ = static_cast<T*>(p);
        ptr_ = base_ + offset;
    }
    explicit DeviceBuffer(const std::vector<T>& host, std::size_t offset = 0)
        : DeviceBuffer(host.size(), offset) {
        upload(host);
    }
    ~DeviceBuffer() { cudaFree(base_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return ptr_; }
    std::size_t size() const { return n_; }

    void upload(const std::vector<T>& host) {
        ASSERT_EQ(host.size(), n_);
        NAPKIN_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    }
    // Waits for all queued work (and surfaces a kernel fault here, checked).
    std::vector<T> download() const {
        NAPKIN_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<T> host(n_);
        NAPKIN_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
    // Every byte 0xff: a quiet NaN in fp32, bf16 and fp16.
    void poison() { NAPKIN_CUDA_CHECK(cudaMemset(ptr_, 0xff, n_ * sizeof(T))); }

private:
    static std::size_t bytes_of(std::size_t n) { return (n > 0 ? n : 1) * sizeof(T); }
    T* base_ = nullptr;
    T* ptr_ = nullptr;
    std::size_t n_ = 0;
};

// A cuBLASLt handle (in `launch`, on the legacy default stream) and a GEMM workspace of
// workspace_bytes (null for 0), the GEMM ops' scratch (kernels/matmul.h), for a test's lifetime.
class CublasLt {
public:
    explicit CublasLt(std::size_t workspace_bytes = cuda::kMatmulWorkspaceBytes) {
        launch.blas = cuda::matmul_create_handle();
        if (workspace_bytes > 0) {
            void* p = nullptr;
            NAPKIN_CUDA_CHECK(cudaMalloc(&p, workspace_bytes));
            workspace = static_cast<float*>(p);
        }
    }
    ~CublasLt() {
        cudaFree(workspace);
        cuda::matmul_destroy_handle(launch.blas);
    }
    CublasLt(const CublasLt&) = delete;
    CublasLt& operator=(const CublasLt&) = delete;
    cuda::Launch launch;
    float* workspace = nullptr;
};

template <class T>
std::vector<T> random_storage(std::mt19937& rng, std::int64_t n, double stddev = 1.0) {
    return to_storage<T>(random_normal(rng, n, 0.0, stddev));
}

// The GPU's values against the CPU's, both as the storage type holds them.
// `slack`, when given, widens element i's bound by slack[i] (expect_close).
template <class T>
void expect_match(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                  Tolerance tol, const Vec* slack = nullptr) {
    expect_close(what, as_seen(gpu), as_seen(cpu), tol, slack);
}

// A storage value's bits (fp32: 32, bf16 and fp16: 16).
template <class T>
std::uint32_t bits_of(T v) {
    if constexpr (std::is_same_v<T, float>)
        return std::bit_cast<std::uint32_t>(v);
    else
        return std::bit_cast<std::uint16_t>(v);
}

// Equal bits element by element, or NaN on both sides (a NaN's payload and sign are the
// hardware's): for kernels whose results must be the CPU's exactly.
template <class T>
void expect_same_bits(const std::string& what, const std::vector<T>& gpu,
                      const std::vector<T>& cpu) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        const float g = to_float(gpu[i]), c = to_float(cpu[i]);
        if (bits_of(gpu[i]) == bits_of(cpu[i]) || (std::isnan(g) && std::isnan(c))) continue;
        if (bad++ < 5)
            ADD_FAILURE() << what << " element " << i << ": " << g << " (bits " << bits_of(gpu[i])
                          << "), the CPU's " << c << " (bits " << bits_of(cpu[i]) << ")";
    }
    EXPECT_EQ(bad, 0u) << what << ": elements of " << gpu.size() << " differing";
}

inline void sync_and_check() {
    NAPKIN_CUDA_CHECK(cudaDeviceSynchronize());
}

// "f32 (3, 7)" for SCOPED_TRACE.
template <class T, class... Dims>
std::string case_name(Dims... dims) {
    std::string s = std::string(dtype_name<T>()) + " (";
    bool first = true;
    for (std::int64_t d : {static_cast<std::int64_t>(dims)...}) {
        s += (first ? "" : ", ") + std::to_string(d);
        first = false;
    }
    return s + ")";
}

using StorageTypes = ::testing::Types<float, bf16_t, f16_t>;

}  // namespace napkin::test
