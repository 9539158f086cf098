// core/check.h: a user's error names settings by field, and each front end writes them its way.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/check.h"

namespace napkin {
namespace {

std::string shout(std::string_view field) {
    std::string out(1, '<');  // appends: GCC 12 warns (-Wrestrict) on "<" + s + ">"
    out.append(field);
    return out += '>';
}

TEST(NameFields, WritesEachMarkedFieldBareOrAsTheNamerSays) {
    const std::string marked = "{micro_batch} x {seq_len}: 8 x 1024 is too many";
    EXPECT_EQ(name_fields(marked), "micro_batch x seq_len: 8 x 1024 is too many");
    EXPECT_EQ(name_fields(marked, shout), "<micro_batch> x <seq_len>: 8 x 1024 is too many");
}

TEST(NameFields, KeepsBracesThatMarkNoField) {
    // Upper case, an empty pair, an unclosed one, a JSON object: text, not fields.
    for (const char* text : {"{A}", "{}", "{x", "x}", "{\"a\": 1}", "{a b}", "{1x}", "{{"})
        EXPECT_EQ(name_fields(text, shout), text);
    EXPECT_EQ(name_fields("{{zero}}", shout), "{<zero>}");
}

TEST(UserError, WhatNamesFieldsBareAndMarkedKeepsTheMarks) {
    try {
        throw UsageError("{zero}: must be 0, 1, 2 or 3 (got 4)");
    } catch (const UserError& e) {
        EXPECT_STREQ(e.what(), "zero: must be 0, 1, 2 or 3 (got 4)");
        EXPECT_STREQ(e.marked(), "{zero}: must be 0, 1, 2 or 3 (got 4)");
        EXPECT_EQ(name_fields(e.marked(), shout), "<zero>: must be 0, 1, 2 or 3 (got 4)");
    }
    const InputError copy = InputError("data.bin: {resume} this run");
    const InputError again = copy;  // NOLINT(performance-unnecessary-copy-initialization)
    EXPECT_STREQ(again.marked(), "data.bin: {resume} this run");
    EXPECT_STREQ(again.what(), "data.bin: resume this run");
}

}  // namespace
}  // namespace napkin
