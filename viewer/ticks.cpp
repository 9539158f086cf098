#include "viewer/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace napkin::viewer {

namespace {

struct Unit {
    double scale;
    const char* name;
};
constexpr Unit kTimeUnits[] = {{1.0, "ns"}, {1e3, "us"}, {1e6, "ms"}, {1e9, "s"}};
constexpr Unit kByteUnits[] = {{1.0, "B"}, {1e3, "kB"}, {1e6, "MB"}, {1e9, "GB"}, {1e12, "TB"}};
constexpr Unit kPlainUnits[] = {{1.0, ""}, {1e3, "k"}, {1e6, "M"}, {1e9, "G"}, {1e12, "T"}};

// The largest unit not above `magnitude` (the smallest for magnitudes below it).
template <std::size_t N>
const Unit& unit_for(const Unit (&units)[N], double magnitude) {
    const Unit* u = &units[0];
    for (const Unit& c : units) {
        if (magnitude >= c.scale) u = &c;
    }
    return *u;
}

// Decimals that show multiples of `step` in `unit` exactly (step is 1, 2 or 5 x 10^k).
int decimals_for(double step, const Unit& u) {
    const double d = std::ceil(-std::log10(step / u.scale) - 1e-9);
    return std::clamp(static_cast<int>(d), 0, 12);
}

// Digits before the point of |v| (at least 1).
int int_digits(double v) {
    v = std::fabs(v);
    return v < 1.0 ? 1 : static_cast<int>(std::floor(std::log10(v))) + 1;
}

// "%.*f unit" without "-0" and with no space before an empty unit.
std::string fixed(double v, int decimals, const Unit& u) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v / u.scale);
    std::string s = buf;
    if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
    if (u.name[0] != 0) s += std::string(" ") + u.name;
    return s;
}

// The largest power of ten not above v (v > 0).
double pow10_floor(double v) {
    return std::pow(10.0, std::floor(std::log10(v)));
}

}  // namespace

double nice_step(double span, double width_px, double min_px) {
    const double target = span * min_px / std::max(1.0, width_px);
    if (!(target > 0) || !std::isfinite(target)) return 1.0;
    const double p = pow10_floor(target);
    for (double m : {1.0, 2.0, 5.0}) {
        if (p * m >= target * (1.0 - 1e-12)) return p * m;
    }
    return 10.0 * p;
}

std::string fmt_time_at(double t_ns, double resolution_ns) {
    const double res = pow10_floor(std::max(resolution_ns, 1.0));
    const Unit& u = unit_for(kTimeUnits, std::max(std::fabs(t_ns), res));
    return fixed(t_ns, decimals_for(res, u), u);
}

TimeTicks time_ticks(double t0_ns, double t1_ns, double origin_ns, double width_px, double min_px) {
    TimeTicks out;
    const double rel0 = t0_ns - origin_ns, rel1 = t1_ns - origin_ns;
    if (!(rel1 > rel0) || !std::isfinite(rel0) || !std::isfinite(rel1)) return out;
    const double step = std::max(1.0, nice_step(rel1 - rel0, width_px, min_px));
    out.step_ns = step;
    const double i0 = std::ceil(rel0 / step), i1 = std::floor(rel1 / step);
    if (i1 - i0 > 10000) return out;  // a window narrower than its own rounding: no ticks
    const double largest = std::max(std::fabs(rel0), std::fabs(rel1));
    const Unit* u = &unit_for(kTimeUnits, std::max(largest, step));
    int decimals = decimals_for(step, *u);
    double label_origin = 0;  // labels show rel - label_origin
    if (int_digits(largest / u->scale) + decimals > kMaxTickDigits) {
        // A base at a round time at or before the left edge, precise to a power of ten at least
        // the span, so that every offset from it is under twice that power.
        const double base_step = std::pow(10.0, std::ceil(std::log10(rel1 - rel0)));
        label_origin = std::floor(rel0 / base_step) * base_step;
        out.base = fmt_time_at(label_origin, base_step);
        out.base_ns = origin_ns + label_origin;
        u = &unit_for(kTimeUnits, std::max(rel1 - label_origin, step));
        decimals = decimals_for(step, *u);
    }
    for (double i = i0; i <= i1; i += 1.0) {
        const double rel = i * step;
        TimeTick t;
        t.t_ns = origin_ns + rel;
        if (out.base.empty()) {
            t.label = fixed(rel, decimals, *u);
        } else {
            t.label = "+";  // appended, not "+" + s: GCC 12's -Wrestrict false positive
            t.label += fixed(rel - label_origin, decimals, *u);
        }
        out.ticks.push_back(std::move(t));
    }
    return out;
}

std::vector<ValueTick> value_ticks(double max_value, double height_px, double min_px, bool bytes) {
    std::vector<ValueTick> out;
    if (!(max_value > 0) || !std::isfinite(max_value)) return out;
    const double step = nice_step(max_value, height_px, min_px);
    if (max_value / step > 64) return out;
    const Unit& u = bytes ? unit_for(kByteUnits, max_value) : unit_for(kPlainUnits, max_value);
    const int decimals = decimals_for(step, u);
    for (double i = 0; i * step <= max_value * (1.0 + 1e-12); i += 1.0)
        out.push_back({i * step, fixed(i * step, decimals, u)});
    return out;
}

std::string scale_label(double lo, double hi, bool bytes) {
    const double largest = std::max(std::fabs(lo), std::fabs(hi));
    const Unit& u = bytes ? unit_for(kByteUnits, largest) : unit_for(kPlainUnits, largest);
    // Three significant digits of the larger end, the same decimals for both.
    const int decimals = std::clamp(3 - int_digits(largest / u.scale), 0, 2);
    const Unit bare{u.scale, ""};
    return fixed(lo, lo == 0 ? 0 : decimals, bare) + " .. " + fixed(hi, decimals, u);
}

}  // namespace napkin::viewer
