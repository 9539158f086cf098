// Where a Trainer keeps each parameter's model state, whatever holds it: one process (the
// model's tensors and the optimizer's moments, whole), or a rank of the ZeRO engine at stage
// 0-3 (whole, or elements [r S_u, (r + 1) S_u) of each unit, core/comm/shard_layout.h).
// Checkpoints read and write state only through this, so one loader serves every stage and
// world size. Internal to core/engine; tests through tests/engine/*checkpoint_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"
#include "core/engine/zero.h"

namespace napkin {

using StateKind = ZeroEngine::State;
inline constexpr StateKind kStateKinds[] = {StateKind::weights, StateKind::master,
                                            StateKind::first_moment, StateKind::second_moment};

// The suffix a whole-state checkpoint gives the kind after the parameter's name: "",
// ".master", ".opt.m", ".opt.v".
const char* state_suffix(StateKind kind);

// This process's part of parameter i's state of one kind: elements [first, first + count) of
// the parameter, stored back to back at `data`. `present` is false when the recipe keeps no
// such state (no master under fp32, no moments under SGD); a rank of a sharded stage may hold
// none of a parameter (count 0) and still have it present.
struct HeldState {
    bool present = false;
    DType dtype = DType::f32;
    char* data = nullptr;
    std::int64_t first = 0, count = 0;
};
HeldState held_state(Trainer& t, std::size_t param, StateKind kind);

// adamw-8bit: this process's part of the block absmax of parameter i's first or second moment,
// in blocks of kOptimizer8bitBlock elements (the ordinary optimizer's whole tensor, or at ZeRO
// 1-3 the blocks of the rank's shard, which the layout aligns to blocks). `present` false for a
// frozen parameter or another optimizer.
HeldState held_absmax(Trainer& t, std::size_t param, StateKind moment);

// Stage 3 of a fine-tuning run: this rank's part of frozen parameter i's stored tensor, from its
// shard of the unit's frozen storage: the weights (QLoRA's NF4 codes as I8 bytes, or elements of
// the working dtype) or the NF4 state (I8 bytes). `present` false outside such a run.
HeldState held_frozen(Trainer& t, std::size_t param, bool nf4_state);

// The one way checkpoints touch a HeldState's bytes (weights, masters, moments): in host memory
// on the CPU or when the ZeRO engine offloads that kind (ZeroEngine::in_host_memory), else
// through the host on the trainer's EngineDevice (whose copies wait for the work queued before
// them). The files are the same bytes either way, so a run moves between devices.
// state_on_host: the `bytes` of state `kind` at `state` readable on the host, `state` itself in
// host memory, else a copy made in `staging` (which must outlive the use).
const char* state_on_host(Trainer& t, StateKind kind, const char* state, std::size_t bytes,
                          std::vector<char>& staging);
// Writes `bytes` host bytes over the state of `kind` at `state`.
void state_from_host(Trainer& t, StateKind kind, char* state, const char* host, std::size_t bytes);

// Whether the ZeRO engine at `stage` keeps a kind whole (every rank the same) rather than
// sharded: stage 0 everything, stages 1-2 the weights.
bool kept_whole(int stage, StateKind kind);

// The optimizer's update count (Adam's bias correction), wherever it lives.
int update_count(Trainer& t);
void set_update_count(Trainer& t, int count);

// The run's options and loop state as a checkpoint saves them (data_bytes, checksum and
// tensor_count left 0): steps done, update count, data position, loss scale, good steps.
CheckpointInfo checkpoint_info_of(Trainer& t);
// Throws InputError naming PATH when the trainer's data is not what the checkpoint was trained
// on (TokenSource::fingerprint; skipped when the checkpoint has none). Call before touching state.
void check_same_data(const CheckpointInfo& info, Trainer& t, const std::string& path);
// Restores what checkpoint_info_of saved, but the options.
void restore_checkpoint_state(Trainer& t, const CheckpointInfo& info);

}  // namespace napkin
