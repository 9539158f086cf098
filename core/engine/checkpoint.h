// Training checkpoints as safetensors files (docs/CHECKPOINTS.md): everything a Trainer needs
// to go on as if it had never stopped, bit for bit.
//   8 bytes   N, little-endian u64
//   N bytes   JSON header, space-padded so the data starts 8-byte aligned:
//             {"__metadata__": {string: string}, name: {"dtype", "shape", "data_offsets"}, ...}
//   the rest  the data section: tensor bytes back to back, 4-byte types first, then 2-byte
// Tensors, per parameter (Gpt::params() order, shapes of param_tensors()):
//   "<name>"         working weights, the engine's storage dtype (F32, BF16 or F16)
//   "<name>.master"  fp32 master copy (mixed precision only)
//   "<name>.opt.m"   optimizer first moment, "<name>.opt.v" second (where the optimizer keeps them)
// Metadata: the run's options (model config JSON, recipe, optimizer hyperparameters), the loop
// state (step, update count, data position, loss scale) and an FNV-1a 64 checksum over the
// data section with its size (the container: checkpoint_file.h).
// The same file serves every way of training: load_checkpoint() restores it into one process or
// into a rank of a ZeRO run of any stage and world size (each rank taking the elements it keeps),
// and zero_checkpoint.h's consolidate_checkpoint() writes one from a sharded checkpoint. Its
// options describe one process: W ranks resuming it run grad_accum / W micro-batches each.
// Tests: tests/engine/checkpoint_test.cpp, tests/engine/zero_checkpoint_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/engine/trainer.h"

namespace napkin {

inline constexpr const char* kCheckpointFormat = "napkin-checkpoint/1";
// The name napkin train gives the checkpoint inside a run folder.
inline constexpr const char* kCheckpointFileName = "checkpoint.safetensors";

// What the header says, without the tensors.
struct CheckpointInfo {
    TrainOptions options;  // the saved run's options: build a Trainer from them to resume
    int steps_done = 0;
    int update_count = 0;  // the optimizer's (Adam's bias correction)
    std::uint64_t data_position = 0;
    std::string data_fingerprint;  // TokenSource::fingerprint(); "" in earlier checkpoints
    float loss_scale = 1;
    int good_steps = 0;
    std::uint64_t data_bytes = 0;  // size of the data section
    std::uint64_t checksum = 0;    // FNV-1a 64 of the data section
    std::size_t tensor_count = 0;
};

// Writes PATH durably (core/durable_file.h: a temporary of a unique name, fsync, rename over
// PATH, fsync the folder): PATH is either the old file or the whole new one, never half-written.
// Throws InputError naming PATH when it cannot write (the temporary file is removed).
void save_checkpoint(const std::string& path, Trainer& t);

// Restores weights, master copies, optimizer moments and update count, the data position and
// the loop state (steps done, loss scale, good steps), into a trainer of one process or of any
// ZeRO stage (the elements this rank keeps). Every check runs before any state is
// touched; each failure is an InputError naming PATH: missing or unreadable file, too short,
// header not JSON, not a napkin checkpoint, truncated, checksum mismatch (corrupt), a model
// config, precision or optimizer other than the trainer's (naming what differs), a tensor
// missing, unexpected, or of the wrong dtype or shape. Batch size, sequence length and the
// other options are the trainer's own: resuming bit for bit needs those of
// read_checkpoint_info().options.
void load_checkpoint(const std::string& path, Trainer& t);

// Reads and validates the header only (not the checksum, which needs the whole file): for
// `napkin train --resume`, which builds the Trainer from the checkpoint's own options.
CheckpointInfo read_checkpoint_info(const std::string& path);

// 64-bit FNV-1a, continuing from `hash` (the offset basis for a fresh hash).
inline constexpr std::uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;
std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t hash = kFnv1a64Basis);

}  // namespace napkin
