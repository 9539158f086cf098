// napkin train under an MPI launcher (mpirun -n N napkin train --zero S ...): the glue between
// the command line and the data-parallel engine (core/engine/zero.h), kept out of
// cmd_train.cpp. docs/ZERO.md.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/engine/trainer.h"
#include "estimator/estimate.h"
#include "profiler/run_report.h"

namespace napkin::cli {

// Starts the communicator the launcher's environment asks for and runs `body` with it. An
// error on one rank of several ends the whole job at once (MPI_Abort, after printing it with
// the rank), because the other ranks would wait for it in their next collective forever. A
// mismatch found by the start-up handshake is known to every rank: they all exit cleanly.
void run_with_ranks(const std::function<void(Communicator&)>& body);

// The flags that decide what the ranks write and read (--out, --save-every, --stop-after,
// --resume, ...), by name and value: ranks that differ in one would finish with a checkpoint no
// run can use, or fall out of step inside a collective (MPI_ERR_IN_STATUS). Collective: every
// rank compares each flag with rank 0's, and all throw RunMismatchError (exit 2 everywhere)
// naming the flags that differ. Nothing to compare for one process.
void check_same_flags(const std::vector<std::pair<std::string, std::string>>& flags,
                      Communicator& comm);

// RUN_DIR for rank 0, RUN_DIR/rank<r> for the others (each writes its own report and trace).
// Ranks other than 0 also stop printing to stdout: rank 0 speaks for the job.
std::filesystem::path rank_out_dir(const std::filesystem::path& run_dir, Communicator& comm);

// One line under the header: ranks, backend, stage, predicted traffic per step.
void print_parallel_summary(Trainer& trainer, const Estimate& predicted);

// This step's traffic, for its report entry.
profiler::StepTraffic step_traffic(const StepRecord& r);

// What must match on every rank besides the options: napkin's version and a hash of this
// executable's bytes (two builds of one version differ).
std::string build_id();

// report.json's "communication": backend, rank, world, stage, this rank's measured bytes per
// step (parameter/gradient collectives, and all traffic including scalars) beside the
// estimator's prediction for the same run. None without data parallelism.
std::optional<profiler::CommunicationReport> communication_report(
    Trainer& trainer, const Estimate& predicted, const std::vector<profiler::StepReport>& steps);

}  // namespace napkin::cli
