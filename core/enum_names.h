// One table of names per enum, used for parsing flags and config fields, for printing, and
// for error messages that list the valid values. Each enum that users can name declares
//   inline constexpr std::array kFooNames = {EnumName<Foo>{Foo::a, "a"}, ...};
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "core/check.h"

namespace napkin {

template <class E>
struct EnumName {
    E value;
    std::string_view name;
};

template <class E, std::size_t N>
constexpr std::optional<E> find_enum(const std::array<EnumName<E>, N>& table, std::string_view text) {
    for (const auto& entry : table) {
        if (entry.name == text) return entry.value;
    }
    return std::nullopt;
}

template <class E, std::size_t N>
constexpr std::string_view enum_name(const std::array<EnumName<E>, N>& table, E value) {
    for (const auto& entry : table) {
        if (entry.value == value) return entry.name;
    }
    return "?";
}

// "a|b|c", for help texts and error messages.
template <class E, std::size_t N>
std::string enum_choices(const std::array<EnumName<E>, N>& table) {
    std::string out;
    for (const auto& entry : table) {
        if (!out.empty()) out += '|';
        out += entry.name;
    }
    return out;
}

// Parses `text` or throws UsageError("<what>: unknown value 'x' (expected a|b|c)").
template <class E, std::size_t N>
E parse_enum(const std::array<EnumName<E>, N>& table, std::string_view text, std::string_view what) {
    if (auto v = find_enum(table, text)) return *v;
    throw UsageError(std::string(what) + ": unknown value '" + std::string(text) + "' (expected " +
                     enum_choices(table) + ")");
}

}  // namespace napkin
