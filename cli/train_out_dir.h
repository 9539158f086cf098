// napkin train's run folder: created (with its parents) and probed for writing before the run
// starts, and removed again if the run fails before writing anything into it, so that a refused
// flag or an unreadable data file leaves no empty RUN_DIR behind.
//
// The folder is locked for the run's life (flock on the folder itself: no lock file to leave
// behind, and the kernel releases it when the process dies, kill -9 included), so that two runs
// given one --out never mix their checkpoints and reports: the second is refused with the
// holder's pid, read from /proc/locks. Once locked, the temporaries that a killed writer left in it
// or in its sharded checkpoints' step folders (core/durable_file.h) are removed.
#pragma once

#include <filesystem>
#include <vector>

namespace napkin::cli {

class OutDir {
public:
    // Creates `dir` and any missing parents and locks it; UsageError naming --out when it cannot
    // be created or written, or another process holds its lock.
    explicit OutDir(const std::filesystem::path& dir);
    // Removes the folders this object created, deepest first, as long as they are empty: a run
    // that wrote a file keeps its folder.
    ~OutDir();
    OutDir(const OutDir&) = delete;
    OutDir& operator=(const OutDir&) = delete;

private:
    void remove_created() noexcept;
    void lock(const std::filesystem::path& dir);

    int lock_fd_ = -1;  // the folder, open while the run holds its flock

    std::vector<std::filesystem::path> created_;  // outermost first
};

}  // namespace napkin::cli
