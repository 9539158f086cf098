// Ctrl-C (SIGINT) and SIGTERM during `napkin train`: the first asks the run to stop at the next
// micro-batch (the step in progress is dropped: Trainer::set_stop_check), as --stop-after would
// after the last whole step, so that its report, trace and checkpoint are written and
// `napkin train --resume RUN_DIR` continues it; a second ends the process at once, removing the
// temporary of a save under way (core/durable_file.h): the folder keeps the last whole checkpoint
// and nothing half-written. Only a single process installs it: under a launcher (mpirun) the
// ranks would have to agree on the step, and the launcher's own signal handling ends the job.
#pragma once

#include <stdexcept>

namespace napkin::cli {

class StopOnSignal {
public:
    StopOnSignal();  // installs the handlers
    ~StopOnSignal();  // restores the ones before
    StopOnSignal(const StopOnSignal&) = delete;
    StopOnSignal& operator=(const StopOnSignal&) = delete;

    bool requested() const;
    int signal() const;  // the first signal received (0: none)
};

// Thrown after an interrupted run has written everything; main prints it and exits 128 + signal.
class Interrupted : public std::runtime_error {
public:
    Interrupted(const std::string& what, int signal) : std::runtime_error(what), signal_(signal) {}
    int exit_code() const { return 128 + signal_; }

private:
    int signal_;
};

}  // namespace napkin::cli
