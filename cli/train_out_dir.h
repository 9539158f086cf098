// napkin train's run folder: created (with its parents) and probed for writing before the run
// starts, and removed again if the run fails before writing anything into it, so that a refused
// flag or an unreadable data file leaves no empty RUN_DIR behind.
#pragma once

#include <filesystem>
#include <vector>

namespace napkin::cli {

class OutDir {
public:
    // Creates `dir` and any missing parents; UsageError naming --out when it cannot be created
    // or written.
    explicit OutDir(const std::filesystem::path& dir);
    // Removes the folders this object created, deepest first, as long as they are empty: a run
    // that wrote a file keeps its folder.
    ~OutDir();
    OutDir(const OutDir&) = delete;
    OutDir& operator=(const OutDir&) = delete;

private:
    void remove_created() noexcept;

    std::vector<std::filesystem::path> created_;  // outermost first
};

}  // namespace napkin::cli
