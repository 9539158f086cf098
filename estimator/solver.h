// Inverse questions: the largest model, or the largest micro-batch, that fits the memory.
// Both search over the estimator itself (so every memory term counts, or only model states
// with ignore_activations) by doubling then bisection on integers.
#pragma once

#include <cstdint>

#include "estimator/estimate.h"

namespace napkin {

struct SolveResult {
    double value = 0;  // parameters, or micro-batch; 0 when even the smallest does not fit
    Estimate at;       // the estimate at `value` (at the smallest candidate when value is 0)
    int evaluations = 0;
    bool at_limit = false;  // `value` is the search's upper limit, which fits: the answer is >= it
    int tp = 1, pp = 1;     // solve_min_tp_pp's layout (the largest tried when nothing fits)
};

// Largest N (napkin mode: a dense model known by its size) whose estimate fits. The lecture's
// "largest model on 8 x 80 GB with fp32 AdamW" is this with ignore_activations and ZeRO-3.
SolveResult solve_max_params(const EstimateInputs& base, Estimator& est);

// Largest B for the given model and recipe, up to 2^24. UsageError with ignore_activations: the
// model states alone do not depend on B.
SolveResult solve_max_micro_batch(const EstimateInputs& base, Estimator& est);

// The smallest model-parallel group T P (Megatron-LM's layout, estimator/parallel.h) whose
// estimate fits: T at most a node's GPUs and dividing the heads, kv-heads and d_ff, P at most L;
// among equal T P the larger T, tensor parallelism inside a node before pipeline parallelism
// (Narayanan et al. 2021, takeaway 1). With gpus = 1 every candidate gets its T P GPUs (one
// replica); otherwise T P must divide gpus. value = T P, 0 when no layout fits.
SolveResult solve_min_tp_pp(const EstimateInputs& base, Estimator& est);

}  // namespace napkin
