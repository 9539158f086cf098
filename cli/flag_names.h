// The CLI's names for the settings library code names by field (core/check.h, name_fields): one
// table, so that core/ and estimator/ say `{micro_batch}` and the user reads `--micro-batch`.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace napkin::cli {

// The flag that sets `field` ("micro_batch" -> "--micro-batch", "offload_optimizer" ->
// "--offload optimizer"); a field with no flag is written back marked, "{field}", so that a
// missing row shows (and tests/cli's flag-name check fails) instead of reading as a word.
std::string flag_for_field(std::string_view field);

// `marked` text (an error's marked(), the estimator's report or JSON) with each `{field}`
// written as its flag.
std::string with_flags(std::string_view marked);

// One line for the user: a UserError's message with flags, anything else's what().
std::string message_with_flags(const std::exception& e);

}  // namespace napkin::cli
