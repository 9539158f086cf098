#include "core/bounded_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace napkin {

namespace {

const char* kind_of(mode_t mode) {
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a file";
}

std::string too_large(std::uint64_t bytes, std::uint64_t max_bytes) {
    return std::to_string(bytes) + " bytes, over the limit of " + std::to_string(max_bytes) +
           " bytes for this file";
}

// Reads at most max_bytes + 1 bytes: one past the limit is enough to refuse the file, whatever
// st_size said (a file growing while read, or a procfs file whose st_size is 0).
std::string read_all(int fd, std::uint64_t max_bytes, std::string& text) {
    text.clear();
    char chunk[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::string("read failed (") + std::strerror(errno) + ")";
        if (n == 0) return "";
        text.append(chunk, static_cast<std::size_t>(n));
        if (text.size() > max_bytes) return too_large(text.size(), max_bytes) + " (still growing)";
    }
}

}  // namespace

std::string read_bounded_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                              std::string& text) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::string("cannot open (") + std::strerror(errno) + ")";
    struct stat st {};
    std::string error;
    if (::fstat(fd, &st) != 0) {
        error = std::string("cannot stat (") + std::strerror(errno) + ")";
    } else if (!S_ISREG(st.st_mode)) {
        error = std::string("not a regular file (") + kind_of(st.st_mode) + ")";
    } else if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        error = too_large(static_cast<std::uint64_t>(st.st_size), max_bytes);
    } else {
        // Back to blocking reads: a regular file never blocks, and O_NONBLOCK is not meant for it.
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        text.reserve(static_cast<std::size_t>(st.st_size));
        error = read_all(fd, max_bytes, text);
    }
    ::close(fd);
    if (!error.empty()) text.clear();
    return error;
}

}  // namespace napkin
