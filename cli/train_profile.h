// napkin train --profile: which steps get a trace. off | all | steps:N-M, 1-based and inclusive,
// the steps as the progress lines number them.
#pragma once

#include <string>

namespace napkin::cli {

// off is none (first > last); all is every step (last = INT_MAX until the run's length is known).
struct ProfileSteps {
    int first = 0, last = -1;
    bool any() const { return last >= first; }
};

// UsageError naming --profile when the value is none of the three forms, or N > M, or N < 1.
ProfileSteps parse_profile(const std::string& profile);

}  // namespace napkin::cli
