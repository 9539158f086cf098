// The typed JSON reader: paths through objects and arrays, each refusal's one-line shape, the
// two integer rules, optional and unknown keys, schema versions, and the exception raised.
#include "core/json_reader.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace napkin {
namespace {

using nlohmann::json;

enum class Colour { red, green };
constexpr std::array kColourNames = {EnumName<Colour>{Colour::red, "red"},
                                     EnumName<Colour>{Colour::green, "green"}};

// The message `read` raises as InputError, or "" when it raises nothing.
template <class Read>
std::string input_error(Read read) {
    try {
        read();
    } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
        return m;
    }
    return "";
}

const json kDoc = json::parse(R"({
    "name": "tiny", "layers": 12, "ratio": 0.5, "on": true, "none": null, "colour": "green",
    "half": 12.5, "whole": 12.0, "negative": -3, "huge": 18446744073709551615,
    "runs": [{"loss": 3.5, "tags": ["a", 7]}, {"loss": "x"}],
    "sizes": {"a": 1, "b": 2}
})");

TEST(JsonReader, ReadsEachTypeAndNamesThePathOfAWrongOne) {
    const JsonSource src = JsonSource::raising<InputError>("f.json");
    const JsonField doc(kDoc, src);
    EXPECT_EQ(doc["name"].string(), "tiny");
    EXPECT_EQ(doc["layers"].integer<int>(), 12);
    EXPECT_EQ(doc["ratio"].fraction(), 0.5);
    EXPECT_TRUE(doc["on"].boolean());
    EXPECT_EQ(doc["colour"].enumeration(kColourNames), Colour::green);
    EXPECT_EQ(doc["runs"][0]["loss"].number(), 3.5);
    EXPECT_EQ(doc["runs"].elements([](const JsonField& r) { return r.path(); }),
              (std::vector<std::string>{"runs[0]", "runs[1]"}));

    EXPECT_EQ(input_error([&] { doc["layers"].string(); }),
              "f.json: layers: expected a string, got 12");
    EXPECT_EQ(input_error([&] { doc["name"].boolean(); }),
              "f.json: name: expected true or false, got \"tiny\"");
    EXPECT_EQ(input_error([&] { doc["runs"].number(); }),
              "f.json: runs: expected a number, got an array");
    EXPECT_EQ(input_error([&] { doc["sizes"].elements(&JsonField::number); }),
              "f.json: sizes: expected an array, got an object");
    EXPECT_EQ(input_error([&] { doc["name"]["x"].string(); }),
              "f.json: name: expected an object, got \"tiny\"");
    EXPECT_EQ(input_error([&] { doc["colour"].enumeration(std::array{kColourNames[0]}); }),
              "f.json: colour: expected one of red, got \"green\"");
    EXPECT_EQ(input_error([&] { doc["half"].fraction(); }),
              "f.json: half: expected a number in [0, 1), got 12.5");
    EXPECT_EQ(input_error([&] { doc["negative"].positive(); }),
              "f.json: negative: expected a positive number, got -3");
    EXPECT_EQ(input_error([&] { doc["negative"].non_negative(); }),
              "f.json: negative: expected a number >= 0, got -3");
}

// Nested objects and arrays give the path "a.b[3].c"; every element of an array is read.
TEST(JsonReader, PathsRunThroughObjectsAndArrays) {
    const JsonSource src = JsonSource::raising<InputError>("f.json");
    const JsonField doc(kDoc, src);
    EXPECT_EQ(input_error([&] {
                  doc["runs"].elements([](const JsonField& r) { return r["loss"].number(); });
              }),
              "f.json: runs[1].loss: expected a number, got \"x\"");
    EXPECT_EQ(input_error([&] { doc["runs"][0]["tags"].elements(&JsonField::string); }),
              "f.json: runs[0].tags[1]: expected a string, got 7");
    std::vector<std::string> seen;
    doc["sizes"].members([&](const std::string& key, const JsonField& v) {
        seen.push_back(key + "=" + std::to_string(v.integer<int>()) + "@" + v.path());
    });
    EXPECT_EQ(seen, (std::vector<std::string>{"a=1@sizes.a", "b=2@sizes.b"}));
    // A caller that names the place of a value it hands on (a sub-document).
    const JsonField inner(kDoc["sizes"], src, "outer.sizes");
    EXPECT_EQ(input_error([&] { inner["a"].string(); }),
              "f.json: outer.sizes.a: expected a string, got 1");
}

// Absent and null are the same to a reader: optional() gives nullopt, a typed read refuses.
TEST(JsonReader, MissingAndNullKeys) {
    const JsonSource src = JsonSource::raising<InputError>("f.json");
    const JsonField doc(kDoc, src);
    EXPECT_FALSE(doc["nope"].present());
    EXPECT_FALSE(doc["none"].present());
    EXPECT_FALSE(doc.has("none"));
    EXPECT_TRUE(doc.has("name"));
    EXPECT_EQ(doc["nope"].optional(&JsonField::string), std::nullopt);
    EXPECT_EQ(doc["none"].optional(&JsonField::number), std::nullopt);
    EXPECT_EQ(doc["ratio"].optional(&JsonField::number), 0.5);
    EXPECT_EQ(input_error([&] { doc["nope"].number(); }),
              "f.json: nope: expected a number, got nothing");
    EXPECT_EQ(input_error([&] { doc["none"].number(); }),
              "f.json: none: expected a number, got null");
    EXPECT_EQ(input_error([&] { doc["nope"]["deeper"].number(); }),
              "f.json: nope: expected an object, got nothing");
}

TEST(JsonReader, IntegersAreRefusedWhenFractionalOrOutOfRange) {
    const JsonSource tokens = JsonSource::raising<InputError>("f.json");
    const JsonSource values =
        JsonSource::raising<InputError>("f.json", JsonSource::Integers::integral_values);
    const JsonField strict(kDoc, tokens);
    const JsonField lenient(kDoc, values);
    // 12.0: a mistake in a hand-written config, a double's rewrite of 12 in a report.
    EXPECT_EQ(input_error([&] { strict["whole"].integer<int>(); }),
              "f.json: whole: expected an integer, got 12.0");
    EXPECT_EQ(lenient["whole"].integer<int>(), 12);
    for (const JsonField* f : {&strict, &lenient}) {
        EXPECT_EQ(input_error([&] { (*f)["half"].integer<int>(); }),
                  "f.json: half: expected an integer, got 12.5");
    }
    EXPECT_EQ(input_error([&] { strict["negative"].integer<std::int64_t>(1); }),
              "f.json: negative: expected a positive integer, got -3");
    EXPECT_EQ(input_error([&] { strict["negative"].integer<std::uint64_t>(); }),
              "f.json: negative: expected an integer >= 0, got -3");
    EXPECT_EQ(input_error([&] { strict["layers"].integer<int>(1, 8); }),
              "f.json: layers: expected an integer in [1, 8], got 12");
    EXPECT_EQ(input_error([&] { strict["layers"].integer<int>(16); }),
              "f.json: layers: expected an integer >= 16, got 12");
    EXPECT_EQ(input_error([&] { strict["huge"].integer<std::int64_t>(); }),
              "f.json: huge: expected an integer in [-9223372036854775808, "
              "9223372036854775807], got 18446744073709551615");
    EXPECT_EQ(input_error([&] { strict["huge"].integer<int>(); }),
              "f.json: huge: expected an integer in [-2147483648, 2147483647], got "
              "18446744073709551615");
    EXPECT_EQ(strict["huge"].integer<std::uint64_t>(), 18446744073709551615ull);
}

TEST(JsonReader, UnknownKeysAreRefusedByName) {
    const JsonSource src = JsonSource::raising<InputError>("f.json");
    const json doc = {{"a", 1}, {"b", 2}, {"note", "x"}};
    const std::vector<std::string> listed = {"a", "b"};
    const std::vector<std::string_view> informational = {"note"};
    EXPECT_EQ(input_error([&] { JsonField(doc, src).refuse_unknown_keys(listed, informational); }),
              "");
    EXPECT_EQ(input_error([&] { JsonField(doc, src).refuse_unknown_keys(listed); }),
              "f.json: note: unknown key (expected a|b)");
}

TEST(JsonReader, SchemaVersionsNewerThanKnownAreRefusedByName) {
    const JsonSource src = JsonSource::raising<InputError>("");
    auto version = [&](const json& schema) {
        const json doc = {{"schema", schema}};
        return JsonField(doc, src)["schema"].schema_version("fmt", 3);
    };
    EXPECT_EQ(version("fmt/1"), 1);
    EXPECT_EQ(version("fmt/3"), 3);
    EXPECT_EQ(
        input_error([&] { version("fmt/4"); }),
        "schema: expected fmt/1-3, got \"fmt/4\" (newer than this napkin reads: update napkin)");
    for (const char* bad : {"fmt/0", "fmt/", "fmt/2x", "other/1", "fmt1"}) {
        EXPECT_EQ(input_error([&] { version(bad); }),
                  "schema: expected fmt/1-3, got \"" + std::string(bad) + "\"");
    }
    EXPECT_EQ(input_error([&] { version(2); }), "schema: expected fmt/1-3, got 2");
}

// The error type is the source's: UsageError for a config named by a flag, InputError for a
// file napkin wrote. A document-level refusal has no path; a source without a file, no file.
TEST(JsonReader, RaisesTheSourcesErrorType) {
    const JsonSource usage = JsonSource::raising<UsageError>("cfg.json");
    const json array = json::array();
    try {
        JsonField(array, usage).object();
        FAIL() << "no error";
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(), "cfg.json: expected an object, got an array");
    }
    const JsonSource bare = JsonSource::raising<InputError>("");
    EXPECT_EQ(input_error([&] { JsonField(array, bare).object(); }),
              "expected an object, got an array");
    EXPECT_EQ(input_error([&] { JsonField(kDoc, bare)["name"].fail("is taken"); }),
              "name: is taken");
    // A value quoted in a refusal is cut to one readable line.
    const json long_text = {{"s", std::string(500, 'x')}};
    const std::string m = input_error([&] { JsonField(long_text, bare)["s"].number(); });
    EXPECT_LT(m.size(), 100u) << m;
    EXPECT_TRUE(m.ends_with("...")) << m;
}

}  // namespace
}  // namespace napkin
