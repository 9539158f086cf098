#include "viewer/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace napkin::viewer {

namespace {

struct Unit {
    double scale;
    const char* name;
    int sig;  // significant digits shown in this unit (0: no decimals)
};

// `sig` significant digits of v as %g writes them (no trailing zeros) but never in exponent form;
// sig 0: no decimals.
std::string significant(double v, int sig) {
    int decimals = 0;
    if (sig > 0 && v != 0) {
        const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(v))));
        decimals = std::max(0, sig - 1 - magnitude);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    std::string s = buf;
    if (s.find('.') != std::string::npos) {
        s.erase(s.find_last_not_of('0') + 1);
        if (s.back() == '.') s.pop_back();
    }
    if (s == "-0") s = "0";
    return s;
}

// v in the largest unit not above |v| (the first one below it); a value that rounds to 1000 of
// its unit moves up to the next ("1 ms", not "1000 us").
template <std::size_t N>
std::string scaled(double v, const Unit (&units)[N]) {
    std::size_t u = 0;
    while (u + 1 < N && std::fabs(v) >= units[u + 1].scale)
        ++u;
    std::string text = significant(v / units[u].scale, units[u].sig);
    if (u + 1 < N && std::fabs(std::strtod(text.c_str(), nullptr)) >= 1000.0) {
        ++u;
        text = significant(v / units[u].scale, units[u].sig);
    }
    return text + " " + units[u].name;
}

}  // namespace

std::string fmt_duration_ns(double ns) {
    if (std::fabs(ns) < 0.5) ns = 0;  // no "-0 ns"
    static constexpr Unit kUnits[] = {
        {1.0, "ns", 0}, {1e3, "us", 3}, {1e6, "ms", 3}, {1e9, "s", 4}};
    return scaled(ns, kUnits);
}

std::string fmt_bytes_short(double bytes) {
    static constexpr Unit kUnits[] = {
        {1.0, "B", 0}, {1e3, "kB", 3}, {1e6, "MB", 3}, {1e9, "GB", 3}, {1e12, "TB", 3}};
    return scaled(bytes, kUnits);
}

std::string fmt_flops(double flops) {
    static constexpr Unit kUnits[] = {
        {1e3, "kFLOP", 4}, {1e6, "MFLOP", 4}, {1e9, "GFLOP", 4}, {1e12, "TFLOP", 4}};
    return scaled(flops, kUnits);
}

std::string fmt_rate(double per_s, const char* unit) {
    static constexpr Unit kUnits[] = {{1e6, "M", 3}, {1e9, "G", 3}, {1e12, "T", 3}};
    return scaled(per_s, kUnits) + unit + "/s";
}

}  // namespace napkin::viewer
