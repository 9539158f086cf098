// napkin train's checkpoints: where --resume continues from, and what the run writes. One
// process writes RUN_DIR/checkpoint.safetensors (core/engine/checkpoint.h); a data-parallel run
// writes sharded checkpoints under RUN_DIR/checkpoints/ (core/engine/zero_checkpoint.h).
// docs/ZERO.md, "Checkpoints".
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "core/engine/zero_checkpoint.h"

namespace napkin::cli {

// What --resume PATH continues: a whole-state checkpoint file (PATH itself, or
// RUN_DIR/checkpoint.safetensors), or a data-parallel run's last complete sharded checkpoint.
struct ResumeSource {
    std::filesystem::path file;        // a whole-state checkpoint, or empty
    std::optional<Manifest> manifest;  // a sharded checkpoint, or none
    std::filesystem::path run_dir;     // where the run goes on writing unless --out says otherwise
    TrainOptions options;              // the run's options, for this process's world size
};

// PATH a file: a whole-state checkpoint, which any world size and stage can load (a run of W
// ranks accumulates its G / W micro-batches each). PATH a folder: with data parallelism its last
// complete sharded checkpoint (the same world size and stage, else a UsageError pointing at
// napkin ckpt consolidate), or else its checkpoint.safetensors; without, its
// checkpoint.safetensors. UsageError when there is none.
ResumeSource find_resume_source(const std::string& path, bool parallel, Communicator& comm,
                                int zero);

// Restores the trainer from the source (InputError naming the file on any problem).
void load_resume_source(const ResumeSource& source, Trainer& trainer);

// Writes the run's checkpoint: RUN_DIR/checkpoint.safetensors for one process, a sharded
// checkpoint under RUN_DIR/checkpoints/ (collective) with data parallelism. Returns its path.
std::string save_run_checkpoint(const std::filesystem::path& run_dir, Trainer& trainer,
                                bool parallel);

// The path save_run_checkpoint writes for a trainer `steps_done` steps in.
std::string run_checkpoint_path(const std::filesystem::path& run_dir, int steps_done,
                                bool parallel);

// A run that does not continue the checkpoint of its own folder (a fresh run, or a resumed one
// writing to another folder with --out) first moves any checkpoint already there aside, so that
// a later --resume of the folder never takes an earlier run's state for this run's:
//   RUN_DIR/checkpoint.safetensors  ->  RUN_DIR/checkpoint.safetensors.previous
//   RUN_DIR/checkpoints/            ->  RUN_DIR/checkpoints.previous/
// and the earlier run's report.json (and report.json.pending), trace.json and memory.json (in
// RUN_DIR and its rank<r> folders) likewise, so that napkin report, export and view never show them
// as this run's. Each one rename (an older .previous is removed first). Returns the line to print,
// or empty when there was nothing to move. Called by rank 0 alone, before a collective that
// precedes the first save. InputError naming the path when a move fails.
std::string set_aside_earlier_run(const std::filesystem::path& run_dir);

// Whether resuming from `source` into `run_dir` continues the folder's own checkpoint (the same
// folder), so that nothing is set aside.
bool continues_folder(const ResumeSource& source, const std::filesystem::path& run_dir);

// Test-only fault injection (tests/comm/zero_mpi_test.cpp), read from the environment:
//   NAPKIN_TEST_KILL_RANK_AT_STEP=R:S  rank R raises SIGKILL once S steps are done
//   NAPKIN_TEST_HANG_RANK_AT_STEP=R:S  rank R sleeps forever once S steps are done
//   NAPKIN_TEST_TERM_RANK_AT_STEP=R:S  rank R raises SIGTERM once S steps are done
// Called before each step, and after the last one (S = --steps: before the final save). Not for
// users: it kills, hangs or stops the run on purpose.
void inject_test_fault(int rank, int steps_done);

// Test-only (tests/fault/fault_test.cpp): NAPKIN_TEST_THROW_AT_END=trace|report makes the run's
// end throw where it writes that file, the JSON library's exception for a string that is not
// UTF-8 (what a path of Latin-1 bytes once did there, issue 24), to show that the steps' work
// outlives it. Called with `where` each of those points.
void inject_end_fault(const char* where);

}  // namespace napkin::cli
