#include "cli/train_out_dir.h"

#include <fstream>
#include <string>
#include <system_error>

#include "core/check.h"

namespace napkin::cli {

namespace fs = std::filesystem;

OutDir::OutDir(const fs::path& dir) {
    std::error_code ec;
    // The folders that do not exist yet, outermost first: the ones this run may remove again.
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
        created_.insert(created_.begin(), p);
        if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    if (ec) {
        created_.clear();
        throw UsageError("--out: cannot create '" + dir.string() + "' (" + ec.message() + ")");
    }
    const fs::path probe = dir / ".napkin-write-test";
    std::ofstream f(probe);
    if (!f) {
        remove_created();  // a throwing constructor runs no destructor
        throw UsageError("--out: '" + dir.string() + "' is not writable");
    }
    f.close();
    fs::remove(probe, ec);
}

OutDir::~OutDir() {
    remove_created();
}

void OutDir::remove_created() noexcept {
    std::error_code ec;
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
        if (!fs::is_empty(*it, ec) || ec) return;
        fs::remove(*it, ec);
    }
    created_.clear();
}

}  // namespace napkin::cli
