// The two CUDA flash attentions against each other (kernels/attention.h): the SIMT kernels
// (kernels/cuda/attention.cu, fp32 FMA) and the tensor-core ones (kernels/cuda/attention_mma.cu,
// WMMA), forward and backward, at GPT-2 124M's shape (B = 8, T = 1024, NH = 12, HD = 64) and a
// Llama-like one (HD = 128, 4 query heads per kv head), bf16. Median time over timed repeats
// after warm-up (CUDA events around each call), TFLOP/s from napkin's one definition of the
// FLOPs (attention_forward_cost: 4 B NH HD T(T+1)/2; attention_backward_cost: 8 B NH HD
// T(T+1)/2, without the flash backward's recomputation of S), the fraction of the H100 SXM's
// dense bf16 peak, and tensor-core / SIMT as a speedup. Each shape's forward outputs of the two
// paths are compared first (largest difference printed; both are tested against the CPU in
// tests/kernels_cuda/attention_test.cpp).
//   attention_bench [--reps N] [--warmup N]
// Without a GPU it says so and exits 0. Never run as a test.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/half.h"
#include "estimator/hardware.h"
#include "kernels/attention.h"

namespace {

using namespace napkin;

struct Shape {
    const char* what;
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
};

constexpr Shape kShapes[] = {
    {"gpt2-124m", 8, 1024, 12, 12, 64},
    {"llama-like gqa", 2, 2048, 32, 8, 128},
};

// Device buffer of n bf16 values drawn from N(0, 1) with a generator, zeros without.
class Device {
public:
    Device(std::int64_t n, std::mt19937* rng) : bytes_(static_cast<std::size_t>(n) * 2) {
        NAPKIN_CUDA_CHECK(cudaMalloc(&p_, bytes_));
        if (rng == nullptr) {
            NAPKIN_CUDA_CHECK(cudaMemset(p_, 0, bytes_));
            return;
        }
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<bf16_t> host(static_cast<std::size_t>(n));
        for (bf16_t& v : host)
            v = bf16_t(d(*rng));
        NAPKIN_CUDA_CHECK(cudaMemcpy(p_, host.data(), bytes_, cudaMemcpyHostToDevice));
    }
    ~Device() { cudaFree(p_); }
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;
    bf16_t* get() const { return static_cast<bf16_t*>(p_); }
    std::vector<bf16_t> host() const {
        std::vector<bf16_t> h(bytes_ / 2);
        NAPKIN_CUDA_CHECK(cudaMemcpy(h.data(), p_, bytes_, cudaMemcpyDeviceToHost));
        return h;
    }

private:
    std::size_t bytes_;
    void* p_ = nullptr;
};

// Median milliseconds of `call` on `stream` over `reps` timed calls after `warmup`.
double median_ms(const std::function<void()>& call, cudaStream_t stream, int warmup, int reps) {
    cudaEvent_t start = nullptr, stop = nullptr;
    NAPKIN_CUDA_CHECK(cudaEventCreate(&start));
    NAPKIN_CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; ++i)
        call();
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        NAPKIN_CUDA_CHECK(cudaEventRecord(start, stream));
        call();
        NAPKIN_CUDA_CHECK(cudaEventRecord(stop, stream));
        NAPKIN_CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0.0f;
        NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
    }
    NAPKIN_CUDA_CHECK(cudaEventDestroy(start));
    NAPKIN_CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int parse_int(int argc, char** argv, const char* flag, int fallback) {
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], flag) == 0) return std::max(1, std::atoi(argv[i + 1]));
    }
    return fallback;
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = parse_int(argc, argv, "--reps", 20);
    const int warmup = parse_int(argc, argv, "--warmup", 5);
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        std::printf("attention_bench: no CUDA device (%s); nothing to measure\n",
                    err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 0;
    }
    cudaDeviceProp prop{};
    NAPKIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const GpuSpec* h100 = find_gpu("h100-sxm");
    std::printf(
        "attention_bench on %s (sm_%d%d); %% of peak is of the %s dense bf16 peak "
        "(%.1f TFLOP/s)\n",
        prop.name, prop.major, prop.minor, std::string(h100->full_name).c_str(), h100->tflops_bf16);
    std::printf(
        "causal flash attention, bf16 storage; median of %d after %d warm-up calls; "
        "FLOPs from attention_forward_cost / attention_backward_cost (model FLOPs: the "
        "backward's recomputation of S not counted)\n\n",
        reps, warmup);
    std::printf("%-15s %5s %5s %4s %4s %4s  %-3s %-4s %10s %9s %7s %9s\n", "shape", "B", "T", "NH",
                "KVH", "HD", "dir", "path", "median ms", "TFLOP/s", "% peak", "mma/simt");

    cudaStream_t stream = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamCreate(&stream));
    std::mt19937 rng(1234);
    for (const Shape& s : kShapes) {
        const std::int64_t qkv_n = s.B * s.T * (s.NH + 2ll * s.KVH) * s.HD;
        const std::int64_t out_n = s.B * s.T * s.NH * s.HD;
        const std::int64_t heads_T = s.B * s.NH * s.T;
        Device qkv(qkv_n, &rng), dout(out_n, &rng), out(out_n, nullptr), out_simt(out_n, nullptr);
        Device dqkv(qkv_n, nullptr);
        if (!cuda::attention_flash_mma_supported<bf16_t>(s.HD, {qkv.get(), out.get()})) {
            std::printf("%-15s: the tensor-core path does not take HD %lld\n", s.what,
                        static_cast<long long>(s.HD));
            continue;
        }
        void* lse_bytes = nullptr;
        NAPKIN_CUDA_CHECK(
            cudaMalloc(&lse_bytes, static_cast<std::size_t>(heads_T) * sizeof(float)));
        float* lse = static_cast<float*>(lse_bytes);

        // The two forwards agree (the tests hold both to the CPU; this is the same run's check).
        cuda::attention_flash_simt_forward<bf16_t>(
            {out_simt.get(), lse, qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD}, {stream});
        cuda::attention_flash_mma_forward<bf16_t>(
            {out.get(), lse, qkv.get(), s.B, s.T, s.NH, s.KVH, s.HD}, {stream});
        NAPKIN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<bf16_t> a = out.host(), b = out_simt.host();
        double max_diff = 0.0;
        for (std::size_t i = 0; i < a.size(); ++i)
            max_diff = std::max(max_diff, std::abs(static_cast<double>(static_cast<float>(a[i])) -
                                                   static_cast<float>(b[i])));

        AttentionShape shape;
        shape.B = s.B;
        shape.T = s.T;
        shape.NH = s.NH;
        shape.KVH = s.KVH;
        shape.HD = s.HD;
        shape.impl = AttentionImpl::flash;
        shape.dt = DType::bf16;
        const double fwd_flops = static_cast<double>(attention_forward_cost(shape).flops);
        const double bwd_flops = static_cast<double>(attention_backward_cost(shape).flops);

        const auto B = s.B, T = s.T, HD = s.HD;
        const int NH = s.NH, KVH = s.KVH;
        const double fwd_simt = median_ms(
            [&] {
                cuda::attention_flash_simt_forward<bf16_t>(
                    {out.get(), lse, qkv.get(), B, T, NH, KVH, HD}, {stream});
            },
            stream, warmup, reps);
        const double fwd_mma = median_ms(
            [&] {
                cuda::attention_flash_mma_forward<bf16_t>(
                    {out.get(), lse, qkv.get(), B, T, NH, KVH, HD}, {stream});
            },
            stream, warmup, reps);
        // Backward accumulates into dqkv at every call; its values only grow, and the time does
        // not depend on them.
        const double bwd_simt = median_ms(
            [&] {
                cuda::attention_flash_simt_backward<bf16_t>(
                    {dqkv.get(), dout.get(), out.get(), qkv.get(), lse, B, T, NH, KVH, HD},
                    {stream});
            },
            stream, warmup, reps);
        const double bwd_mma = median_ms(
            [&] {
                cuda::attention_flash_mma_backward<bf16_t>(
                    {dqkv.get(), dout.get(), out.get(), qkv.get(), lse, B, T, NH, KVH, HD},
                    {stream});
            },
            stream, warmup, reps);

        struct Row {
            const char* dir;
            const char* path;
            double ms, flops, baseline_ms;
        };
        const Row rows[] = {{"fwd", "simt", fwd_simt, fwd_flops, 0.0},
                            {"fwd", "mma", fwd_mma, fwd_flops, fwd_simt},
                            {"bwd", "simt", bwd_simt, bwd_flops, 0.0},
                            {"bwd", "mma", bwd_mma, bwd_flops, bwd_simt}};
        for (const Row& r : rows) {
            const double tflops = r.flops / (r.ms * 1e-3) / 1e12;
            char ratio[32] = "";
            if (r.baseline_ms > 0.0)
                std::snprintf(ratio, sizeof ratio, "%.2fx", r.baseline_ms / r.ms);
            std::printf("%-15s %5lld %5lld %4d %4d %4lld  %-3s %-4s %10.3f %9.1f %6.1f%% %9s\n",
                        s.what, static_cast<long long>(s.B), static_cast<long long>(s.T), s.NH,
                        s.KVH, static_cast<long long>(s.HD), r.dir, r.path, r.ms, tflops,
                        100.0 * tflops / h100->tflops_bf16, ratio);
        }
        std::printf("%-15s forward: largest |mma - simt| of out %.3g; FLOPs fwd %.3g, bwd %.3g\n\n",
                    s.what, max_diff, fwd_flops, bwd_flops);
        NAPKIN_CUDA_CHECK(cudaFree(lse));
    }
    NAPKIN_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
