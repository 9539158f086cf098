// DurableFile: how napkin writes every file it produces (traces, memory snapshots, checkpoints,
// manifests, merged exports, screenshots), so that a file that exists is whole and survives a
// crash or a power cut once its writer said it was written.
//
//   1. open a temporary of a unique name in the target's folder, "<name>.tmp-<pid>-<random>"
//      (O_CREAT | O_EXCL): two writers of one target, in one process or two, never share it;
//   2. write (buffered; large writes go straight through);
//   3. commit(): flush, fsync the file, close it, rename it over the target (atomic within a
//      folder), then fsync the folder so that the rename itself is on disk.
// Any failure leaves the target as it was, removes the temporary, and keeps one line naming the
// target and errno's text ("runs/a/trace.json: write failed (No space left on device)"). A file
// destroyed without commit() (an exception unwinding a failed run) removes its temporary too.
// A signal that ends the process mid-write (Ctrl-C, SIGTERM, SIGHUP) removes the temporaries
// on the way out (remove_live_temporaries); a kill -9 cannot, and leaves "<name>.tmp-*"
// (is_durable_temporary) for the next writer into the folder (remove_dead_temporaries).
//
// Errors never throw from the class: after the first one, writes are no-ops and commit() returns
// false. write_file_durably() is the one-call form, throwing InputError.
// Tests: tests/core/durable_file_test.cpp (read-only folders, a full tmpfs, concurrent writers);
// tests/fault/fault_end_test.cpp (a signal mid-write).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace napkin {

class DurableFile {
public:
    explicit DurableFile(std::filesystem::path path);  // opens the temporary; see ok()
    ~DurableFile();
    DurableFile(const DurableFile&) = delete;
    DurableFile& operator=(const DurableFile&) = delete;

    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    const std::filesystem::path& path() const { return path_; }
    const std::filesystem::path& tmp_path() const { return tmp_path_; }  // empty if not created
    std::uint64_t bytes_written() const { return bytes_written_; }

    void write(std::string_view bytes) noexcept;  // a no-op once an error occurred
    void write(const void* data, std::size_t bytes) noexcept;
    void flush() noexcept;  // hands the buffer to the kernel (not to the disk: commit() does)
    // Flush, fsync, close, rename over path(), fsync the folder. True when the file is in place;
    // false with error() set, the temporary removed. A second call returns the first's result.
    bool commit() noexcept;

private:
    void fail(const std::string& what, int err) noexcept;
    void write_through(const char* data, std::size_t bytes) noexcept;
    void discard() noexcept;

    std::filesystem::path path_;
    std::filesystem::path tmp_path_;
    int fd_ = -1;
    std::string buffer_;
    std::string error_;
    std::uint64_t bytes_written_ = 0;
    bool committed_ = false;
    int live_slot_ = -1;  // where remove_live_temporaries finds tmp_path_ (-1: not registered)
};

// Writes `bytes` to `path` through a DurableFile; InputError with its one line on failure.
void write_file_durably(const std::filesystem::path& path, std::string_view bytes);

// Renames `from` over `to` (atomic within a folder) and fsyncs the folder (best effort, as
// commit()). InputError naming both and errno's text when the rename fails.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Unlinks the temporary of every DurableFile of this process not yet committed or discarded:
// for a signal handler that ends the process (async-signal-safe: atomic loads and unlink, no
// allocation). The first DurableFile installs such a handler for SIGINT, SIGTERM and SIGHUP
// where the signal still has its default action (napkin export, ckpt consolidate, a rank under
// mpirun): it removes the temporaries, then the process dies of the signal as before (exit
// status 128 + signal). A program with its own handler calls this one before it ends the
// process (napkin train's second Ctrl-C, cli/train_signal.cpp).
void remove_live_temporaries() noexcept;

// Whether `name` is a DurableFile temporary ("trace.json.tmp-4242-1f2e3d4c5b6a7988"), e.g. one
// left in a run folder by a process that was killed while writing.
bool is_durable_temporary(std::string_view name);

// Removes the DurableFile temporaries in `dir` whose writer is dead (its pid, in the name, no
// longer runs): what a kill -9 (or more writers at once than remove_live_temporaries tracks)
// left. A live writer's are kept.
// Returns how many went.
std::size_t remove_dead_temporaries(const std::filesystem::path& dir) noexcept;

}  // namespace napkin
