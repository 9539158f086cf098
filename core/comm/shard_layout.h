// How the data-parallel engine (core/engine/zero.h) splits a model's parameters into units and
// shards, written once so that the estimator (estimator/communication.h) predicts exactly the
// bytes the engine allocates and communicates. Pure arithmetic: no MPI, no allocation beyond
// the description itself. docs/ZERO.md derives every number.
//
// Units (FSDP's "flat parameters"): the embeddings (wte, wpe), each block h.<l>, and the head
// (ln_f and, untied, lm_head), in param_tensors() order. A unit's parameters lie back to back
// in one flat buffer of n_u elements, padded with zeros to P_u = ceil(n_u / W) * W so that it
// splits into W equal shards of S_u = P_u / W; rank r owns elements [r S_u, (r + 1) S_u).
// Collectives always run over whole padded units, so every rank sends and receives the same
// number of bytes.
//
// Under ZeRO-3 a unit is all-gathered each time the engine enters a region that reads it, per
// micro-batch: a block twice (forward; backward with any recomputation), the embeddings twice
// (embedding forward and backward) plus once more when the head is tied to wte (the fused
// head forward+backward), the head once (its forward and backward run fused).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace napkin {

struct ShardUnit {
    std::string name;                 // "embedding", "h.3", "head"
    std::vector<std::size_t> params;  // indices into param_tensors()
    std::int64_t numel = 0;           // n_u
    std::int64_t padded = 0;          // P_u = ceil(n_u / W) * W
    std::int64_t shard = 0;           // S_u = P_u / W
    int gathers_per_micro_batch = 0;  // ZeRO-3 all-gathers of this unit per micro-batch
};

struct ShardLayout {
    int world = 1;
    std::vector<ShardUnit> units;
    std::vector<int> param_unit;             // per parameter: its unit
    std::vector<std::int64_t> param_offset;  // per parameter: its first element in the unit
    std::int64_t numel() const;              // sum n_u (= count_params().allocated)
    std::int64_t padded() const;             // sum P_u
    std::int64_t shard() const;              // sum S_u: what one rank keeps of a sharded state
    std::int64_t gathered_per_micro_batch() const;  // ZeRO-3: sum g_u P_u
    std::int64_t max_padded() const;                // the largest unit
};

// The engine's layout for `cfg` over `world` ranks. Throws UsageError when world < 1.
ShardLayout shard_layout(const ModelConfig& cfg, int world);

// A model known only by its parameter count (napkin estimate --params): one unit of n elements
// gathered twice per micro-batch, the ZeRO paper's idealization.
ShardLayout shard_layout_flat(std::int64_t numel, int world);

}  // namespace napkin
