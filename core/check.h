// Errors, one policy per layer (see STYLE.md):
//  - NAPKIN_ASSERT(cond, msg): a broken invariant inside napkin. Always on (never compiled
//    out like assert), throws napkin::InternalError naming the expression, file and line.
//  - UsageError: the user asked for something invalid (a flag, a value, a config field).
//    The CLI prints its one-line message and exits 2.
//  - InputError: a file the user gave cannot be used (missing, truncated, corrupt).
//    The CLI prints its one-line message and exits 1.
//  - OutOfMemory: the accounting allocator's raw memory refused a request; the message names
//    the tensor, its category and size, and what was live. The CLI adds the prediction, exits 1.
// Only cli/main.cpp and the viewer's open path catch these; library code never exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace napkin {

class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class InputError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
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
