// The container every napkin checkpoint file shares (internal to core/engine): a safetensors
// file whose "__metadata__" holds a format string, the run's options and loop state as strings
// (CheckpointInfo, one key each), any extra keys of the format, an FNV-1a 64 checksum of the
// data section with its size, and "header_checksum", an FNV-1a 64 of the metadata and tensor table
// (verified on open: an edited step or lr is refused). Written to a temporary name, fsynced and
// renamed; read back with every structural check before a byte of training state is touched.
//   checkpoint.h       napkin-checkpoint/1: a process's whole state, tensors per parameter
//   zero_checkpoint.h  napkin-checkpoint-shard/1: one rank's part of a sharded checkpoint
// Tests: tests/engine/checkpoint_test.cpp, tests/engine/zero_checkpoint_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "core/engine/checkpoint.h"
#include "core/safetensors.h"

namespace napkin {

// One tensor to write: `data` points at its bytes (shape's product of elements of dtype).
struct CheckpointTensor {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    const void* data = nullptr;
};

struct WrittenCheckpoint {
    std::uint64_t file_bytes = 0;
    std::uint64_t data_bytes = 0;
    std::uint64_t checksum = 0;  // FNV-1a 64 of the data section
};

// Writes PATH durably (core/durable_file.h: a temporary of a unique name beside it, fsynced and
// renamed over it, the folder fsynced): PATH is the old file or the whole new one. The header holds
// "format", info's keys (its data_bytes and checksum are computed here), then `extra` in order; the
// tensors go in the order given, stably sorted 4-byte types first so each starts aligned to its
// element size. Throws InputError naming PATH and errno's text when it cannot write (the temporary
// is removed).
WrittenCheckpoint write_checkpoint_file(
    const std::string& path, const std::string& format, CheckpointInfo info,
    const std::vector<std::pair<std::string, std::string>>& extra,
    std::vector<CheckpointTensor> tensors);

// A tensor of a file being read: [begin, end) bytes of the data section.
struct CheckpointFileTensor {
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0, end = 0;
};

// Opens PATH and checks everything but the checksum: a safetensors file (core/safetensors.h, the
// one parser of the format), the format `format`, the metadata, sizes (truncation, trailing
// bytes), napkin's dtypes and the tensor table tiling the data section. Each failure is an
// InputError "PATH: what".
class CheckpointReader {
public:
    CheckpointReader(const std::string& path, const std::string& format);

    const std::string& path() const { return file_->path(); }
    const CheckpointInfo& info() const { return info_; }
    std::uint64_t file_bytes() const { return file_->file_bytes(); }
    const std::map<std::string, CheckpointFileTensor>& tensors() const { return tensors_; }
    const CheckpointFileTensor* find(const std::string& name) const;
    // An extra metadata key (a format's own) as an integer >= min_value; InputError naming the
    // key when it is missing or not one.
    std::int64_t meta_int(const char* key, std::int64_t min_value) const;

    // Hashes the data section; InputError "checksum mismatch" naming both values.
    void verify_checksum() const;
    // n bytes of tensor t from byte `offset` within it.
    void read(const CheckpointFileTensor& t, std::uint64_t offset, void* out, std::size_t n) const;

private:
    // InputError when the header's "header_checksum" does not match its metadata and table.
    void verify_header(const std::map<std::string, std::string>& meta,
                       const std::map<std::string, std::string>& table) const;

    std::unique_ptr<const SafetensorsFile> file_;  // a pointer: readers move
    CheckpointInfo info_;
    std::map<std::string, CheckpointFileTensor> tensors_;
};

// "F32", "BF16", "F16".
std::string safetensors_dtype_name(DType t);
// "[384, 128]"
std::string dims_text(const std::vector<std::int64_t>& shape);
// "fnv1a64:" and 16 hex digits.
std::string checksum_text(std::uint64_t hash);
// The run's options as a checkpoint's metadata writes them, without the loop state: what a
// sharded checkpoint's manifest hashes into "options_hash".
std::string checkpoint_options_text(const TrainOptions& options);

[[noreturn]] void checkpoint_error(const std::string& path, const std::string& what);

}  // namespace napkin
