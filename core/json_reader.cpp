// The typed JSON reader: paths, the refusal messages' one shape, and the range texts
// (core/json_reader.h).
#include "core/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>

namespace napkin {

using json = nlohmann::json;

namespace {

// A value as a refusal quotes it: scalars as written (cut at 60 characters, so a long string
// keeps the message one readable line), containers by kind.
std::string describe(const json* v) {
    if (v == nullptr) return "nothing";
    if (v->is_object()) return "an object";
    if (v->is_array()) return "an array";
    std::string text = v->dump(-1, ' ', false, json::error_handler_t::replace);
    constexpr std::size_t kMaxChars = 60;
    if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
    return text;
}

// "a positive integer", "an integer >= 0", "an integer in [1, 1000000]": the range [lo, hi]
// of an integer type whose own range is [type_lo, type_hi], in words.
template <class Int>
std::string integer_text(Int lo, Int hi, Int type_lo, Int type_hi) {
    if (lo == 1 && hi == type_hi) return "a positive integer";
    if (lo == 0 && hi == type_hi) return "an integer >= 0";
    if (lo == type_lo && hi == type_hi) return "an integer";
    if (hi == type_hi) return "an integer >= " + std::to_string(lo);
    if (lo == type_lo) return "an integer <= " + std::to_string(hi);
    return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

constexpr double kTwoTo63 = 9223372036854775808.0;

}  // namespace

void JsonSource::fail(std::string_view path, std::string_view what) const {
    std::string message = file_;
    for (const std::string_view part : {path, what}) {
        if (part.empty()) continue;
        if (!message.empty()) message += ": ";
        message += part;
    }
    raise_(message);
    std::terminate();  // raise_ throws; a Raise that returned would be a bug here
}

void JsonField::expected(std::string_view what) const {
    std::string message = "expected " + std::string(what) + ", got ";
    message += v_ != nullptr && v_->is_null() ? "null" : describe(v_);
    fail(message);
}

JsonField JsonField::member(const json& v, std::string_view key) const {
    return {&v, path_.empty() ? std::string(key) : path_ + "." + std::string(key), source_};
}

JsonField JsonField::element(const json& array, std::size_t i) const {
    return {&array[i], path_ + "[" + std::to_string(i) + "]", source_};
}

JsonField JsonField::operator[](std::string_view key) const {
    const json& o = object().value();
    const auto it = o.find(key);
    if (it == o.end()) return {nullptr, member(o, key).path_, source_};
    return member(*it, key);
}

JsonField JsonField::operator[](std::size_t i) const {
    const json& a = array();
    if (i < a.size()) return element(a, i);
    return {nullptr, path_ + "[" + std::to_string(i) + "]", source_};
}

bool JsonField::has(std::string_view key) const {
    if (!present() || !v_->is_object()) return false;
    const auto it = v_->find(key);
    return it != v_->end() && !it->is_null();
}

const json& JsonField::value() const {
    if (!present()) expected("a value");
    return *v_;
}

const JsonField& JsonField::object() const {
    if (!present() || !v_->is_object()) expected("an object");
    return *this;
}

const json& JsonField::array() const {
    if (!present() || !v_->is_array()) expected("an array");
    return *v_;
}

std::string JsonField::string() const {
    if (!present() || !v_->is_string()) expected("a string");
    return v_->get<std::string>();
}

bool JsonField::boolean() const {
    if (!present() || !v_->is_boolean()) expected("true or false");
    return v_->get<bool>();
}

double JsonField::number() const {
    if (!present() || !v_->is_number()) expected("a number");
    return v_->get<double>();
}

double JsonField::positive() const {
    if (!present() || !v_->is_number() || !(v_->get<double>() > 0) ||
        !std::isfinite(v_->get<double>()))
        expected("a positive number");
    return v_->get<double>();
}

double JsonField::non_negative() const {
    if (!present() || !v_->is_number() || !(v_->get<double>() >= 0) ||
        !std::isfinite(v_->get<double>()))
        expected("a number >= 0");
    return v_->get<double>();
}

double JsonField::fraction() const {
    // NaN fails both comparisons, infinity the second.
    if (!present() || !v_->is_number() || !(v_->get<double>() >= 0.0 && v_->get<double>() < 1.0))
        expected("a number in [0, 1)");
    return v_->get<double>();
}

std::int64_t JsonField::signed_integer(std::int64_t lo, std::int64_t hi, std::int64_t type_min,
                                       std::int64_t type_max) const {
    const bool lenient = source_->integers() == JsonSource::Integers::integral_values;
    std::optional<std::int64_t> n;
    if (!present()) {
        // refused below
    } else if (v_->is_number_unsigned()) {
        const auto u = v_->get<std::uint64_t>();
        if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            n = static_cast<std::int64_t>(u);
    } else if (v_->is_number_integer()) {
        n = v_->get<std::int64_t>();
    } else if (v_->is_number_float() && lenient) {
        const double d = v_->get<double>();
        if (d == std::floor(d) && d >= -kTwoTo63 && d < kTwoTo63) n = static_cast<std::int64_t>(d);
    }
    if (n && *n >= lo && *n <= hi) return *n;
    // An integer outside a type's own range says the range ("expected an integer" would puzzle).
    const bool integral =
        present() && (v_->is_number_integer() ||
                      (lenient && v_->is_number_float() && std::isfinite(v_->get<double>()) &&
                       v_->get<double>() == std::floor(v_->get<double>())));
    if (integral && lo == type_min && hi == type_max)
        expected("an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    expected(integer_text(lo, hi, type_min, type_max));
}

std::uint64_t JsonField::unsigned_integer(std::uint64_t lo, std::uint64_t hi,
                                          std::uint64_t type_max) const {
    const bool lenient = source_->integers() == JsonSource::Integers::integral_values;
    std::optional<std::uint64_t> n;
    if (!present()) {
        // refused below
    } else if (v_->is_number_unsigned()) {
        n = v_->get<std::uint64_t>();
    } else if (v_->is_number_float() && lenient) {
        const double d = v_->get<double>();
        if (d == std::floor(d) && d >= 0 && d < 2 * kTwoTo63) n = static_cast<std::uint64_t>(d);
    }
    if (!n || *n < lo || *n > hi) expected(integer_text<std::uint64_t>(lo, hi, 0, type_max));
    return *n;
}

void JsonField::refuse_unknown_keys(std::span<const std::string> listed,
                                    std::span<const std::string_view> also_allowed) const {
    for (const auto& item : object().value().items()) {
        const std::string& key = item.key();
        if (std::ranges::find(listed, key) != listed.end()) continue;
        if (std::ranges::find(also_allowed, key) != also_allowed.end()) continue;
        std::string choices;
        for (const std::string& k : listed)
            choices += (choices.empty() ? "" : "|") + k;
        member(item.value(), key).fail("unknown key (expected " + choices + ")");
    }
}

int JsonField::schema_version(std::string_view name, int newest) const {
    const std::string prefix = std::string(name) + "/";
    const std::string versions =
        prefix + (newest == 1 ? std::string("1") : "1-" + std::to_string(newest));
    if (!present() || !v_->is_string()) expected(versions);
    const std::string schema = v_->get<std::string>();
    int version = 0;
    if (schema.starts_with(prefix)) {
        const char* first = schema.data() + prefix.size();
        const char* last = schema.data() + schema.size();
        const auto [end, ec] = std::from_chars(first, last, version);
        if (ec != std::errc() || end != last || first == last) version = 0;
    }
    if (version > newest) {
        fail("expected " + versions + ", got " + describe(v_) +
             " (newer than this napkin reads: update napkin)");
    }
    if (version < 1) expected(versions);
    return version;
}

}  // namespace napkin
