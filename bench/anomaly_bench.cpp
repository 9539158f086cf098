// The cost of napkin train --detect-anomaly on the CPU engine: two trainers of the same run, one
// checking every op's outputs and gradients, one not, their steps alternated in one process (so
// a busy neighbour slows both alike); median step time after a warmup step, and the ratio.
// Never run as a test.
//   OMP_WAIT_POLICY=passive anomaly_bench [--steps N] [--skip-gpt2]
// The napkin math: the checks read each tensor an op writes once more, in fp32 storage about
// 4 (2 x activations kept + parameters) bytes per step (every kept activation, the gradient of
// each, and every parameter gradient), against a step of 6N + attention FLOPs per token. On a
// GPU the same reads run as one small reduction per tensor with no host sync but one per
// micro-batch (docs/ANOMALY.md has the command for a GPU session).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/engine/trainer.h"

namespace {

struct Row {
    std::string name;
    double off_ms = 0, on_ms = 0, checked_mb = 0, gflop = 0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

Row measure(const char* preset, std::int64_t B, std::int64_t T, int steps) {
    napkin::TrainOptions o;
    o.model = napkin::preset_or_throw(preset);
    o.plan.micro_batch = B;
    o.plan.seq_len = T;
    o.plan.precision = napkin::Precision::fp32;
    o.steps = steps + 1;
    napkin::TrainOptions checked = o;
    checked.plan.detect_anomaly = true;
    napkin::Trainer off(o), on(checked);
    off.step();  // warmup: first touch of every buffer
    on.step();
    std::vector<double> off_s, on_s;
    Row row;
    for (int s = 0; s < steps; ++s) {
        off_s.push_back(off.step().seconds);
        const napkin::StepRecord r = on.step();
        on_s.push_back(r.seconds);
        row.gflop = r.model_flops / 1e9;
    }
    row.off_ms = median(off_s) * 1e3;
    row.on_ms = median(on_s) * 1e3;
    const napkin::PlanTotals t = napkin::plan_totals(on.model().plan());
    std::int64_t params = 0;
    for (const napkin::ParamSlot& p : on.model().params())
        params += p.numel;
    row.checked_mb =
        (2.0 * static_cast<double>(t.kept_bytes) + 4.0 * static_cast<double>(params)) / 1e6;
    row.name = std::string(preset) + " B=" + std::to_string(B) + " T=" + std::to_string(T);
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    int steps = 7;
    bool gpt2 = true;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--skip-gpt2") == 0)
            gpt2 = false;
        else {
            std::fprintf(stderr, "usage: anomaly_bench [--steps N] [--skip-gpt2]\n");
            return 2;
        }
    }
    std::vector<Row> rows;
    rows.push_back(measure("tiny", 8, 64, steps));
    if (gpt2) rows.push_back(measure("gpt2", 4, 64, steps));
    std::printf(
        "| run (fp32, AdamW) | step ms off | step ms --detect-anomaly | ratio | MB checked/step | "
        "model GFLOP/step |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
        std::printf("| %s | %.1f | %.1f | %.3f | %.1f | %.1f |\n", r.name.c_str(), r.off_ms,
                    r.on_ms, r.on_ms / r.off_ms, r.checked_mb, r.gflop);
    }
    return 0;
}
