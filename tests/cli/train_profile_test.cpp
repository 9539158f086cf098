// napkin train --profile's step window and its warning about traces too large to open.
#include "cli/train_profile.h"

#include <gtest/gtest.h>

#include <climits>

#include "core/check.h"

namespace napkin::cli {
namespace {

TEST(ProfileSteps, ParsesEachForm) {
    EXPECT_FALSE(parse_profile("off").any());
    const ProfileSteps all = parse_profile("all");
    EXPECT_EQ(all.first, 1);
    EXPECT_EQ(all.last, INT_MAX);
    const ProfileSteps one = parse_profile("steps:3");
    EXPECT_EQ(one.first, 3);
    EXPECT_EQ(one.last, 3);
    const ProfileSteps window = parse_profile("steps:2-5");
    EXPECT_EQ(window.first, 2);
    EXPECT_EQ(window.last, 5);
    for (const char* bad : {"on", "steps:", "steps:0", "steps:5-2", "steps:2-x", "steps:1.5"})
        EXPECT_THROW(parse_profile(bad), UsageError) << bad;
}

// 56 kB a step (the tiny model's) over 20,000 more steps is 1.1 GB: warned, with the size and
// what to do; 17,000 steps (0.95 GB) or a window's last step are not.
TEST(ProfileSteps, WarnsOnceTheTraceWouldPassAGigabyte) {
    const std::string w = large_trace_warning(120'000, 56'000, 20'000);
    EXPECT_NE(w.find("about 1.1 GB"), std::string::npos) << w;
    EXPECT_NE(w.find("56 kB a step, 20000 steps to go"), std::string::npos) << w;
    EXPECT_NE(w.find("--profile steps:N-M"), std::string::npos) << w;
    EXPECT_EQ(large_trace_warning(120'000, 56'000, 17'000), "");
    EXPECT_EQ(large_trace_warning(2'000'000'000, 56'000, 0), "");
}

}  // namespace
}  // namespace napkin::cli
