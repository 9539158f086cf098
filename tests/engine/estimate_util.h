// The estimator's prediction for a Trainer's run, for the engine's memory tests: the inputs that
// `napkin train` gives it for one process on the CPU (cli/train_prediction.cpp), so a test holds a
// step's measured peaks against exactly what the report would.
#pragma once

#include <cstddef>

#include "core/engine/trainer.h"
#include "estimator/estimate.h"

namespace napkin::test {

inline Estimate cpu_estimate(const TrainOptions& o) {
    EstimateInputs ei;
    ei.model = o.model;
    ei.seq_len = o.plan.seq_len;
    ei.micro_batch = o.plan.micro_batch;
    ei.precision = o.plan.precision;
    ei.optimizer = o.plan.optimizer;
    ei.checkpointing = o.plan.checkpointing;
    ei.attention = o.plan.attention;
    ei.finetune = o.plan.finetune;
    if (o.plan.finetune != Finetune::full) ei.lora_rank = o.plan.lora_rank;
    ei.peak_flops_per_s = 1e12;  // any: the tests compare memory
    ei.gpu_memory_bytes = 1e12;
    ei.engine = EstimateInputs::Engine::cpu;
    return Estimator{}.run(ei);
}

// A step's measured peak of one category, in bytes.
inline double peak_of(const StepRecord& r, MemCategory c) {
    return static_cast<double>(r.peak_bytes[static_cast<std::size_t>(c)]);
}

}  // namespace napkin::test
