#include "core/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <system_error>
#include <utility>

#include "core/check.h"

namespace napkin {

namespace {

// Writes go through a buffer of this size; a write at least this large goes straight through.
constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
constexpr std::string_view kTmpMarker = ".tmp-";
constexpr int kNameTries = 16;  // O_EXCL collisions of 64 random bits: never, in practice

std::string errno_text(int err) {
    return std::generic_category().message(err);
}

// 64 random bits per call: a generator per thread, seeded from the system's entropy.
std::uint64_t random_bits() {
    thread_local std::mt19937_64 gen([] {
        std::random_device rd;
        return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }());
    return gen();
}

std::filesystem::path temporary_name(const std::filesystem::path& path) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "%.*s%ld-%016llx", static_cast<int>(kTmpMarker.size()),
                  kTmpMarker.data(), static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(random_bits()));
    std::filesystem::path tmp = path;
    tmp += suffix;
    return tmp;
}

// Makes a rename in `folder` durable. Best effort: some file systems refuse to fsync a folder.
void sync_folder(const std::filesystem::path& file) {
    const std::filesystem::path parent = file.parent_path();
    const int fd =
        ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

// ---- Temporaries removed on the way out ------------------------------------------------------

// The temporaries not yet committed or discarded, where a signal handler can read them: fixed
// slots (a handler may not allocate), each claimed with a compare-exchange (free -> claimed),
// filled, then published (ready). A handler unlinks the ready ones; a slot reused while it reads
// can at worst name a path that is gone. Writers past kLiveSlots at once go untracked, left to
// remove_dead_temporaries.
constexpr int kLiveSlots = 16;
enum LiveState : int { kFree = 0, kClaimed = 1, kReady = 2 };
struct LiveSlot {
    std::atomic<int> state{kFree};
    char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "read in a signal handler");
LiveSlot g_live[kLiveSlots];

int register_live(const std::filesystem::path& tmp) noexcept {
    const std::string& s = tmp.native();
    if (s.size() >= PATH_MAX) return -1;
    for (int i = 0; i < kLiveSlots; ++i) {
        int expected = kFree;
        if (!g_live[i].state.compare_exchange_strong(expected, kClaimed)) continue;
        std::memcpy(g_live[i].path, s.c_str(), s.size() + 1);
        g_live[i].state.store(kReady, std::memory_order_release);
        return i;
    }
    return -1;
}

void unregister_live(int& slot) noexcept {
    if (slot >= 0) g_live[slot].state.store(kFree, std::memory_order_release);
    slot = -1;
}

// SIGINT, SIGTERM or SIGHUP where it had its default action: the temporaries go, then the
// process ends of the signal as it would have (SA_RESETHAND restored the default on entry; the
// raised signal is delivered once the handler returns).
void end_without_temporaries(int sig) {
    const int saved = errno;
    remove_live_temporaries();
    ::raise(sig);
    errno = saved;
}

void install_end_handlers() noexcept {
    [[maybe_unused]] static const bool installed = [] {
        for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction old {};
            if (::sigaction(sig, nullptr, &old) != 0) continue;
            if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
            struct sigaction sa {};
            sa.sa_handler = end_without_temporaries;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESETHAND | SA_RESTART;
            ::sigaction(sig, &sa, nullptr);
        }
        return true;
    }();
}

}  // namespace

void remove_live_temporaries() noexcept {
    for (LiveSlot& slot : g_live) {
        if (slot.state.load(std::memory_order_acquire) == kReady) ::unlink(slot.path);
    }
}

DurableFile::DurableFile(std::filesystem::path path) : path_(std::move(path)) {
    install_end_handlers();
    // The ending signals wait while the temporary is created and registered: one arriving in
    // between would end the process with a file its handler does not know (the fault suite's
    // FaultEnd.SigtermDuringAnExportLeavesNoTemporary signals the moment the file appears). A
    // signal sent meanwhile is delivered when the mask is restored, the temporary registered.
    struct EndingSignalsWait {
        sigset_t before;
        EndingSignalsWait() {
            sigset_t ending;
            sigemptyset(&ending);
            for (const int sig : {SIGINT, SIGTERM, SIGHUP})
                sigaddset(&ending, sig);
            ::pthread_sigmask(SIG_BLOCK, &ending, &before);
        }
        ~EndingSignalsWait() { ::pthread_sigmask(SIG_SETMASK, &before, nullptr); }
        EndingSignalsWait(const EndingSignalsWait&) = delete;
        EndingSignalsWait& operator=(const EndingSignalsWait&) = delete;
    };
    int err = 0;
    {
        const EndingSignalsWait wait;
        for (int attempt = 0; attempt < kNameTries && fd_ < 0; ++attempt) {
            tmp_path_ = temporary_name(path_);
            fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            err = fd_ < 0 ? errno : 0;
            if (fd_ < 0 && err != EEXIST) break;
        }
        if (fd_ >= 0) live_slot_ = register_live(tmp_path_);
    }
    if (fd_ < 0) {
        tmp_path_.clear();
        const std::filesystem::path folder = path_.parent_path();
        fail("cannot create a file in " + (folder.empty() ? std::string(".") : folder.string()),
             err);
    }
}

DurableFile::~DurableFile() {
    if (!committed_) discard();
}

void DurableFile::fail(const std::string& what, int err) noexcept {
    if (!error_.empty()) return;
    try {
        error_ = path_.string() + ": " + what;
        if (err != 0) error_ += " (" + errno_text(err) + ")";
    } catch (...) {
        error_ = "write failed (out of memory)";
    }
}

void DurableFile::discard() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    unregister_live(live_slot_);
}

void DurableFile::write_through(const char* data, std::size_t bytes) noexcept {
    while (bytes > 0 && error_.empty()) {
        const ssize_t n = ::write(fd_, data, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fail("write failed", n < 0 ? errno : EIO);
            return;
        }
        data += n;
        bytes -= static_cast<std::size_t>(n);
    }
}

void DurableFile::flush() noexcept {
    if (fd_ < 0 || !error_.empty() || buffer_.empty()) return;
    write_through(buffer_.data(), buffer_.size());
    buffer_.clear();
}

void DurableFile::write(const void* data, std::size_t bytes) noexcept {
    if (fd_ < 0 || !error_.empty() || bytes == 0) return;
    const auto* p = static_cast<const char*>(data);
    if (buffer_.size() + bytes > kBufferBytes) flush();
    if (bytes >= kBufferBytes) {
        write_through(p, bytes);
    } else {
        try {
            if (buffer_.capacity() < kBufferBytes) buffer_.reserve(kBufferBytes);
            buffer_.append(p, bytes);
        } catch (...) {
            fail("write failed", ENOMEM);
        }
    }
    if (error_.empty()) bytes_written_ += bytes;
}

void DurableFile::write(std::string_view bytes) noexcept {
    write(bytes.data(), bytes.size());
}

bool DurableFile::commit() noexcept {
    if (committed_) return true;
    if (fd_ >= 0) {
        flush();
        // EINVAL: a file that cannot be synchronized (a special file system); nothing to wait for.
        if (error_.empty() && ::fsync(fd_) != 0 && errno != EINVAL) fail("fsync failed", errno);
        const int closed = ::close(fd_);
        fd_ = -1;
        if (closed != 0) fail("close failed", errno);
    }
    if (error_.empty() && ::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        const int err = errno;
        try {
            fail("cannot rename " + tmp_path_.filename().string() + " into place", err);
        } catch (...) {
            fail("cannot rename into place", err);
        }
    }
    if (!error_.empty()) {
        discard();
        return false;
    }
    committed_ = true;
    unregister_live(live_slot_);
    sync_folder(path_);
    return true;
}

void write_file_durably(const std::filesystem::path& path, std::string_view bytes) {
    DurableFile f(path);
    f.write(bytes);
    if (!f.commit()) throw InputError(f.error());
}

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
    if (::rename(from.c_str(), to.c_str()) != 0) {
        throw InputError(from.string() + ": cannot rename to " + to.string() + " (" +
                         std::strerror(errno) + ")");
    }
    sync_folder(to);
}

bool is_durable_temporary(std::string_view name) {
    const std::size_t at = name.rfind(kTmpMarker);
    if (at == std::string_view::npos || at == 0) return false;
    const std::string_view rest = name.substr(at + kTmpMarker.size());
    const std::size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string_view::npos || rest.size() - dash - 1 != 16) return false;
    for (std::size_t i = 0; i < rest.size(); ++i) {
        const char c = rest[i];
        const bool digit = c >= '0' && c <= '9';
        const bool hex = digit || (c >= 'a' && c <= 'f');
        if (i == dash) continue;
        if (i < dash ? !digit : !hex) return false;
    }
    return true;
}

std::size_t remove_dead_temporaries(const std::filesystem::path& dir) noexcept {
    std::size_t removed = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!is_durable_temporary(name)) continue;
        // "<name>.tmp-<pid>-<random>": the writer's pid, checked with signal 0 (ESRCH: gone).
        const std::size_t at = name.rfind(kTmpMarker) + kTmpMarker.size();
        const long pid = std::strtol(name.c_str() + at, nullptr, 10);
        if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
        std::error_code rm;
        if (std::filesystem::remove(e.path(), rm)) ++removed;
    }
    return removed;
}

}  // namespace napkin
