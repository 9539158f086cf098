// The memory-bound CUDA kernels alone at GPT-2 124M's shapes (B 8, T 1024, C 768, bf16; AdamW
// over 124M parameters with fp32 master and states): milliseconds per call and GB/s of the
// bytes each must move, on the 16-byte vector path (every pointer aligned) and on the scalar
// path (every pointer one element off, the kernels as they were before the vector path), in one
// process. The bytes are the tensors read and written once; GB/s against the GPU's HBM peak
// says how far from its roofline each kernel runs.
//
//   membound_bench [--reps N] [--tiny]
//
// Then the layernorm backward at B T = 64 1024 (C 768, bf16): the one-pass kernel (inp and dout
// read once, kernels/norm.h) against the two passes it replaced, median microseconds of single
// calls and GB/s of the bytes the op must move (inp, dout read; dinp read and written).
//
// --tiny (64 rows, 100003 parameters): a dry run, for membound_bench_emu on the CUDA emulator.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/half.h"
#include "kernels/accumulate.h"
#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/residual.h"

namespace napkin {
namespace {

// The shapes, set once by main before anything runs.
std::int64_t g_rows = 8 * 1024;        // B T; --tiny: 64
std::int64_t g_norm_rows = 64 * 1024;  // the layernorm backward table's B T; --tiny: 64
constexpr std::int64_t kC = 768;
std::int64_t g_params = 124'439'808;  // GPT-2 124M, tied embedding; --tiny: 100003

// Device memory of `bytes` plus one 16-byte slack, filled with a small value; at(offset) is
// `offset` bytes in (0: 256-byte aligned; 2: off the vectors for 2-byte elements).
class Arena {
public:
    explicit Arena(std::size_t bytes) {
        NAPKIN_CUDA_CHECK(cudaMalloc(&p_, bytes + 16));
        NAPKIN_CUDA_CHECK(cudaMemset(p_, 0x3c, bytes + 16));  // bf16 0x3c3c ~ 0.0115
    }
    ~Arena() { cudaFree(p_); }
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    template <class T>
    T* at(std::size_t offset) const {
        return reinterpret_cast<T*>(static_cast<char*>(p_) + offset);
    }

private:
    void* p_ = nullptr;
};

// Mean milliseconds of `reps` calls between two events, after two untimed calls.
double mean_ms(const std::function<void()>& call, int reps) {
    call();
    call();
    cudaEvent_t events[2];
    for (auto& e : events)
        NAPKIN_CUDA_CHECK(cudaEventCreate(&e));
    NAPKIN_CUDA_CHECK(cudaEventRecord(events[0], nullptr));
    for (int i = 0; i < reps; ++i)
        call();
    NAPKIN_CUDA_CHECK(cudaEventRecord(events[1], nullptr));
    NAPKIN_CUDA_CHECK(cudaEventSynchronize(events[1]));
    float ms = 0.0f;
    NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&ms, events[0], events[1]));
    for (auto& e : events)
        NAPKIN_CUDA_CHECK(cudaEventDestroy(e));
    return ms / reps;
}

struct Case {
    const char* name;
    double bytes;                           // moved by one call, each tensor once
    std::function<void(std::size_t)> call;  // given the byte offset of every pointer
};

std::vector<Case> cases(const std::vector<Arena*>& a, float* stats) {
    using T = bf16_t;
    const std::int64_t n_mlp = g_rows * 4 * kC, n_res = g_rows * kC;
    const double e = sizeof(T);
    auto p = [a](int i, std::size_t off) { return a[static_cast<std::size_t>(i)]->at<T>(off); };
    float* mean = stats;
    float* rstd = stats + g_rows;
    return {
        {"gelu forward", 2 * e * n_mlp,
         [=](std::size_t o) {
             cuda::gelu_forward<T>({p(0, o), p(1, o), n_mlp}, {});
         }},
        {"gelu backward", 4 * e * n_mlp,
         [=](std::size_t o) {
             cuda::gelu_backward<T>({p(0, o), p(1, o), p(2, o), n_mlp}, {});
         }},
        {"residual forward", 3 * e * n_res,
         [=](std::size_t o) {
             cuda::residual_forward<T>({p(0, o), p(1, o), p(2, o), n_res}, {});
         }},
        {"residual backward", 5 * e * n_res,
         [=](std::size_t o) {
             cuda::residual_backward<T>({p(0, o), p(1, o), p(2, o), n_res}, {});
         }},
        {"accumulate", 3 * e * n_res,
         [=](std::size_t o) {
             cuda::accumulate<T>({p(0, o), p(1, o), n_res}, {});
         }},
        {"layernorm forward", 2 * e * n_res,
         [=](std::size_t o) {
             cuda::layernorm_forward<T>(
                 {p(0, o), mean, rstd, p(1, o), p(3, o), p(3, o + 2 * kC), g_rows, kC}, {});
         }},
        {"residual+layernorm forward", 4 * e * n_res,
         [=](std::size_t o) {
             cuda::residual_layernorm_forward<T>({p(0, o), mean, rstd, p(1, o), p(2, o), p(4, o),
                                                  p(3, o), p(3, o + 2 * kC), g_rows, kC},
                                                 {});
         }},
        // dinp read and written, inp and dout read (once on the vector path; the scalar path's
        // parameter gradients read them again).
        {"layernorm backward", 4 * e * n_res,
         [=](std::size_t o) {
             cuda::layernorm_backward<T>(
                 {p(0, o), p(3, o), p(3, o + 2 * kC), p(1, o), p(2, o), p(3, o + 4 * kC), mean,
                  rstd, g_rows, kC, a[5]->at<float>(0), 64u << 20},
                 {});
         }},
    };
}

// Median milliseconds of `reps` single calls, each between its own two events, after two
// untimed calls.
double median_ms(const std::function<void()>& call, int reps) {
    call();
    call();
    cudaEvent_t events[2];
    for (auto& e : events)
        NAPKIN_CUDA_CHECK(cudaEventCreate(&e));
    std::vector<float> ms(static_cast<std::size_t>(reps));
    for (float& m : ms) {
        NAPKIN_CUDA_CHECK(cudaEventRecord(events[0], nullptr));
        call();
        NAPKIN_CUDA_CHECK(cudaEventRecord(events[1], nullptr));
        NAPKIN_CUDA_CHECK(cudaEventSynchronize(events[1]));
        NAPKIN_CUDA_CHECK(cudaEventElapsedTime(&m, events[0], events[1]));
    }
    for (auto& e : events)
        NAPKIN_CUDA_CHECK(cudaEventDestroy(e));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// The layernorm backward at GPT-2's largest batch (B T = 64 1024; --tiny: 64 rows): one pass
// against two. Bytes: inp and dout read, dinp read and written (4 e N C), the parameters and
// statistics beside them; the two passes read inp and dout once more (6 e N C in all).
void norm_backward_table(std::int64_t rows, int reps) {
    using T = bf16_t;
    const std::int64_t n = rows * kC;
    const double e = sizeof(T);
    const std::size_t act = static_cast<std::size_t>(n) * sizeof(T);
    const std::size_t scratch_bytes = cuda::norm_backward_scratch_bytes(rows, kC);
    Arena inp(act), dout(act), dinp(act), params(3 * kC * sizeof(T)), stats(2 * rows * 4),
        scratch(scratch_bytes);
    const LayernormBackwardArgs<T> args{dinp.at<T>(0),
                                        params.at<T>(0),
                                        params.at<T>(2 * kC),
                                        dout.at<T>(0),
                                        inp.at<T>(0),
                                        params.at<T>(4 * kC),
                                        stats.at<float>(0),
                                        stats.at<float>(4 * rows),
                                        rows,
                                        kC,
                                        scratch.at<float>(0),
                                        scratch_bytes};
    const double bytes = 4 * e * n;
    std::printf(
        "\nlayernorm backward, N %lld (B*T), C %lld, bf16: median of %d calls; %.1f MB "
        "moved at least (inp, dout read; dinp read and written)\n",
        static_cast<long long>(rows), static_cast<long long>(kC), reps, bytes / 1e6);
    std::printf("%-34s %10s %10s\n", "path", "median us", "GB/s");
    const double two = median_ms([&] { cuda::layernorm_backward_two_pass<T>(args, {}); }, reps);
    const double one = median_ms([&] { cuda::layernorm_backward<T>(args, {}); }, reps);
    NAPKIN_CUDA_CHECK(cudaGetLastError());
    std::printf("%-34s %10.1f %10.1f\n", "two passes (reads inp, dout twice)", two * 1e3,
                bytes / two / 1e6);
    std::printf("%-34s %10.1f %10.1f\n", "one pass", one * 1e3, bytes / one / 1e6);
    std::printf("%-34s %9.2fx\n", "speedup", two / one);
}

int run(int reps) {
    using T = bf16_t;
    const std::size_t act = static_cast<std::size_t>(g_rows * 4 * kC) * sizeof(T);
    Arena a0(act), a1(act), a2(act), a3(8 * kC * sizeof(T)), a4(act), scratch(64u << 20);
    Arena stats(2 * g_rows * sizeof(float));
    // AdamW over g_params: bf16 gradient and weight copy, fp32 master, m and v.
    Arena grad(g_params * 2), weight(g_params * 2), master(g_params * 4), m(g_params * 4),
        v(g_params * 4);
    std::vector<Case> list = cases({&a0, &a1, &a2, &a3, &a4, &scratch}, stats.at<float>(0));
    list.push_back({"adamw update", 30.0 * g_params, [&](std::size_t o) {
                        OptimizerTensor t;
                        t.master = master.at<float>(2 * o);
                        t.grad = grad.at<void>(o);
                        t.m = m.at<void>(2 * o);
                        t.v = v.at<void>(2 * o);
                        t.weight = weight.at<void>(o);
                        t.n = g_params;
                        t.weight_decay = 0.1f;
                        t.grad_dtype = t.weight_dtype = DType::bf16;
                        OptimizerHyper h;
                        h.lr = 1e-4f;
                        cuda::optimizer_update(h, &t, 1, DType::f32, nullptr);
                    }});
    std::printf(
        "memory-bound kernels at GPT-2 124M's shapes (B*T %lld, C %lld, bf16), mean of "
        "%d calls\n",
        static_cast<long long>(g_rows), static_cast<long long>(kC), reps);
    std::printf("%-28s %10s %10s %10s %10s %8s\n", "kernel", "MB moved", "vec ms", "vec GB/s",
                "scalar ms", "speedup");
    for (const Case& c : list) {
        const double vec = mean_ms([&] { c.call(0); }, reps);
        const double scalar = mean_ms([&] { c.call(2); }, reps);  // one bf16 element off
        NAPKIN_CUDA_CHECK(cudaGetLastError());
        std::printf("%-28s %10.1f %10.4f %10.1f %10.4f %7.2fx\n", c.name, c.bytes / 1e6, vec,
                    c.bytes / vec / 1e6, scalar, scalar / vec);
    }
    norm_backward_table(g_norm_rows, reps);
    return 0;
}

}  // namespace
}  // namespace napkin

int main(int argc, char** argv) {
    int reps = 20;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--tiny") == 0) {
            napkin::g_rows = 64;
            napkin::g_norm_rows = 64;
            napkin::g_params = 100003;
        } else {
            std::fprintf(stderr, "usage: membound_bench [--reps N] [--tiny]\n");
            return 2;
        }
    }
    if (reps < 1) {
        std::fprintf(stderr, "membound_bench: --reps must be at least 1\n");
        return 2;
    }
    return napkin::run(reps);
}
