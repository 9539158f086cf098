#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/half.h"

namespace napkin {

// Tensors are little-endian in the file and converted in place.
static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes a little-endian host");

namespace {

using json = nlohmann::json;

// The safetensors library's own cap on the header.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeInfo {
    std::string_view name;
    int bytes;
    std::optional<DType> dtype;  // the types napkin reads
};

// The dtypes of the safetensors specification that have a whole-byte element size.
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {"F32", 4, DType::f32},
    {"F16", 2, DType::f16},
    {"BF16", 2, DType::bf16},
    {"F64", 8, std::nullopt},
    {"I64", 8, std::nullopt},
    {"I32", 4, std::nullopt},
    {"I16", 2, std::nullopt},
    {"I8", 1, std::nullopt},
    {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},
    {"U16", 2, std::nullopt},
    {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
}};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    throw InputError(path + ": " + what);
}

std::string range_text(std::uint64_t b, std::uint64_t e) {
    // Appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "[" + std::string&&.
    std::string out = "[";
    out += std::to_string(b);
    out += ", ";
    out += std::to_string(e);
    out += ")";
    return out;
}

// A non-negative JSON integer, else InputError naming the tensor and field.
std::uint64_t json_uint(const json& v, const std::string& path, const std::string& name,
                        const char* field) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
        return static_cast<std::uint64_t>(v.get<std::int64_t>());
    }
    bad(path,
        "tensor '" + name + "': " + field + " must hold non-negative integers, found " + v.dump());
}

SafetensorsTensor parse_entry(const std::string& path, const std::string& name, const json& e,
                              std::uint64_t data_bytes) {
    if (!e.is_object()) {
        bad(path, "tensor '" + name + "': expected an object with dtype, shape, data_offsets");
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
        if (!e.contains(field)) bad(path, "tensor '" + name + "': missing \"" + field + "\"");
    }
    SafetensorsTensor t;
    t.name = name;
    const json& dt = e["dtype"];
    if (!dt.is_string()) {
        bad(path, "tensor '" + name + "': dtype must be a string, found " + dt.dump());
    }
    t.dtype_name = dt.get<std::string>();
    const auto info = std::find_if(kDTypes.begin(), kDTypes.end(),
                                   [&](const DTypeInfo& d) { return d.name == t.dtype_name; });
    if (info == kDTypes.end()) {
        bad(path, "tensor '" + name + "' has unknown dtype '" + t.dtype_name +
                      "' (expected F32, F16, BF16 or another safetensors dtype)");
    }
    t.dtype = info->dtype;
    t.element_bytes = info->bytes;

    const json& shape = e["shape"];
    if (!shape.is_array()) {
        bad(path, "tensor '" + name + "': shape must be an array, found " + shape.dump());
    }
    std::uint64_t numel = 1;
    for (const json& d : shape) {
        const std::uint64_t dim = json_uint(d, path, name, "shape");
        if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
            (dim != 0 && numel > std::numeric_limits<std::uint64_t>::max() / 8 / dim)) {
            bad(path, "tensor '" + name + "': shape " + shape.dump() + " is too large");
        }
        numel *= dim;
        t.shape.push_back(static_cast<std::int64_t>(dim));
    }

    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2) {
        bad(path, "tensor '" + name + "': data_offsets must be [begin, end], found " + off.dump());
    }
    t.begin = json_uint(off[0], path, name, "data_offsets");
    t.end = json_uint(off[1], path, name, "data_offsets");
    if (t.end < t.begin) {
        bad(path, "tensor '" + name + "': data_offsets " + range_text(t.begin, t.end) +
                      " end before they begin");
    }
    if (t.end > data_bytes) {
        bad(path, "tensor '" + name + "': data_offsets " + range_text(t.begin, t.end) +
                      " lie beyond the data section (" + std::to_string(data_bytes) +
                      " bytes; truncated file?)");
    }
    const std::uint64_t expected = numel * static_cast<std::uint64_t>(t.element_bytes);
    if (t.bytes() != expected) {
        bad(path, "tensor '" + name + "': data_offsets span " + std::to_string(t.bytes()) +
                      " bytes " + range_text(t.begin, t.end) + ", but " + t.dtype_name + " " +
                      shape_text(t.shape) + " needs " + std::to_string(expected));
    }
    return t;
}

}  // namespace

std::int64_t SafetensorsTensor::numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
        n *= d;
    }
    return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + ")";
}

void pread_exact(int fd, void* buf, std::size_t bytes, std::uint64_t offset,
                 const std::string& path) {
    auto* p = static_cast<unsigned char*>(buf);
    while (bytes > 0) {
        const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
        if (n < 0) {
            if (errno == EINTR) continue;
            bad(path, "read failed at byte " + std::to_string(offset) + " (" +
                          std::strerror(errno) + ")");
        }
        if (n == 0) {
            bad(path, "unexpected end of file at byte " + std::to_string(offset) + " (truncated?)");
        }
        p += n;
        bytes -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
}

void convert_to_f32(DType dtype, const void* src, std::size_t count, float* out) {
    const auto* s = static_cast<const unsigned char*>(src);
    switch (dtype) {
        case DType::f32:
            std::memcpy(out, s, count * sizeof(float));
            return;
        case DType::bf16:
            for (std::size_t i = 0; i < count; ++i) {
                std::uint16_t bits;
                std::memcpy(&bits, s + 2 * i, 2);
                out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
            }
            return;
        case DType::f16:
            for (std::size_t i = 0; i < count; ++i) {
                f16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                out[i] = static_cast<float>(h);
            }
            return;
        default:
            break;
    }
    NAPKIN_ASSERT(false,
                  "convert_to_f32: dtype " << dtype_name(dtype) << " is not f32, f16 or bf16");
}

namespace {

// The format maps strings to strings (the reference library refuses anything else).
void read_metadata(const json& entry, const std::string& path,
                   std::map<std::string, std::string>& out) {
    if (!entry.is_object()) bad(path, "__metadata__ must be an object of strings");
    for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) {
            bad(path, "__metadata__ key '" + k + "' must be a string, found " +
                          v.dump(-1, ' ', false, json::error_handler_t::replace));
        }
        out[k] = v.get<std::string>();
    }
}

}  // namespace

int open_regular_file(const std::string& path, std::uint64_t& bytes) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) bad(path, std::string("cannot open (") + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        bad(path, "not a regular file");
    }
    bytes = static_cast<std::uint64_t>(st.st_size);
    return fd;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    fd_ = open_regular_file(path, file_bytes_);
    try {
        read_header();
    } catch (...) {
        ::close(fd_);
        throw;
    }
}

void SafetensorsFile::read_header() {
    const std::string& path = path_;
    if (file_bytes_ < 8) {
        bad(path, "truncated or not a safetensors file: " + std::to_string(file_bytes_) +
                      " bytes, too short for the 8-byte header length");
    }
    unsigned char len_bytes[8];
    pread_exact(fd_, len_bytes, 8, 0, path);
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) {
        header_bytes = (header_bytes << 8) | len_bytes[i];
    }
    if (header_bytes > kMaxHeaderBytes) {
        bad(path, "not a safetensors file: header length " + std::to_string(header_bytes) +
                      " exceeds the format's limit of " + std::to_string(kMaxHeaderBytes) +
                      " bytes");
    }
    if (header_bytes > file_bytes_ - 8) {
        bad(path, "truncated: safetensors header length " + std::to_string(header_bytes) +
                      " goes beyond the file (" + std::to_string(file_bytes_) + " bytes)");
    }
    std::string text(header_bytes, '\0');
    pread_exact(fd_, text.data(), text.size(), 8, path);
    data_start_ = 8 + header_bytes;

    json header;
    try {
        header = json::parse(text);
    } catch (const json::exception& e) {
        bad(path, std::string("safetensors header is not valid JSON (") + e.what() + ")");
    }
    if (!header.is_object()) bad(path, "safetensors header must be a JSON object");
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            read_metadata(entry, path, metadata_);
            continue;
        }
        tensors_.push_back(parse_entry(path, name, entry, data_bytes()));
    }
    // Data order; two tensors may touch but not share bytes (the reference implementation
    // also forbids gaps: check_tiled()).
    std::sort(tensors_.begin(), tensors_.end(),
              [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                  return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
              });
    const SafetensorsTensor* prev = nullptr;
    for (const SafetensorsTensor& t : tensors_) {
        if (t.bytes() == 0) continue;
        if (prev != nullptr && t.begin < prev->end) {
            bad(path, "tensors '" + prev->name + "' " + range_text(prev->begin, prev->end) +
                          " and '" + t.name + "' " + range_text(t.begin, t.end) + " overlap");
        }
        prev = &t;
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
        index_.emplace(tensors_[i].name, i);
    }
}

void SafetensorsFile::check_tiled() const {
    std::uint64_t at = 0;
    for (const SafetensorsTensor& t : tensors_) {
        if (t.begin != at) {
            bad(path_, "tensor data_offsets leave a gap or overlap at byte " + std::to_string(at) +
                           " (tensor '" + t.name + "' starts at " + std::to_string(t.begin) + ")");
        }
        at = t.end;
    }
    if (at != data_bytes()) {
        bad(path_, "the tensors cover " + std::to_string(at) + " bytes of the " +
                       std::to_string(data_bytes()) + "-byte data section");
    }
}

void SafetensorsFile::read(std::uint64_t offset, void* out, std::size_t n) const {
    NAPKIN_ASSERT(offset + n <= data_bytes(), "safetensors read past the data section");
    pread_exact(fd_, out, n, data_start_ + offset, path_);
}

SafetensorsFile::~SafetensorsFile() {
    ::close(fd_);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

DType SafetensorsFile::readable_dtype(const SafetensorsTensor& t) const {
    if (!t.dtype) {
        bad(path_,
            "tensor '" + t.name + "' has dtype " + t.dtype_name + " (expected F32, F16 or BF16)");
    }
    return *t.dtype;
}

void SafetensorsFile::read_f32(const SafetensorsTensor& t, float* out) const {
    const DType dt = readable_dtype(t);
    if (dt == DType::f32) {
        pread_exact(fd_, out, t.bytes(), data_start_ + t.begin, path_);
        return;
    }
    // 16-bit: through a 1 MiB staging chunk, converted as it arrives.
    constexpr std::size_t kChunk = std::size_t{1} << 19;  // elements
    auto chunk = std::make_unique_for_overwrite<std::uint16_t[]>(kChunk);
    const auto n = static_cast<std::size_t>(t.numel());
    for (std::size_t i = 0; i < n; i += kChunk) {
        const std::size_t m = std::min(kChunk, n - i);
        pread_exact(fd_, chunk.get(), m * 2, data_start_ + t.begin + i * 2, path_);
        convert_to_f32(dt, chunk.get(), m, out + i);
    }
}

}  // namespace napkin
