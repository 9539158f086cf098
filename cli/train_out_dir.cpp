#include "cli/train_out_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "core/check.h"
#include "core/durable_file.h"

namespace napkin::cli {

namespace fs = std::filesystem;

namespace {

// The pid holding a flock on the file `st` names, from /proc/locks ("1: FLOCK  ADVISORY  WRITE
// 4242 08:01:1837 0 EOF": major and minor in hex, the inode in decimal); 0 when not found.
long flock_holder(const struct stat& st) {
    std::ifstream in("/proc/locks");
    char want[64];
    std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                  static_cast<unsigned long long>(st.st_ino));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string id, kind, mode, access, device;
        long pid = 0;
        if (fields >> id >> kind) {
            if (kind == "->") fields >> kind;  // a waiter, listed under the holder
            if (fields >> mode >> access >> pid >> device && kind == "FLOCK" && device == want)
                return pid;
        }
    }
    return 0;
}

}  // namespace

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
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        const int err = errno;
        remove_created();  // a throwing constructor runs no destructor
        throw UsageError("--out: '" + dir.string() + "' is not writable (" + std::strerror(err) +
                         ")");
    }
    ::close(fd);
    fs::remove(probe, ec);
    lock(dir);
}

void OutDir::lock(const fs::path& dir) {
    lock_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd_ >= 0 && ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
        // A killed run's half-written files: this run owns the folder. Sharded checkpoints keep
        // theirs in checkpoints/step-N/ (a rank killed while writing its shard of the last one).
        remove_dead_temporaries(dir);
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir / "checkpoints", ec)) {
            if (e.is_directory(ec)) remove_dead_temporaries(e.path());
        }
        return;
    }
    const int err = errno;
    struct stat st {};
    const long holder = lock_fd_ >= 0 && ::fstat(lock_fd_, &st) == 0 ? flock_holder(st) : 0;
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    remove_created();  // a throwing constructor runs no destructor
    if (err != EWOULDBLOCK) {
        throw UsageError("--out: cannot lock '" + dir.string() + "' (" + std::strerror(err) + ")");
    }
    throw UsageError("--out: '" + dir.string() + "' is in use by another napkin train (pid " +
                     (holder > 0 ? std::to_string(holder) : std::string("unknown")) +
                     "); wait for it to finish or give another --out");
}

OutDir::~OutDir() {
    remove_created();
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
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
