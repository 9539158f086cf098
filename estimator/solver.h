// Inverse questions: the largest model, or the largest micro-batch, that fits the memory.
// Both search over the estimator itself (so every memory term counts, or only model states
// with ignore_activations) by doubling then bisection on integers.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "estimator/estimate.h"

namespace napkin {

// Largest integer x in [lo, limit] with fits(x), given fits(lo): doubling, then bisection;
// fits is assumed monotone. Every solver here (and the inference one, estimator/inference.h)
// searches this way.
template <class Fits>
double largest_fitting(double lo, double limit, Fits&& fits, int& evaluations) {
    double hi = lo * 2;
    while (hi <= limit && (++evaluations, fits(hi))) {
        lo = hi;
        hi *= 2;
    }
    if (hi > limit) hi = limit + 1;
    while (hi - lo > 1) {
        const double mid = std::floor((lo + hi) / 2);
        ++evaluations;
        if (fits(mid)) lo = mid;
        else hi = mid;
    }
    return lo;
}

// One configuration --solve fastest tried, with its prediction.
struct SolveCandidate {
    Precision precision = Precision::bf16_amp;
    std::int64_t micro_batch = 1;
    Checkpointing checkpointing = Checkpointing::none;
    AttentionImpl attention = AttentionImpl::flash;
    int zero = 0;
    double tokens_per_s = 0, step_seconds = 0, mfu = 0, gpu_bytes = 0;
    // --solve fastest-layout's axes (1, and G, under --solve fastest).
    int tp = 1, pp = 1, vpp = 1, dp = 1;
    std::int64_t micro_batches = 1;  // M (= G) per replica per step
};

struct SolveResult {
    double value =
        0;  // parameters, micro-batch, or tokens/s; 0 when even the smallest does not fit
    Estimate at;       // the estimate at `value` (at the smallest candidate when value is 0)
    int evaluations = 0;
    bool at_limit = false;  // `value` is the search's upper limit, which fits: the answer is >= it
    std::vector<SolveCandidate> candidates;  // --solve fastest: the best few, fastest first
    int tp = 1, pp = 1;     // solve_min_tp_pp's layout (the largest tried when nothing fits)
};

// Largest N (napkin mode: a dense model known by its size) whose estimate fits. The lecture's
// "largest model on 8 x 80 GB with fp32 AdamW" is this with ignore_activations and ZeRO-3.
SolveResult solve_max_params(const EstimateInputs& base, Estimator& est);

// Largest B for the given model and recipe, up to 2^24. UsageError with ignore_activations: the
// model states alone do not depend on B.
SolveResult solve_max_micro_batch(const EstimateInputs& base, Estimator& est);

// The highest predicted tokens/s that fits, over micro-batch x checkpointing x attention x ZeRO
// stage (0 only on one GPU) x `precisions` (the base's alone when empty): for each combination
// the micro-batches 1, 2, 4, ... up to the largest that fits, and that largest. Keeps the `keep`
// fastest. Needs the performance model (base.mfu 0 and a profile): UsageError otherwise.
SolveResult solve_fastest(const EstimateInputs& base, Estimator& est,
                          const std::vector<Precision>& precisions, int keep = 5);
// The highest predicted tokens/s that fits base.gpus GPUs at the base's global batch (B G DP
// sequences per step, kept): over T (dividing the heads, kv-heads and F, up to a node's GPUs), P
// (T P dividing the GPUs, P <= L), V in {1, 2, 4} (dividing L / P, and P dividing M, as
// Megatron-LM's interleaved schedule needs), B in 1, 2, 4, ... dividing a replica's sequences
// (M = sequences / (B DP)), checkpointing (selective only with naive attention), and ZeRO
// stage (0-3 without a pipeline, 0-1 with one: Megatron-LM's distributed optimizer; DeepSpeed
// refuses stages 2 and 3 with pipeline parallelism; 0 on one replica); sequence parallelism
// whenever T > 1. Precision, attention and the rest are the base's. Keeps the `keep` fastest.
// Needs the performance model (base.mfu 0, a profile), a shape, and base.gpus > 1.
SolveResult solve_fastest_layout(const EstimateInputs& base, Estimator& est, int keep = 5);
// `base` with a --solve fastest-layout candidate's layout and recipe. A data-parallel layout
// (T = P = 1) on a base without a data-parallel link gets its group's placement link (the node's
// inside one node, the network across; estimator/parallel.h's group_links), named in
// *link_name, as the layouts with model parallelism do: every candidate's traffic is timed.
EstimateInputs with_layout(const EstimateInputs& base, const SolveCandidate& c,
                           std::string* link_name = nullptr);

// The smallest model-parallel group T P (Megatron-LM's layout, estimator/parallel.h) whose
// estimate fits: T at most a node's GPUs and dividing the heads, kv-heads and d_ff, P at most L;
// among equal T P the larger T, tensor parallelism inside a node before pipeline parallelism
// (Narayanan et al. 2021, takeaway 1). With gpus = 1 every candidate gets its T P GPUs (one
// replica); otherwise T P must divide gpus. value = T P, 0 when no layout fits.
SolveResult solve_min_tp_pp(const EstimateInputs& base, Estimator& est);

}  // namespace napkin
