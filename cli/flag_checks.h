// Validators the subcommands share. CLI11's own NonNegativeNumber names its range with DBL_MAX
// written out (300 digits), and an unsigned option takes "-1" as 2^64 - 1.
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/check.h"
#include "core/recipe.h"

namespace napkin::cli {

// A whole number >= 0 as typed: digits only. CLI11 reports "--flag: <this message>".
inline CLI::Validator non_negative_integer() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
                return "must be 0 or a positive integer (got '" + s + "')";
            std::uint64_t v = 0;  // CLI11 would saturate a larger one silently
            if (std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc{}) return {};
            return "must be at most 18446744073709551615, 2^64 - 1 (got '" + s + "')";
        },
        "", "non-negative integer");
}

// UsageError when `out` cannot be the file a command writes: a folder, or in a folder that does
// not exist. Checked before the command's work rather than found at the final rename.
inline void check_output_file(const char* flag, const std::string& out) {
    const std::filesystem::path path(out);
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw UsageError(std::string(flag) + " " + out + ": is a folder, expected a file name");
    if (!std::filesystem::is_directory(dir, ec)) {
        throw UsageError(std::string(flag) + " " + out + ": the folder " + dir.string() +
                         " does not exist");
    }
}

// UsageError when `out` is one of `inputs` (the same file by any path, a link or a relative
// one): a command's output never overwrites what it reads or the run it reads from.
inline void refuse_overwriting_input(const char* flag, const std::filesystem::path& out,
                                     const std::vector<std::filesystem::path>& inputs) {
    for (const std::filesystem::path& in : inputs) {
        std::error_code ec;  // false when either does not exist: a new file overwrites nothing
        if (std::filesystem::equivalent(out, in, ec)) {
            throw UsageError(std::string(flag) + ": '" + out.string() + "' is " + in.string() +
                             ", an input of this command; name another output file");
        }
    }
}

// --fp8-amax-history, as train and estimate take it: 0 (current scaling) or a history of up to
// kMaxFp8AmaxHistory steps (Transformer Engine's recipes use up to 1024: more is a typo), and
// only with --precision fp8-amp when given. UsageError naming the flag otherwise.
inline constexpr std::int64_t kMaxFp8AmaxHistory = 4096;
inline void check_fp8_amax_history(std::int64_t history, bool given, Precision precision) {
    if (history < 0 || history > kMaxFp8AmaxHistory) {
        throw UsageError(
            "--fp8-amax-history: must be 0 (current scaling) or a number of steps up to " +
            std::to_string(kMaxFp8AmaxHistory) + " (got " + std::to_string(history) + ")");
    }
    if (given && precision != Precision::fp8_amp)
        throw UsageError("--fp8-amax-history: applies to --precision fp8-amp");
}

}  // namespace napkin::cli
