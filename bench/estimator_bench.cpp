// Estimator speed: one estimate, a sweep over configurations on one core, and the CLI's wall
// time. Prints a table of medians over repetitions; never run as a test.
//   estimator_bench [--napkin PATH] [--reps N]
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "estimator/estimate.h"
#include "estimator/hardware.h"

namespace {

using Clock = std::chrono::steady_clock;
using napkin::Estimate;
using napkin::EstimateInputs;
using napkin::Estimator;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

EstimateInputs base_inputs(const char* preset, std::int64_t T) {
    EstimateInputs in;
    in.model = napkin::preset_or_throw(preset);
    in.seq_len = T;
    in.peak_flops_per_s = 989.5e12;
    in.gpu_memory_bytes = 80e9;
    in.cpu_memory_bytes = 256e9;
    return in;
}

// Median microseconds per estimate over `reps` batches of 10,000 calls.
double single_estimate_us(const EstimateInputs& in, int reps) {
    Estimator est;
    Estimate e;
    volatile double sink = 0;
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (int i = 0; i < 10000; ++i) {
            est.run(in, e);
            sink = sink + e.gpu.total();
        }
        us.push_back(seconds_since(t0) / 10000 * 1e6);
    }
    return median(us);
}

// A grid over micro-batch, sequence length, ZeRO stage, recipe and checkpointing: configs/s.
double sweep_configs_per_s(int reps, long long& configs_out) {
    const napkin::Precision precisions[] = {napkin::Precision::fp32, napkin::Precision::bf16_amp,
                                            napkin::Precision::fp8_amp};
    const napkin::Checkpointing ckpts[] = {napkin::Checkpointing::none, napkin::Checkpointing::selective,
                                           napkin::Checkpointing::full};
    const char* models[] = {"gpt2", "llama2-7b", "llama3-70b"};
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
        Estimator est;
        Estimate e;
        long long n = 0, fits = 0;
        const auto t0 = Clock::now();
        for (const char* m : models) {
            EstimateInputs in = base_inputs(m, 1024);
            for (std::int64_t B = 1; B <= 32; ++B) {
                for (std::int64_t T : {256, 512, 1024}) {
                    for (int zero = 0; zero <= 3; ++zero) {
                        for (auto p : precisions) {
                            for (auto ck : ckpts) {
                                for (int W : {1, 8, 64, 512}) {
                                    in.micro_batch = B;
                                    in.seq_len = T;
                                    in.zero = zero;
                                    in.precision = p;
                                    in.checkpointing = ck;
                                    in.gpus = W;
                                    est.run(in, e);
                                    fits += e.fits();
                                    ++n;
                                }
                            }
                        }
                    }
                }
            }
        }
        rates.push_back(static_cast<double>(n) / seconds_since(t0));
        configs_out = n;
        if (fits < 0) std::puts("");  // keep `fits` alive
    }
    return median(rates);
}

double cli_wall_ms(const std::string& napkin_path, int reps) {
    std::vector<double> ms;
    const std::string cmd = napkin_path + " estimate --model llama3-70b --gpus 64 --zero 3 >/dev/null";
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        const int status = std::system(cmd.c_str());
        ms.push_back(seconds_since(t0) * 1e3);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            std::fprintf(stderr, "estimator_bench: '%s' failed\n", cmd.c_str());
            return -1;
        }
    }
    return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
    std::string napkin_path;
#ifdef NAPKIN_BINARY
    napkin_path = NAPKIN_BINARY;
#endif
    int reps = 7;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--napkin") == 0 && i + 1 < argc) {
            napkin_path = argv[++i];
        } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = std::atoi(argv[++i]);
            if (reps <= 0) {
                std::fprintf(stderr, "estimator_bench: --reps: expected a positive integer\n");
                return 2;
            }
        } else {
            std::fprintf(stderr, "usage: estimator_bench [--napkin PATH] [--reps N]\n");
            return 2;
        }
    }

    std::printf("napkin estimator benchmark (median of %d repetitions, one thread)\n\n", reps);
    std::printf("%-44s %14s\n", "case", "median");
    std::printf("%-44s %11.3f us\n", "one estimate: gpt2, T=1024",
                single_estimate_us(base_inputs("gpt2", 1024), reps));
    std::printf("%-44s %11.3f us\n", "one estimate: llama3-70b, T=8192",
                single_estimate_us(base_inputs("llama3-70b", 8192), reps));
    long long n = 0;
    const double rate = sweep_configs_per_s(reps, n);
    std::printf("%-44s %11.2f M/s  (%lld configs per sweep; target >= 1 M/s)\n", "sweep: configs per second", rate / 1e6,
                n);
    if (!napkin_path.empty()) {
        const double ms = cli_wall_ms(napkin_path, reps);
        if (ms >= 0) std::printf("%-44s %11.2f ms  (target < 20 ms)\n", "napkin estimate, wall (fork + exec)", ms);
    }
    return 0;
}
