// The estimator's refusals in tests: the UsageError an estimate throws, and its message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "estimator/estimate.h"

namespace napkin {

// The message of the UsageError that estimating `in` throws, "" when it runs.
inline std::string usage_error(const EstimateInputs& in) {
    try {
        Estimator{}.run(in);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

// A UsageError whose message contains `needle`, or a test failure naming the input.
inline void expect_usage_error(const EstimateInputs& in, const std::string& needle) {
    const std::string msg = usage_error(in);
    EXPECT_FALSE(msg.empty()) << "expected a UsageError containing " << needle;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
}

}  // namespace napkin
