// Validators the subcommands share. CLI11's own NonNegativeNumber names its range with DBL_MAX
// written out (300 digits), and an unsigned option takes "-1" as 2^64 - 1.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace napkin::cli {

// A whole number >= 0 as typed: digits only. CLI11 reports "--flag: <this message>".
inline CLI::Validator non_negative_integer() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return {};
            return "must be 0 or a positive integer (got '" + s + "')";
        },
        "", "non-negative integer");
}

}  // namespace napkin::cli
