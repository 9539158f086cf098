// Sharded checkpoints of data-parallel runs (docs/ZERO.md, "Checkpoints"; docs/FORMATS.md).
// Every rank writes its own part of the model state as its ZeRO stage keeps it; once all have
// (a barrier), rank 0 writes the manifest that names them:
//   RUN_DIR/checkpoints/step-00000004/rank<r>.safetensors  napkin-checkpoint-shard/1
//   RUN_DIR/checkpoints/step-00000004/manifest.json        napkin-checkpoint-manifest/1
// A checkpoint is complete once its manifest exists (written last, to a temporary name, fsynced
// and renamed); a step folder without one (a rank died while writing) is ignored.
//
// A shard (checkpoint_file.h's container): the run's options and loop state in the metadata
// with "rank", "world" and "zero"; per unit u of core/comm/shard_layout.h and per state it keeps,
// one 1-D tensor "<unit>.weights", "<unit>.master", "<unit>.opt.m", "<unit>.opt.v": this rank's
// shard of S_u elements where the stage shards that state; where it keeps it whole (stage 0:
// all; stages 1-2: the weights) every rank holds the same bytes, and rank 0's file alone holds
// the whole padded unit (P_u elements, zero padding included). At stage 0 the other ranks' files
// hold the metadata alone: one copy of the model state on disk, not W.
// Resuming needs the same world size and stage (each rank reads its own shard, and rank 0's);
// for any other, consolidate_checkpoint() writes one whole-state checkpoint (checkpoint.h) that
// a run of any world size and stage can load. Tests: tests/engine/zero_checkpoint_test.cpp (world
// size 1, every stage), tests/comm/zero_mpi_test.cpp (mpirun, a killed rank).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"

namespace napkin {

inline constexpr const char* kShardFormat = "napkin-checkpoint-shard/1";
inline constexpr const char* kManifestFormat = "napkin-checkpoint-manifest/1";
inline constexpr const char* kManifestFileName = "manifest.json";
// Under RUN_DIR: one folder per checkpoint, step-<8 digits>.
inline constexpr const char* kShardedCheckpointsDir = "checkpoints";

struct ManifestShard {
    int rank = 0;
    std::string file;              // in the step folder: "rank<r>.safetensors"
    std::uint64_t file_bytes = 0;  // the whole file
    std::uint64_t checksum = 0;    // FNV-1a 64 of its data section (as its header records)
};

struct Manifest {
    std::filesystem::path dir;  // the step folder
    int step = 0;               // steps done when it was written
    int world = 1;
    int zero = 0;
    std::uint64_t options_hash = 0;     // FNV-1a 64 of checkpoint_options_text() of the run
    std::vector<ManifestShard> shards;  // by rank
};

// Collective: every rank of the trainer's communicator calls it between steps. Writes this
// rank's shard of step t.steps_done(), waits for all, and rank 0 writes the manifest and then
// removes the other step folders under RUN_DIR/checkpoints (older checkpoints and leftovers of
// earlier runs). Returns the step folder. InputError naming the file when one cannot be written.
std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& run_dir, Trainer& t);

// The step folder save_sharded_checkpoint writes `step` into: RUN_DIR/checkpoints/step-<8 digits>.
std::filesystem::path sharded_checkpoint_dir(const std::filesystem::path& run_dir, int step);

// The last complete checkpoint under RUN_DIR/checkpoints (highest step with a manifest), or none.
// InputError naming the manifest when it is malformed.
std::optional<Manifest> last_complete_checkpoint(const std::filesystem::path& run_dir);
Manifest read_manifest(const std::filesystem::path& manifest_path);

// The options and loop state rank `rank`'s shard was written with (for --resume to build the
// Trainer), after checking it against the manifest.
CheckpointInfo read_shard_info(const Manifest& m, int rank);

// UsageError unless a run of `world` ranks at ZeRO stage `zero` can resume from m: one line
// naming both world sizes and stages and pointing at `napkin ckpt consolidate`.
void check_resumable(const Manifest& m, int world, int zero);

// Restores this rank's state from its shard of m (and the states kept whole from rank 0's): the
// same world size and stage, and a trainer built with the shard's options. Every check
// (manifest, size, checksum, tensors) runs before the trainer is touched; each failure is an
// InputError naming the file.
void load_sharded_checkpoint(const Manifest& m, Trainer& t);

// Reads every shard of m (checking each against the manifest and its checksum) and writes one
// whole-state checkpoint (checkpoint.h's format) to out_path, atomically. Its options are those
// of one process running the same global batch: grad_accum = world size x the ranks' G. Returns
// what was written.
CheckpointInfo consolidate_checkpoint(const Manifest& m, const std::string& out_path);

}  // namespace napkin
