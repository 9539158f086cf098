// Errors, one policy per layer (see STYLE.md):
//  - NAPKIN_ASSERT(cond, msg): a broken invariant inside napkin. Always on (never compiled
//    out like assert), throws napkin::InternalError naming the expression, file and line.
//  - UsageError: the user asked for something invalid (a flag, a value, a config field).
//    The CLI prints its one-line message and exits 2. Library code names a setting by its
//    field, never by a front end's spelling of it: `{field}` in the message (see below).
//  - InputError: a file the user gave cannot be used (missing, truncated, corrupt).
//    The CLI prints its one-line message and exits 1.
//  - OutOfMemory: the accounting allocator's raw memory refused a request; the message names
//    the tensor, its category and size, and what was live. The CLI adds the prediction, exits 1.
// Only cli/main.cpp and the viewer's open path catch these; library code never exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace napkin {

class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

// A front end's name for a setting's field: the CLI's is its flag ("micro_batch" ->
// "--micro-batch", cli/flag_names.cpp).
using FieldNamer = std::string (*)(std::string_view field);

// `marked` with each `{field}` (a lower-case identifier in braces) written as namer(field), or as
// the bare field when namer is null: "{micro_batch} x {seq_len}: ..." -> "micro_batch x seq_len:
// ..." or "--micro-batch x --seq-len: ...". Other text, braces included, is kept as it is.
std::string name_fields(std::string_view marked, FieldNamer namer = nullptr);

// A user's error, one line: what() names the fields bare (library callers, tests); marked()
// keeps the `{field}` marks for a front end to name them its way (name_fields(e.marked(), namer)).
class UserError : public std::runtime_error {
public:
    explicit UserError(const std::string& marked)
        : std::runtime_error(name_fields(marked)), marked_(marked) {}
    const char* marked() const noexcept { return marked_.what(); }

private:
    std::runtime_error marked_;  // a string whose copy cannot throw, as an exception's must not
};

class UsageError : public UserError {
public:
    using UserError::UserError;
};

class InputError : public UserError {
public:
    using UserError::UserError;
};

class OutOfMemory : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The single [[noreturn]] failure point for broken invariants.
[[noreturn]] void fail_assert(const char* expr, const std::string& msg, const char* file, int line);

}  // namespace napkin

#define NAPKIN_ASSERT(cond, msg)                                                  \
    do {                                                                          \
        if (!(cond)) {                                                            \
            std::ostringstream napkin_assert_os_;                                 \
            napkin_assert_os_ << msg;                                             \
            ::napkin::fail_assert(#cond, napkin_assert_os_.str(), __FILE__, __LINE__); \
        }                                                                         \
    } while (0)
