// The estimator's prediction for a Trainer's run, for the engine's memory tests: napkin train's
// own inputs for one process on the CPU (cli/train_prediction.h, compiled into the test), so a
// test holds a step's measured peaks against exactly what report.json would.
#pragma once

#include <cstddef>

#include "cli/train_prediction.h"
#include "core/engine/trainer.h"
#include "estimator/estimate.h"

namespace napkin::test {

inline Estimate cpu_estimate(const TrainOptions& o) {
    return Estimator{}.run(cli::prediction_inputs(o, 1, false, 1e12));  // any peak: memory only
}

// A step's measured peak of one category, in bytes.
inline double peak_of(const StepRecord& r, MemCategory c) {
    return static_cast<double>(r.peak_bytes[static_cast<std::size_t>(c)]);
}

}  // namespace napkin::test
