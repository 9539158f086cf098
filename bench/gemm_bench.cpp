// cuBLASLt GEMM throughput through napkin's own matmul_forward (kernels/cuda/matmul.cu): bf16,
// fp16, tf32 and fp32 at 4096^3 and at GPT-2 124M's shapes (M = B*T = 8*1024 tokens, C = 768),
// median TFLOP/s over timed repeats after warm-up, and the fraction of the H100 SXM's dense
// datasheet peak (estimator/hardware.cpp). This is the "measured cuBLAS peak" that MFU figures
// are quoted against (docs/CUDA.md). FLOPs come from matmul_forward_cost, napkin's one
// definition: 2*M*N*K.
//   gemm_bench [--reps N] [--warmup N]
// Without a GPU it says so and exits 0. Never run as a test.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/half.h"
#include "estimator/hardware.h"
#include "kernels/matmul.h"

namespace {

using namespace napkin;

struct Shape {
    const char* what;
    std::int64_t M, N, K;
};

constexpr std::int64_t kTokens = 8 * 1024;  // GPT-2: B = 8, T = 1024
constexpr Shape kShapes[] = {
    {"square 4096^3", 4096, 4096, 4096},   {"gpt2 attn qkv", kTokens, 2304, 768},
    {"gpt2 attn proj", kTokens, 768, 768}, {"gpt2 mlp fc", kTokens, 3072, 768},
    {"gpt2 mlp proj", kTokens, 768, 3072}, {"gpt2 lm head", kTokens, 50304, 768},
};

struct Flavor {
    const char* name;
    DType dtype;  // storage; tf32 is fp32 storage on tensor cores
    bool tf32;
};
constexpr Flavor kFlavors[] = {{"bf16", DType::bf16, false},
                               {"fp16", DType::f16, false},
                               {"tf32", DType::f32, true},
                               {"fp32", DType::f32, false}};

double peak_tflops(const GpuSpec& gpu, const Flavor& f) {
    if (f.tf32) return gpu.tflops_tf32;
    switch (f.dtype) {
        case DType::bf16:
            return gpu.tflops_bf16;
        case DType::f16:
            return gpu.tflops_fp16;
        default:
            return gpu.tflops_fp32;
    }
}

// Device buffer of n random values in [-1, 1) in the flavor's storage type.
void* random_device(const Flavor& f, std::int64_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::size_t elem = f.dtype == DType::f32 ? 4 : 2;
    std::vector<unsigned char> host(static_cast<std::size_t>(n) * elem);
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = u(rng);
        if (f.dtype == DType::bf16) {
            const bf16_t b(v);
            std::memcpy(host.data() + i * 2, &b, 2);
        } else if (f.dtype == DType::f16) {
            const f16_t h(v);
            std::memcpy(host.data() + i * 2, &h, 2);
        } else {
            std::memcpy(host.data() + i * 4, &v, 4);
        }
    }
    void* d = nullptr;
    NAPKIN_CUDA_CHECK(cudaMalloc(&d, host.size()));
    NAPKIN_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
    return d;
}

template <class T>
void gemm(void* out, const void* a, const void* b, const Shape& s, float* workspace,
          const cuda::Launch& launch) {
    cuda::matmul_forward<T>({static_cast<T*>(out), static_cast<const T*>(a),
                             static_cast<const T*>(b), nullptr, s.M, s.N, s.K, workspace},
                            launch);
}

void run_gemm(const Flavor& f, void* out, const void* a, const void* b, const Shape& s,
              float* workspace, const cuda::Launch& launch) {
    switch (f.dtype) {
        case DType::bf16:
            return gemm<bf16_t>(out, a, b, s, workspace, launch);
        case DType::f16:
            return gemm<f16_t>(out, a, b, s, workspace, launch);
        default:
            return gemm<float>(out, a, b, s, workspace, launch);
    }
}

int parse_int(int argc, char** argv, const char* flag, int fallback) {
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], flag) == 0) return std::max(1, std::atoi(argv[i + 1]));
    }
    return fallback;
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = parse_int(argc, argv, "--reps", 30);
    const int warmup = parse_int(argc, argv, "--warmup", 10);
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        std::printf("gemm_bench: no CUDA device (%s); nothing to measure\n",
                    err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return 0;
    }
    cudaDeviceProp prop{};
    NAPKIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const GpuSpec* h100 = find_gpu("h100-sxm");
    std::printf("gemm_bench on %s (sm_%d%d); %% of peak is of the %s dense datasheet peak\n",
                prop.name, prop.major, prop.minor, std::string(h100->full_name).c_str());
    std::printf(
        "cuBLASLt through napkin::cuda::matmul_forward, out (M, N) = inp (M, K) @ weight (N, K)^T, "
        "no bias; median of %d after %d warm-up calls\n\n",
        reps, warmup);
    std::printf("%-5s %-15s %6s %6s %6s %10s %9s %8s %9s\n", "dtype", "shape", "M", "N", "K",
                "median ms", "TFLOP/s", "% peak", "FLOP/B");

    cudaStream_t stream = nullptr;
    NAPKIN_CUDA_CHECK(cudaStreamCreate(&stream));
    cuda::Launch launch{stream, cuda::matmul_create_handle()};
    void* workspace_bytes = nullptr;
    NAPKIN_CUDA_CHECK(cudaMalloc(&workspace_bytes, cuda::kMatmulWorkspaceBytes));
    auto* workspace = static_cast<float*>(workspace_bytes);
    cudaEvent_t start = nullptr, stop = nullptr;
    NAPKIN_CUDA_CHECK(cudaEventCreate(&start));
    NAPKIN_CUDA_CHECK(cudaEventCreate(&stop));
    std::mt19937 rng(1234);

    for (const Flavor& f : kFlavors) {
        launch.tf32 = f.tf32;
        for (const Shape& s : kShapes) {
            void* a = random_device(f, s.M * s.K, rng);
            void* b = random_device(f, s.N * s.K, rng);
            void* out = nullptr;
            NAPKIN_CUDA_CHECK(cudaMalloc(
                &out, static_cast<std::size_t>(s.M * s.N) * (f.dtype == DType::f32 ? 4 : 2)));
            for (int i = 0; i < warmup; ++i)
                run_gemm(f, out, a, b, s, workspace, launch);
            std::vector<double> ms;
            for (int i = 0; i < reps; ++i) {
                NAPKIN_CUDA_CHECK(cudaEventRecord(start, stream));
                run_gemm(f, out, a, b, s, workspace, launch);
                NAPKIN_CUDA_CHECK(cudaEventRecord(stop, stream));
                NAPKIN_CUDA_CHECK(cudaEventSynchronize(stop));
                float t = 0.0f;
                NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
                ms.push_back(t);
            }
            std::sort(ms.begin(), ms.end());
            const double median_ms = ms[ms.size() / 2];
            MatmulShape shape;
            shape.M = s.M;
            shape.N = s.N;
            shape.K = s.K;
            shape.in = shape.out = shape.weight = f.dtype;
            const KernelCost cost = matmul_forward_cost(shape);
            const double tflops = static_cast<double>(cost.flops) / (median_ms * 1e-3) / 1e12;
            const double peak = peak_tflops(*h100, f);
            std::printf("%-5s %-15s %6lld %6lld %6lld %10.3f %9.1f %7.1f%% %9.0f\n", f.name, s.what,
                        static_cast<long long>(s.M), static_cast<long long>(s.N),
                        static_cast<long long>(s.K), median_ms, tflops,
                        peak > 0 ? 100.0 * tflops / peak : 0.0,
                        static_cast<double>(cost.flops) / static_cast<double>(cost.bytes()));
            NAPKIN_CUDA_CHECK(cudaFree(a));
            NAPKIN_CUDA_CHECK(cudaFree(b));
            NAPKIN_CUDA_CHECK(cudaFree(out));
        }
    }
    NAPKIN_CUDA_CHECK(cudaEventDestroy(start));
    NAPKIN_CUDA_CHECK(cudaEventDestroy(stop));
    NAPKIN_CUDA_CHECK(cudaStreamDestroy(stream));
    NAPKIN_CUDA_CHECK(cudaFree(workspace));
    cuda::matmul_destroy_handle(launch.blas);
    return 0;
}
