// A small generic reader of the safetensors format (huggingface/safetensors):
//   8 bytes   N, little-endian u64
//   N bytes   JSON header: {"__metadata__": {string: string},
//                           name: {"dtype": "F32", "shape": [d0, ...], "data_offsets": [b, e]},
//                           ...}
//   the rest  the data section; [b, e) are byte offsets from its start, tensors row-major and
//             little-endian
// napkin's one parser of the format. It validates the whole table when it opens the file (metadata
// strings only, as the format says; offsets inside the data section; size = numel * element size;
// no two tensors overlapping) and reads tensors of dtype F32, F16 or BF16 as fp32; other dtypes it
// knows (I64, BOOL, ...) stay in the table, so a file with integer buffers beside its weights
// still opens, but reading one of them as floats is an InputError naming it. Every error is an
// InputError "<path>: <what>". Used by the weight import (core/engine/weights_import.h) and, with
// napkin's own metadata and stricter rules on top, by the checkpoint reader
// (core/engine/checkpoint_file.h). Tests: tests/engine/weights_import_test.cpp (the format's
// errors), tests/engine/checkpoint_test.cpp (napkin's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace napkin {

struct SafetensorsTensor {
    std::string name;
    std::string dtype_name;      // as written: "F32", "BF16", "I64", ...
    std::optional<DType> dtype;  // f32, f16 or bf16; empty for the types napkin does not read
    int element_bytes = 0;
    std::vector<std::int64_t> shape;  // empty for a scalar
    std::uint64_t begin = 0;          // byte offsets in the data section, [begin, end)
    std::uint64_t end = 0;

    std::int64_t numel() const;
    std::uint64_t bytes() const { return end - begin; }
};

// "(768, 2304)", "()" for a scalar: shapes in error messages.
std::string shape_text(const std::vector<std::int64_t>& shape);

class SafetensorsFile {
public:
    // Opens PATH, reads and validates the header. InputError: missing, unreadable or not a
    // regular file (a FIFO is refused, never waited on), shorter than 8 bytes, a header length
    // beyond the format's limit or the file, a header that is not a JSON object, metadata that is
    // not strings, a malformed entry, an unknown dtype, offsets outside the data section or not
    // matching the shape, overlapping tensors.
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    std::uint64_t file_bytes() const { return file_bytes_; }
    std::uint64_t data_start() const { return data_start_; }  // 8 + N: where offsets count from
    int fd() const { return fd_; }

    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
    const SafetensorsTensor* find(std::string_view name) const;  // nullptr when absent
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    std::uint64_t data_bytes() const { return file_bytes_ - data_start_; }

    // The reference library's stricter rule: the tensors tile the data section, no gap between
    // two and none at the end. InputError naming the first byte that breaks it.
    void check_tiled() const;

    // The tensor's dtype if napkin reads it (f32, f16, bf16), else InputError naming the tensor.
    DType readable_dtype(const SafetensorsTensor& t) const;
    // Reads the tensor's numel() values as fp32 into `out` with pread.
    void read_f32(const SafetensorsTensor& t, float* out) const;
    // n bytes of the data section from byte `offset` (InputError on a short read).
    void read(std::uint64_t offset, void* out, std::size_t n) const;

private:
    void read_header();

    std::string path_;
    int fd_ = -1;
    std::uint64_t file_bytes_ = 0;
    std::uint64_t data_start_ = 0;
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, std::size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

// Converts `count` little-endian elements of `dtype` (f32, f16 or bf16) at `src`, which need not
// be aligned, to fp32.
void convert_to_f32(DType dtype, const void* src, std::size_t count, float* out);

// Opens PATH read-only, refusing anything but a regular file without waiting on it (a FIFO
// would block an ordinary open); its size in `bytes`. InputError naming PATH.
int open_regular_file(const std::string& path, std::uint64_t& bytes);

// pread until `bytes` bytes at `offset` are in `buf`; InputError naming PATH on an error or an
// early end of file.
void pread_exact(int fd, void* buf, std::size_t bytes, std::uint64_t offset,
                 const std::string& path);

}  // namespace napkin
