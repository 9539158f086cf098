// read_bounded_file: how napkin reads a whole small file it was pointed at (a model config, a
// checkpoint manifest, a run report, a device profile, a prompt file), so that a hostile or
// mistaken path never hangs or floods it:
//   - a FIFO is opened O_NONBLOCK (the open does not wait for a writer) and then refused, as are
//     character and block devices (/dev/zero, /dev/stdin) and folders: "not a regular file";
//   - the file is read up to `max_bytes`: one larger (or growing while read) is refused with its
//     size and the limit, before its bytes are held in memory.
// Large binary inputs (checkpoint tensors, token shards, traces) are mapped, not read, and refuse
// non-regular files where they open them (core/safetensors.h open_regular_file, JsonText).
// Tests: tests/fault/fault_test.cpp (FIFOs, devices, sparse files past the limit).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace napkin {

// The limits napkin's readers use: generous against any real file, small against a runaway one.
inline constexpr std::uint64_t kMaxConfigBytes = 16ull << 20;    // a model or HF config.json
inline constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;  // a ZeRO checkpoint manifest
inline constexpr std::uint64_t kMaxReportBytes = 1024ull << 20;  // report.json, ~200 B a step
inline constexpr std::uint64_t kMaxProfileBytes = 16ull << 20;   // a device profile (~100 KB)
inline constexpr std::uint64_t kMaxPromptBytes = 64ull << 20;    // generate's --prompt-file

// "" with `text` holding the whole file, or why it cannot be read, without the path:
// "cannot open (No such file or directory)", "not a regular file (a FIFO)",
// "17179869184 bytes, over the limit of 16777216 bytes for this file".
std::string read_bounded_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                              std::string& text);

}  // namespace napkin
