// The CPU GELU kernels (kernels/cpu/activation.cpp, x sigmoid(2u)) against the textbook form
// they replaced, 0.5 x (1 + tanh(u)), in one process on the same inputs and threads: median
// nanoseconds per element, forward and backward, and each form's largest relative error
// against long double on the inputs (the tanh form cancels for negative x).
//
//   ./build/bench/activation_bench [--reps N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation.h"

namespace {

constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

// The baseline: the kernels as they were (tanhf), threaded the same way.
void tanh_forward(float* out, const float* inp, std::int64_t n) {
#pragma omp parallel for if (n > (1 << 15))
    for (std::int64_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kScale * (x + kCubic * x * x * x);
        out[i] = 0.5f * x * (1.0f + std::tanh(u));
    }
}

void tanh_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
#pragma omp parallel for if (n > (1 << 15))
    for (std::int64_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kScale * (x + kCubic * x * x * x);
        const float t = std::tanh(u);
        const float du_dx = kScale * (1.0f + 3.0f * kCubic * x * x);
        const float local = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
        dinp[i] += local * dout[i];
    }
}

template <class F>
double median_ns_per_element(F&& f, std::int64_t n, int reps) {
    std::vector<double> t;
    f();  // warm: pages, threads
    for (int r = 0; r < reps; ++r) {
        const auto a = std::chrono::steady_clock::now();
        f();
        const auto b = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::nano>(b - a).count() / static_cast<double>(n));
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// The largest relative error of out against gelu in long double (sigmoid form, no cancellation),
// over elements whose true value is a normal float.
double max_rel_error(const std::vector<float>& x, const std::vector<float>& out) {
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const long double v = x[i];
        const long double u = 0.7978845608028654L * (v + 0.044715L * v * v * v);
        const long double want = v / (1.0L + std::exp(-2.0L * u));
        if (std::fabs(static_cast<double>(want)) < 1e-37) continue;
        worst = std::max(worst, static_cast<double>(std::fabs((out[i] - want) / want)));
    }
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    int reps = 15;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = std::atoi(argv[++i]);
        } else {
            std::fprintf(stderr, "usage: activation_bench [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1) {
        std::fprintf(stderr, "activation_bench: --reps must be a positive integer\n");
        return 2;
    }
    std::printf("GELU on the CPU, %d threads, median of %d; ns per element\n", omp_get_max_threads(), reps);
    std::printf("%-10s %12s %12s %8s %12s %12s %8s\n", "elements", "fwd tanh", "fwd sigmoid", "ratio",
                "bwd tanh", "bwd sigmoid", "ratio");
    // The default run's MLP activation (B 8, T 64, 4 x 128), and GPT-2's at B 8, T 1024.
    const std::int64_t sizes[] = {8 * 64 * 512, 8 * 1024 * 3072};
    std::vector<float> err_x, err_tanh, err_sigmoid;
    for (std::int64_t n : sizes) {
        std::mt19937 rng(1);
        std::normal_distribution<float> d(0.0f, 2.0f);
        std::vector<float> x(static_cast<std::size_t>(n)), g(x.size()), out(x.size()), dx(x.size(), 0.0f);
        for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = d(rng);
            g[i] = d(rng);
        }
        const double ft = median_ns_per_element([&] { tanh_forward(out.data(), x.data(), n); }, n, reps);
        if (err_x.empty()) {
            err_x = x;
            err_tanh = out;
        }
        const double fs = median_ns_per_element(
            [&] {
                napkin::cpu::gelu_forward<float>({out.data(), x.data(), n});
            },
            n, reps);
        if (err_sigmoid.empty()) err_sigmoid = out;
        const double bt = median_ns_per_element([&] { tanh_backward(dx.data(), x.data(), g.data(), n); }, n, reps);
        const double bs = median_ns_per_element(
            [&] {
                napkin::cpu::gelu_backward<float>({dx.data(), x.data(), g.data(), n});
            },
            n, reps);
        std::printf("%-10s %12.2f %12.2f %7.1fx %12.2f %12.2f %7.1fx\n", std::to_string(n).c_str(), ft, fs, ft / fs,
                    bt, bs, bt / bs);
    }
    std::printf("largest relative error of the forward, normal(0, 2) inputs: tanh form %.2g, sigmoid form %.2g\n",
                max_rel_error(err_x, err_tanh), max_rel_error(err_x, err_sigmoid));
    return 0;
}
