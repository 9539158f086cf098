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
#include "core/recipe.h"

namespace napkin {

struct ShardUnit {
    std::string name;                 // "embedding", "h.3", "head"
    std::vector<std::size_t> params;  // indices into param_tensors()
    std::int64_t numel = 0;           // n_u: the parameters' elements (alignment gaps not included)
    std::int64_t padded = 0;          // P_u = ceil(n_u / W) * W
    std::int64_t shard = 0;           // S_u = P_u / W
    int gathers_per_micro_batch = 0;  // ZeRO-3 all-gathers of this unit per micro-batch
};

struct ShardLayout {
    int world = 1;
    std::vector<ShardUnit> units;
    std::vector<int> param_unit;             // per parameter: its unit (-1: frozen, in no unit)
    std::vector<std::int64_t> param_offset;  // per parameter: its first element in the unit
    std::vector<std::int64_t> param_numel;   // per parameter: its elements
    std::int64_t numel() const;              // sum n_u (= count_params().allocated)
    std::int64_t padded() const;             // sum P_u
    std::int64_t shard() const;              // sum S_u: what one rank keeps of a sharded state
    std::int64_t gathered_per_micro_batch() const;  // ZeRO-3: sum g_u P_u
    std::int64_t max_padded() const;                // the largest unit
};

// The engine's layout for `cfg` over `world` ranks. Throws UsageError when world < 1.
// With lora_rank > 0 (fine-tuning with LoRA/QLoRA): param_tensors(cfg, lora_rank)'s list, whose
// frozen base is replicated on every rank and never communicated, so the units hold the trained
// adapters alone: block l's unit "h.<l>" its eight (four linears' A and B), the embedding and
// head units none (numel 0, no collectives, gathers_per_micro_batch 0). A frozen parameter has
// param_unit -1 and param_offset -1.
//
// `align` > 1 (adamw-8bit: kOptimizer8bitBlock, shard_alignment()): every parameter starts at a
// multiple of `align` elements of its unit and every shard holds a multiple of `align`, so each
// 8-bit state block (its absmax) lies whole in one rank's shard, the blocks of one process's
// optimizer; the gaps are zeros like the padding (P_u - n_u counts both).
ShardLayout shard_layout(const ModelConfig& cfg, int world, std::int64_t lora_rank = 0,
                         std::int64_t align = 1);

// The alignment an optimizer's states need: kOptimizer8bitBlock for adamw-8bit, else 1.
std::int64_t shard_alignment(OptimizerKind optimizer);

// Fine-tuning under ZeRO-3 (FSDP + QLoRA, Answer.AI 2024): the frozen base is sharded too. Each
// unit's frozen tensors lie in flat storage of the working dtype (bitsandbytes' quant_storage:
// NF4 bytes packed into 16-bit elements so that FSDP can shard them), in two groups: group 0
// the NF4 codes and states of QLoRA's block linears, group 1 the tensors kept in the working
// dtype (all of them under LoRA). Each tensor ("blob") starts at a multiple of
// kFrozenBlobAlign bytes (the NF4 state's fp32 steps are read in place); a group of B bytes is
// E = ceil(B / element) elements padded to P = ceil(E / W) W and split into W shards of S = P /
// W, gathered whole by every region that reads its unit (gathers_per_micro_batch of the full
// model's unit), as a trained unit's weights are.
inline constexpr std::uint64_t kFrozenBlobAlign = 16;

struct FrozenBlob {
    std::size_t param = 0;     // index into param_tensors(cfg, lora_rank)
    bool nf4_state = false;    // the NF4 state (else the weight: NF4 codes or working dtype)
    int group = 1;             // 0: NF4, 1: working dtype
    std::uint64_t offset = 0;  // bytes, within the group's storage
    std::uint64_t bytes = 0;
};

struct FrozenGroup {
    std::uint64_t bytes = 0;  // B: the blobs and their alignment
    std::int64_t padded = 0;  // P elements of the working dtype
    std::int64_t shard = 0;   // S = P / W
};

struct FrozenUnit {
    FrozenGroup groups[2];
    std::vector<FrozenBlob> blobs;
    int gathers_per_micro_batch = 0;  // the full model's unit's (ShardUnit)
};

// Per unit of shard_layout(cfg, world, lora_rank), its frozen storage; `element_bytes` the
// working dtype's size. Throws UsageError when world < 1 or lora_rank < 1.
std::vector<FrozenUnit> frozen_layout(const ModelConfig& cfg, int world, std::int64_t lora_rank,
                                      bool qlora, std::uint64_t element_bytes);

// A model known only by its parameter count (napkin estimate --params): one unit of n elements
// gathered twice per micro-batch, the ZeRO paper's idealization.
ShardLayout shard_layout_flat(std::int64_t numel, int world);

}  // namespace napkin
