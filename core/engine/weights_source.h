// The machinery behind weights_import.cpp's formats (internal to core/engine): the file, the
// byte sources that implement the load strategies, the list of copies a format plans, and the
// run of those copies into the model with the import's measurements. A format's planner turns
// its file into an ImportPlan; execute() checks it covers the model and runs it.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/engine/gpt.h"
#include "core/engine/weights_import.h"
#include "core/safetensors.h"

namespace napkin::weights_detail {

[[noreturn]] void bad(const std::string& path, const std::string& what);
int element_bytes(DType t);

// ---- files and buffers ---------------------------------------------------------------------

class Fd {
public:
    explicit Fd(const std::string& path) { fd_ = open_regular_file(path, bytes_); }
    ~Fd() { ::close(fd_); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    std::uint64_t bytes() const { return bytes_; }

private:
    int fd_ = -1;
    std::uint64_t bytes_ = 0;
};

// Anonymous, page-aligned memory that returns to the system when freed (a heap block of this
// size might reuse pages already resident and hide the strategy's true footprint).
class PageBuffer {
public:
    PageBuffer() = default;
    ~PageBuffer() { release(); }
    PageBuffer(const PageBuffer&) = delete;
    PageBuffer& operator=(const PageBuffer&) = delete;

    // At least `bytes`, contents undefined. Frees the old mapping before making a larger one.
    // `populate` faults every page in up front, in one call: for a buffer about to be filled
    // whole, twice as fast as taking the faults one by one inside read() on the dev VM.
    unsigned char* ensure(std::size_t bytes, bool populate = false) {
        if (bytes <= bytes_) return data_;
        release();
        const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
        void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        data_ = static_cast<unsigned char*>(p);
        bytes_ = bytes;
        return data_;
    }
    unsigned char* data() const { return data_; }
    void release() {
        if (data_ != nullptr) ::munmap(data_, bytes_);
        data_ = nullptr;
        bytes_ = 0;
    }

private:
    unsigned char* data_ = nullptr;
    std::size_t bytes_ = 0;
};

// Where a copy's bytes come from: the load strategies.
class ByteSource {
public:
    virtual ~ByteSource() = default;
    // The file's bytes [offset, offset + n), valid until the next call. `dst`, when not null,
    // holds n bytes the source may read into (and then returns); a source that already holds
    // the bytes returns its own pointer.
    virtual const unsigned char* get(std::uint64_t offset, std::size_t n, unsigned char* dst) = 0;
};

class ReadAllSource final : public ByteSource {
public:
    ReadAllSource(int fd, std::uint64_t file_bytes, const std::string& path) {
        unsigned char* p = buf_.ensure(static_cast<std::size_t>(file_bytes), true);
        pread_exact(fd, p, static_cast<std::size_t>(file_bytes), 0, path);
    }
    const unsigned char* get(std::uint64_t offset, std::size_t, unsigned char*) override {
        return buf_.data() + offset;
    }

private:
    PageBuffer buf_;
};

class SequentialSource final : public ByteSource {
public:
    SequentialSource(int fd, const std::string& path) : fd_(fd), path_(path) {}
    const unsigned char* get(std::uint64_t offset, std::size_t n, unsigned char* dst) override {
        unsigned char* p = dst != nullptr ? dst : buf_.ensure(n);
        pread_exact(fd_, p, n, offset, path_);
        return p;
    }

private:
    int fd_;
    std::string path_;
    PageBuffer buf_;  // 16-bit and transposed tensors: grows to the largest
};

class MmapSource final : public ByteSource {
public:
    MmapSource(int fd, std::uint64_t file_bytes, const std::string& path)
        : bytes_(static_cast<std::size_t>(file_bytes)) {
        void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) bad(path, std::string("cannot map (") + std::strerror(errno) + ")");
        base_ = static_cast<const unsigned char*>(p);
        ::madvise(const_cast<unsigned char*>(base_), bytes_, MADV_SEQUENTIAL);  // advice only
    }
    ~MmapSource() override { ::munmap(const_cast<unsigned char*>(base_), bytes_); }
    MmapSource(const MmapSource&) = delete;
    MmapSource& operator=(const MmapSource&) = delete;
    const unsigned char* get(std::uint64_t offset, std::size_t, unsigned char*) override {
        return base_ + offset;
    }

private:
    const unsigned char* base_ = nullptr;
    std::size_t bytes_ = 0;
};

// ---- the copies ------------------------------------------------------------------------------

// One parameter from the file: (rows, cols) elements of `dtype` at `offset`, transposed into
// (cols, rows) for Conv1D weights; the parameter's elements past rows * cols (wte's padding
// rows) are zeroed.
struct Copy {
    std::size_t param = 0;
    std::uint64_t offset = 0;  // in the file
    DType dtype = DType::f32;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    bool transpose = false;
    std::size_t count() const { return static_cast<std::size_t>(rows * cols); }
    std::size_t bytes() const { return count() * static_cast<std::size_t>(element_bytes(dtype)); }
};

struct ImportPlan {
    std::string format;
    std::vector<Copy> copies;
    std::uint64_t extra_bytes_read = 0;  // read while checking (a tied lm_head)
};

// Runs the copies in file order from `source` into the model (fp32 through set_param).
void run_copies(Gpt& model, std::vector<Copy> copies, ByteSource& source);

// Every parameter exactly once (adapters never), each copy within its parameter; NAPKIN_ASSERT.
void check_coverage(Gpt& model, const std::vector<Copy>& copies);
// The model's parameters by name; the index of `name`, which must be there.
std::unordered_map<std::string, std::size_t> param_indices(Gpt& model);
std::size_t param_index(const std::unordered_map<std::string, std::size_t>& index,
                        const std::string& name);

// Peak RSS of the import (docs/WEIGHTS.md): VmHWM reset before, read after.
struct RssProbe {
    bool reset = false;
    std::optional<std::int64_t> rss_before_kb;
};
RssProbe start_rss_probe();
void finish_rss_probe(const RssProbe& p, ImportReport& r);

// Checks the plan covers the model, then runs its copies in file order over the strategy's
// byte source; fills r's format, tensors and bytes_read.
void execute(Gpt& model, const ImportPlan& plan, int fd, std::uint64_t file_bytes,
             const std::string& path, LoadStrategy strategy, ImportReport& r);

}  // namespace napkin::weights_detail
