// Training-step throughput of the CPU engine: tokens/s and model GFLOP/s for `tiny` and for
// `gpt2` at B=4, T=64, as a fraction of this machine's sgemm peak measured in the same process.
// Medians over steps after a warmup step. Never run as a test.
//   OMP_WAIT_POLICY=passive train_bench [--steps N] [--skip-gpt2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/engine/trainer.h"
#include "kernels/matmul.h"

namespace {

struct Row {
    const char* name;
    double ms, tokens_per_s, gflops, fraction;
};

Row measure(const char* preset, std::int64_t B, std::int64_t T, napkin::Precision p, int steps, double peak) {
    napkin::TrainOptions o;
    o.model = napkin::preset_or_throw(preset);
    o.plan.micro_batch = B;
    o.plan.seq_len = T;
    o.plan.precision = p;
    o.steps = steps + 1;
    napkin::Trainer trainer(o);
    trainer.step();  // warmup: first touch of every buffer
    std::vector<double> seconds;
    double flops = 0, tokens = 0;
    for (int s = 0; s < steps; ++s) {
        const napkin::StepRecord r = trainer.step();
        seconds.push_back(r.seconds);
        flops = r.model_flops;
        tokens = r.tokens;
    }
    std::sort(seconds.begin(), seconds.end());
    const double med = seconds[seconds.size() / 2];
    return {preset, med * 1e3, tokens / med, flops / med / 1e9, flops / med / peak};
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 5;
    bool gpt2 = true;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--skip-gpt2") == 0) {
            gpt2 = false;
        } else {
            std::fprintf(stderr, "usage: train_bench [--steps N] [--skip-gpt2]\n");
            return 2;
        }
    }
    if (steps <= 0) {
        std::fprintf(stderr, "train_bench: --steps: expected a positive integer\n");
        return 2;
    }
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
        std::fprintf(stderr, "train_bench: note: OMP_WAIT_POLICY is unset; run with OMP_WAIT_POLICY=passive as napkin train does\n");
    }
    const double peak = napkin::cpu::sgemm_peak_flops(1024, 5);
    std::printf("napkin CPU training step (median of %d steps after a warmup step)\n", steps);
    std::printf("sgemm peak on this machine: %.1f GFLOP/s (best of 5 1024^3 sgemm)\n\n", peak / 1e9);
    std::printf("%-28s %10s %12s %10s %10s\n", "case", "step ms", "tokens/s", "GFLOP/s", "of peak");
    std::vector<Row> rows;
    rows.push_back(measure("tiny", 8, 64, napkin::Precision::fp32, steps, peak));
    rows.back().name = "tiny B=8 T=64 fp32";
    rows.push_back(measure("tiny", 8, 64, napkin::Precision::bf16_amp, steps, peak));
    rows.back().name = "tiny B=8 T=64 bf16-amp";
    if (gpt2) {
        rows.push_back(measure("gpt2", 4, 64, napkin::Precision::fp32, steps, peak));
        rows.back().name = "gpt2 B=4 T=64 fp32";
    }
    for (const Row& r : rows) {
        std::printf("%-28s %10.1f %12.0f %10.2f %9.1f%%\n", r.name, r.ms, r.tokens_per_s, r.gflops, 100 * r.fraction);
    }
    return 0;
}
