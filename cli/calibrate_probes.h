// napkin calibrate's probes and what it makes of them: short training runs of the engine itself
// over a designed set of one-layer GPT shapes (widths, micro-batches, sequence lengths, recipes,
// both attentions), each op timed inside its op range (on a GPU, its kernels' device time), and
// every op turned into a point of the device profile's tables (estimator/device_profile.h): a
// GEMM op's FLOPs over its time at its (M, N, K), attention's at its (T, HD, B NH), the
// streaming ops' bytes over their time at their bytes. The tables then hold what the engine's
// ops achieve, memsets and casts included, which is what napkin train measures per op.
// Pure: measurements in, tables out (tested through napkin calibrate --quick,
// tests/cli/calibrate_cli_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/model_config.h"
#include "core/op_plan.h"
#include "core/recipe.h"
#include "estimator/device_profile.h"

namespace napkin::cli {

// One probe: a one-layer GPT-2-like model of width C with NH heads and vocabulary V, trained at
// micro-batch B and sequence length T under a recipe.
struct Probe {
    std::int64_t C = 128;
    int NH = 4;
    std::int64_t V = 256, B = 8, T = 64;
    Precision precision = Precision::fp32;
    AttentionImpl attention = AttentionImpl::flash;
    std::string label() const;  // "C=256 NH=4 V=2048 B=4 T=128 bf16-amp flash"
};

// The probes for a device and recipes: on a CPU widths 64-768 at 128-2048 tokens per
// micro-batch (about two minutes on two cores for fp32 and bf16-amp), on a GPU widths 256-2048
// at 2048-16384 tokens; `quick` keeps two or three small ones (tests, a GPU session's smoke run).
std::vector<Probe> calibration_probes(DeviceKind device, const std::vector<Precision>& precisions,
                                      bool quick);

ModelConfig probe_model(const Probe& p);
PlanInputs probe_plan_inputs(const Probe& p);

// One probe's measurement: each op range's calls and seconds per step (the median over the
// steps timed), and the step's seconds.
struct OpMeasure {
    double calls = 0, seconds = 0;
};
struct ProbeMeasure {
    std::map<std::string, OpMeasure> ops;  // "attn.qkv backward" -> per step
    double step_seconds = 0;
    double trainable_elements = 0;  // what the optimizer steps
};

// Collects the probes' points, then builds a compute section from them: points measured more
// than once (a GEMM shape two probes share) are merged by their geometric mean, and the
// overheads are the least-squares fit of each step's time outside its op ranges against its
// op calls (per step and per op call).
class SectionBuilder {
public:
    void add(const OpPlan& plan, const ProbeMeasure& m);
    ComputeSection build(int threads) const;

private:
    void gemm(DType dtype, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k,
              double flops, double s);
    void stream(StreamOp op, DType dtype, double bytes, double seconds);
    void add_block(const OpPlan& plan, const ProbeMeasure& m);

    // Keyed by their coordinates; values: log rates measured.
    std::map<std::tuple<DType, GemmPass, std::int64_t, std::int64_t, std::int64_t>,
             std::vector<double>>
        gemm_;
    std::map<std::tuple<AttentionImpl, DType, Direction, std::int64_t, std::int64_t, std::int64_t>,
             std::vector<double>>
        attention_;
    std::map<std::tuple<StreamOp, DType, double>, std::vector<double>> stream_;
    std::vector<std::pair<double, double>> residuals_;  // (op calls, seconds outside op ranges)
};

}  // namespace napkin::cli
