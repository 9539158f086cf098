// cli/flag_names.h: the one table from the library's fields to napkin's flags.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "cli/flag_names.h"
#include "core/check.h"

namespace napkin::cli {
namespace {

TEST(FlagNames, NamesEachFieldByItsFlag) {
    EXPECT_EQ(flag_for_field("micro_batch"), "--micro-batch");
    EXPECT_EQ(flag_for_field("zero"), "--zero");
    EXPECT_EQ(flag_for_field("gpu_memory_bytes"), "--gpu-mem-gb");  // the flag's unit is GB
    EXPECT_EQ(flag_for_field("offload_optimizer"), "--offload optimizer");
    EXPECT_EQ(flag_for_field("sequence_parallel"), "--sp");
    EXPECT_EQ(flag_for_field("no_such_field"), "{no_such_field}");  // shows, never a bare word
}

TEST(FlagNames, AUserErrorReadsWithFlagsAndOtherErrorsAsTheyAre) {
    const UsageError usage("{micro_batch} x {seq_len}: too many tokens");
    EXPECT_EQ(message_with_flags(usage), "--micro-batch x --seq-len: too many tokens");
    EXPECT_STREQ(usage.what(), "micro_batch x seq_len: too many tokens");
    const std::runtime_error other("{zero} is text here");
    EXPECT_EQ(message_with_flags(other), "{zero} is text here");
    EXPECT_EQ(with_flags("{\n  \"notes\": [\"{tokens} not given\"]\n}"),
              "{\n  \"notes\": [\"--tokens not given\"]\n}");
}

}  // namespace
}  // namespace napkin::cli
