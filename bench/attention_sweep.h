// attention_bench --sweep: the mma.sync flash attention's candidate tiles
// (bench/attention_fa2_candidates.h) timed against the engine's at one shape, forward and
// backward, so that one GPU session picks each (HD, direction)'s tiles (docs/CUDA.md "Flash
// attention's tiles by measurement").
#pragma once

#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>

namespace napkin::bench {

struct SweepShape {
    const char* name;
    const char* what;
    std::int64_t B, T;
    int NH, KVH;
    std::int64_t HD;
};

// The table's header (once, before the shapes).
void print_sweep_header();

// Every candidate of the shape's HD, forward then backward: each checked against the engine's
// tiles on the same inputs (largest difference of out, or of dqkv from zeros; above 2% of the
// engine's largest |value| it is WRONG and never picked), then its median ms over `reps` calls
// after `warmup` (a backward's, each pass alone too); one printed row per candidate, the fastest
// of each direction marked, then the fastest pass 1 and pass 2 combined (into
// *best_backward_passes: the names, their ms and the engine's; null if none ran). A candidate
// that throws gets a row with its error and the sweep goes on, unless the device is lost (a
// fault's sticky error: into *lost, and the rows so far are returned). Returns the rows as JSON.
nlohmann::json sweep_shape(const SweepShape& s, int warmup, int reps, cudaStream_t stream,
                           std::mt19937& rng, nlohmann::json* best_backward_passes,
                           std::string* lost);

}  // namespace napkin::bench
