// The estimator's prediction for a `napkin train` run, built from the run's own options: what
// report.json's "predicted" holds, and the peak an out-of-memory error is held against.
#pragma once

#include <string>

#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "estimator/estimate.h"

namespace napkin::cli {

// The estimator's inputs for exactly this run, one "GPU" being this process; `peak` is the
// FLOP/s that MFU and the times divide by.
EstimateInputs estimate_inputs(const TrainOptions& o, const Communicator& comm, double peak);

// What to add to an out-of-memory error: the run's predicted peak per device and the ways to
// lower it ("; the estimator predicts a peak of 81.20 GB per GPU for this run ...").
std::string out_of_memory_hint(const TrainOptions& o, const Communicator& comm);

}  // namespace napkin::cli
