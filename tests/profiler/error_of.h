// The message of the InputError a call throws, for the tests of napkin's file readers.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "core/check.h"

namespace napkin::profiler::test {

// What `fn` throws as InputError; fails the test (and returns "") when it throws nothing.
template <class Fn>
std::string error_of(Fn fn) {
    try {
        fn();
    } catch (const napkin::InputError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no InputError";
    return "";
}

}  // namespace napkin::profiler::test
