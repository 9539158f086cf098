// Full fine-tuning against LoRA and QLoRA on the CPU engine, in one process: step time (median
// over steps after a warmup step), tokens/s and the ratio to the full run of the same model, the
// plan's model FLOPs per step beside the napkin 6N and 4N + 6m, and the memory the run holds at
// its peak, measured and predicted by the estimator. Never run as a test.
//   OMP_WAIT_POLICY=passive finetune_bench [--steps N] [--rank R] [--skip-gpt2]
// The napkin math it checks: LoRA skips the frozen GEMMs' weight gradients (a third of a dense
// step's matmul FLOPs: 6N -> 4N + 6m) and their optimizer state; QLoRA stores the frozen block
// linears in 4.127 bits and pays a dequantization per GEMM, forward and backward.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/engine/trainer.h"
#include "estimator/estimate.h"

namespace {

using napkin::Finetune;

struct Row {
    std::string name;
    double ms = 0, tokens_per_s = 0, model_gflop = 0, napkin_gflop = 0;
    double measured_mb = 0, predicted_mb = 0;
};

Row measure(const char* preset, std::int64_t B, std::int64_t T, Finetune ft, std::int64_t rank,
            int steps) {
    napkin::TrainOptions o;
    o.model = napkin::preset_or_throw(preset);
    o.plan.micro_batch = B;
    o.plan.seq_len = T;
    o.plan.precision = napkin::Precision::fp32;
    o.plan.finetune = ft;
    o.plan.lora_rank = ft == Finetune::full ? 0 : rank;
    o.plan.lora_alpha = static_cast<float>(rank);
    o.steps = steps + 1;
    napkin::Trainer trainer(o);
    trainer.step();  // warmup: first touch of every buffer
    std::vector<double> seconds;
    Row row;
    std::int64_t peak = 0;
    for (int s = 0; s < steps; ++s) {
        const napkin::StepRecord r = trainer.step();
        seconds.push_back(r.seconds);
        row.model_gflop = r.model_flops / 1e9;
        row.tokens_per_s = r.tokens;
        peak = std::max(peak, r.peak_total_bytes);
    }
    std::sort(seconds.begin(), seconds.end());
    const double med = seconds[seconds.size() / 2];
    row.ms = med * 1e3;
    row.tokens_per_s /= med;
    row.measured_mb = static_cast<double>(peak) / 1e6;

    napkin::EstimateInputs ei;
    ei.model = o.model;
    ei.seq_len = T;
    ei.micro_batch = B;
    ei.precision = o.plan.precision;
    ei.finetune = ft;
    ei.lora_rank = o.plan.lora_rank > 0 ? o.plan.lora_rank : ei.lora_rank;
    ei.peak_flops_per_s = 1e12;
    ei.gpu_memory_bytes = 1e15;
    ei.engine = napkin::EstimateInputs::Engine::cpu;
    const napkin::Estimate e = napkin::Estimator{}.run(ei);
    row.predicted_mb = e.gpu.total() / 1e6;
    const double per_token = ft == Finetune::full ? e.flops_6n_per_token : e.flops_adapters_per_token;
    row.napkin_gflop = (per_token + e.flops_attention_per_token) * static_cast<double>(B * T) / 1e9;
    row.name = std::string(preset) + " " +
               (ft == Finetune::full ? std::string("full")
                                     : std::string(napkin::enum_name(napkin::kFinetuneNames, ft)) +
                                           " r" + std::to_string(rank));
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 5;
    std::int64_t rank = 16;
    bool gpt2 = true;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = std::atoi(argv[++i]);
        } else if (std::strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            rank = std::atoll(argv[++i]);
        } else if (std::strcmp(argv[i], "--skip-gpt2") == 0) {
            gpt2 = false;
        } else {
            std::fprintf(stderr, "usage: finetune_bench [--steps N] [--rank R] [--skip-gpt2]\n");
            return 2;
        }
    }
    if (steps <= 0 || rank <= 0) {
        std::fprintf(stderr, "finetune_bench: --steps and --rank: expected positive integers\n");
        return 2;
    }
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
        std::fprintf(stderr, "finetune_bench: note: OMP_WAIT_POLICY is unset; run with "
                             "OMP_WAIT_POLICY=passive as napkin train does\n");
    }
    std::printf("napkin CPU fine-tuning step, fp32, AdamW (median of %d steps after a warmup step)\n\n",
                steps);
    std::printf("%-22s %9s %11s %8s %13s %13s %17s\n", "case", "step ms", "tokens/s", "vs full",
                "model GFLOP", "napkin GFLOP", "peak MB meas/pred");
    struct Shape {
        const char* preset;
        std::int64_t B, T;
    };
    std::vector<Shape> shapes = {{"tiny", 8, 64}};
    if (gpt2) shapes.push_back({"gpt2", 4, 64});
    for (const Shape& sh : shapes) {
        double full_tps = 0;
        for (const Finetune ft : {Finetune::full, Finetune::lora, Finetune::qlora}) {
            const Row r = measure(sh.preset, sh.B, sh.T, ft, rank, steps);
            if (ft == Finetune::full) full_tps = r.tokens_per_s;
            std::printf("%-22s %9.1f %11.0f %7.2fx %13.3f %13.3f %8.1f/%8.1f\n", r.name.c_str(), r.ms,
                        r.tokens_per_s, r.tokens_per_s / full_tps, r.model_gflop, r.napkin_gflop,
                        r.measured_mb, r.predicted_mb);
        }
    }
    std::printf("\nnapkin GFLOP: (6N or 4N + 6m) + attention 6LTC, per step; model GFLOP: the op plan's.\n");
    return 0;
}
