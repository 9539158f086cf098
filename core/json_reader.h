// The one typed reader of napkin's JSON files (model configs, report.json, device profiles):
// each value read knows its path in the document, so every refusal is one line of one shape,
//   <file>: <path.to[3].field>: expected <what>, got <what>
// ("cfg.json: n_layer: expected a positive integer, got \"twelve\""; "got nothing" for an
// absent key), and the few refusals that are not about one value's type or range keep the
// "<file>: <path>: " prefix ("cfg.json: n_kv_head: unknown key (expected bias|...)").
// A null value counts as absent everywhere: Hugging Face writes "n_inner": null for a default,
// napkin writes "host_device": null for a profile without one.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"

namespace napkin {

// Where a document came from and how its refusals are raised: the file named first in each
// message (empty: no prefix, for a caller that adds it), the exception (UsageError for a model
// config, exit 2 as for a flag; InputError for report.json and device profiles, exit 1), and what
// counts as an integer.
class JsonSource {
public:
    enum class Integers {
        tokens,           // 12 only: a size written 12.0 is a mistake (hand-written configs)
        integral_values,  // 12 or 12.0 (files other tools may rewrite through doubles)
    };

    template <class Error>
    static JsonSource raising(std::string file, Integers integers = Integers::tokens) {
        return JsonSource(std::move(file), integers,
                          [](const std::string& message) { throw Error(message); });
    }

    const std::string& file() const { return file_; }
    Integers integers() const { return integers_; }
    // The same file and exception under another format's integer rule (a config inside a report).
    JsonSource with_integers(Integers integers) const { return {file_, integers, raise_}; }

    // Raises "<file>: <path>: <what>" (parts that are empty left out).
    [[noreturn]] void fail(std::string_view path, std::string_view what) const;

private:
    using Raise = void (*)(const std::string& message);
    JsonSource(std::string file, Integers integers, Raise raise)
        : file_(std::move(file)), integers_(integers), raise_(raise) {}

    std::string file_;
    Integers integers_;
    Raise raise_;
};

// One value of a document (possibly absent) and its path. Typed reads refuse an absent value;
// optional() and present() are how a field is made optional.
class JsonField {
public:
    // The document's root, or a value whose place the caller names (`path`). `doc` and `source`
    // must outlive every field read from it.
    JsonField(const nlohmann::json& doc, const JsonSource& source, std::string path = "")
        : v_(&doc), path_(std::move(path)), source_(&source) {}
    // A field keeps pointers: a temporary document or source would dangle.
    JsonField(const nlohmann::json&&, const JsonSource&, std::string = "") = delete;
    JsonField(const nlohmann::json&, const JsonSource&&, std::string = "") = delete;

    const std::string& path() const { return path_; }
    const JsonSource& source() const { return *source_; }
    bool present() const { return v_ != nullptr && !v_->is_null(); }
    // This value and path read under another source's rules.
    JsonField read_as(const JsonSource& source) const { return {v_, path_, &source}; }
    JsonField read_as(const JsonSource&&) const = delete;

    // A member of this object, absent or not; refuses when this is not an object.
    JsonField operator[](std::string_view key) const;
    // An element of this array, absent past its end; refuses when this is not an array.
    JsonField operator[](std::size_t i) const;
    // True when this is an object holding `key` with a non-null value.
    bool has(std::string_view key) const;

    // The value, whatever its type; refuses only when absent.
    const nlohmann::json& value() const;
    // This, after checking that it is an object.
    const JsonField& object() const;

    std::string string() const;
    bool boolean() const;
    double number() const;        // any number
    double positive() const;      // finite and > 0
    double non_negative() const;  // finite and >= 0
    double fraction() const;      // in [0, 1)

    // An integer in [lo, hi] (by the source's Integers rule), refused when fractional.
    template <class Int>
    Int integer(Int lo = std::numeric_limits<Int>::min(),
                Int hi = std::numeric_limits<Int>::max()) const {
        static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>);
        if constexpr (std::is_signed_v<Int>)
            return static_cast<Int>(signed_integer(lo, hi, std::numeric_limits<Int>::min(),
                                                   std::numeric_limits<Int>::max()));
        else
            return static_cast<Int>(unsigned_integer(lo, hi, std::numeric_limits<Int>::max()));
    }

    template <class E, std::size_t N>
    E enumeration(const std::array<EnumName<E>, N>& names) const {
        const std::string text = string();
        if (auto e = find_enum(names, text)) return *e;
        expected("one of " + enum_choices(names));
    }

    // Each element of this array read by `read(JsonField)` (a function or a member such as
    // &JsonField::string), its path "<path>[i]".
    template <class Read>
    auto elements(Read read) const {
        const nlohmann::json& v = array();
        std::vector<std::decay_t<std::invoke_result_t<Read&, const JsonField&>>> out;
        out.reserve(v.size());
        for (std::size_t i = 0; i < v.size(); ++i)
            out.push_back(std::invoke(read, element(v, i)));
        return out;
    }

    // fn(key, JsonField) for each member of this object, its path "<path>.key".
    template <class Fn>
    void members(Fn fn) const {
        const nlohmann::json& v = object().value();
        for (const auto& item : v.items())
            fn(item.key(), member(item.value(), item.key()));
    }

    // read(*this) when present, else nullopt; `read` may be a member (&JsonField::string).
    template <class Read>
    auto optional(Read read) const
        -> std::optional<std::decay_t<std::invoke_result_t<Read&, const JsonField&>>> {
        if (!present()) return std::nullopt;
        return std::invoke(read, *this);
    }

    // Refuses the first key of this object that is neither in `listed` (named in the message)
    // nor in `also_allowed`: in a strict format a misspelt optional key would otherwise be
    // ignored without a word.
    void refuse_unknown_keys(std::span<const std::string> listed,
                             std::span<const std::string_view> also_allowed = {}) const;

    // The version N of a schema string "<name>/N" with N in 1..newest; a newer version is
    // refused by name ("... got \"napkin-train-report/9\" (newer than this napkin reads: update
    // napkin)"), and so is any other string.
    int schema_version(std::string_view name, int newest) const;

    // "<file>: <path>: <what>".
    [[noreturn]] void fail(std::string_view what) const { source_->fail(path_, what); }
    // "<file>: <path>: expected <what>, got <this value>".
    [[noreturn]] void expected(std::string_view what) const;

private:
    JsonField(const nlohmann::json* v, std::string path, const JsonSource* source)
        : v_(v), path_(std::move(path)), source_(source) {}

    const nlohmann::json& array() const;
    JsonField element(const nlohmann::json& array, std::size_t i) const;
    JsonField member(const nlohmann::json& v, std::string_view key) const;
    std::int64_t signed_integer(std::int64_t lo, std::int64_t hi, std::int64_t type_min,
                                std::int64_t type_max) const;
    std::uint64_t unsigned_integer(std::uint64_t lo, std::uint64_t hi,
                                   std::uint64_t type_max) const;

    const nlohmann::json* v_;  // null when absent
    std::string path_;
    const JsonSource* source_;
};

}  // namespace napkin
