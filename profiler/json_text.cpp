// JsonText: a JSON file's bytes followed by zero padding, for simdjson (profiler/trace_reader.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#ifndef NAPKIN_HAVE_ZLIB
#define NAPKIN_HAVE_ZLIB 0
#endif
#if NAPKIN_HAVE_ZLIB
#include <zlib.h>
#endif

#include "profiler/trace_reader.h"

namespace napkin::profiler {

namespace {

// A gzip member starts with these two bytes (RFC 1952).
bool is_gzip(const char* data, std::size_t size) {
    return size >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
           static_cast<unsigned char>(data[1]) == 0x8b;
}

// Decompressed traces are capped: a few kilobytes of gzip can claim terabytes.
constexpr std::size_t kMaxInflatedBytes = std::size_t{16} << 30;

std::string errno_text(int err) {
    return std::strerror(err);
}

}  // namespace

bool gzip_supported() {
    return NAPKIN_HAVE_ZLIB != 0;
}

JsonText::~JsonText() {
    if (map_ != nullptr) munmap(map_, mapped_);
}

std::string JsonText::open(const std::filesystem::path& path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return "cannot open the file (" + errno_text(errno) + ")";
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return "not a regular file";
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    mapped_ = (size + kTracePadding + page - 1) / page * page;
    // Zero pages for the whole span, then the file over its start: the padding is readable and
    // the file is never copied (a copy of 150 MB costs as much as the parse).
    map_ = mmap(nullptr, mapped_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        ::close(fd);
        return "cannot map the file (" + errno_text(errno) + ")";
    }
    if (size > 0 &&
        mmap(map_, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
        const std::string err = errno_text(errno);
        ::close(fd);
        return "cannot map the file (" + err + ")";
    }
    ::close(fd);
    data_ = static_cast<const char*>(map_);
    size_ = size;
    if (!is_gzip(data_, size_)) return "";
    std::string err = inflate(data_, size_);
    munmap(map_, mapped_);
    map_ = nullptr;
    if (!err.empty()) {
        data_ = nullptr;
        size_ = 0;
        return err;
    }
    data_ = inflated_.data();
    size_ = inflated_.size() - kTracePadding;
    return "";
}

std::string JsonText::assign(std::string_view bytes) {
    if (map_ != nullptr) munmap(map_, mapped_);
    map_ = nullptr;
    inflated_.clear();
    std::string err;
    if (is_gzip(bytes.data(), bytes.size())) {
        err = inflate(bytes.data(), bytes.size());
    } else {
        inflated_.reserve(bytes.size() + kTracePadding);
        inflated_.assign(bytes);
        inflated_.append(kTracePadding, '\0');
    }
    data_ = err.empty() ? inflated_.data() : nullptr;
    size_ = err.empty() ? inflated_.size() - kTracePadding : 0;
    return err;
}

#if NAPKIN_HAVE_ZLIB
std::string JsonText::inflate(const char* compressed, std::size_t bytes) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return "cannot decompress (zlib init failed)";
    const auto* in = reinterpret_cast<const Bytef*>(compressed);
    constexpr std::size_t kChunk = std::size_t{1} << 30;  // zlib counts in 32 bits
    std::size_t in_done = 0, out = 0;
    int rc = Z_OK;
    std::string err;
    while (in_done < bytes && err.empty()) {
        // Concatenated members (gzip -c a b > c) are inflated one after the other.
        if (rc == Z_STREAM_END && inflateReset(&z) != Z_OK) break;
        if (out == inflated_.size()) {
            if (inflated_.size() >= kMaxInflatedBytes) {
                err = "decompressed, the file exceeds " + std::to_string(kMaxInflatedBytes >> 30) +
                      " GiB";
                break;
            }
            inflated_.resize(std::max(inflated_.size() * 2, bytes * 4 + 4096));
        }
        z.next_in = const_cast<Bytef*>(in + in_done);
        z.avail_in = static_cast<uInt>(std::min(bytes - in_done, kChunk));
        z.next_out = reinterpret_cast<Bytef*>(inflated_.data() + out);
        z.avail_out = static_cast<uInt>(std::min(inflated_.size() - out, kChunk));
        const uInt avail_in = z.avail_in, avail_out = z.avail_out;
        rc = ::inflate(&z, Z_NO_FLUSH);
        in_done += avail_in - z.avail_in;
        out += avail_out - z.avail_out;
        const bool stuck = avail_in == z.avail_in && avail_out == z.avail_out;
        if ((rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) || (rc == Z_BUF_ERROR && stuck))
            err = std::string("not a valid gzip file (") +
                  (z.msg != nullptr ? z.msg : "corrupt data") + ")";
    }
    inflateEnd(&z);
    if (err.empty() && rc != Z_STREAM_END) err = "not a valid gzip file (truncated)";
    if (!err.empty()) {
        inflated_.clear();
        return err;
    }
    inflated_.resize(out + kTracePadding, '\0');
    return "";
}
#else
std::string JsonText::inflate(const char*, std::size_t) {
    return "a gzip file: this napkin was built without zlib (install zlib1g-dev and rebuild)";
}
#endif

}  // namespace napkin::profiler
