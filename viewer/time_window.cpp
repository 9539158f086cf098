#include "viewer/time_window.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace napkin::viewer {

TimeWindow fitted(double t_min_ns, double t_max_ns) {
    if (!(t_max_ns > t_min_ns)) t_max_ns = t_min_ns + 1000.0;
    const double pad = (t_max_ns - t_min_ns) * kFitPad;
    return {t_min_ns - pad, t_max_ns + pad};
}

void zoom_around(TimeWindow& w, double t_ns, double factor) {
    w.t0_ns = t_ns - (t_ns - w.t0_ns) * factor;
    w.t1_ns = t_ns + (w.t1_ns - t_ns) * factor;
}

double wheel_zoom_factor(double notches) {
    return std::pow(0.8, notches);
}

void pan(TimeWindow& w, double dt_ns) {
    w.t0_ns += dt_ns;
    w.t1_ns += dt_ns;
}

void keep_sane(TimeWindow& w, const TimeWindow& fit) {
    if (!std::isfinite(w.t0_ns) || !std::isfinite(w.t1_ns) || w.span() > 100.0 * fit.span()) {
        w = fit;
        return;
    }
    if (w.span() < kMinWindowNs) w.t1_ns = w.t0_ns + kMinWindowNs;
}

bool parse_time_ns(std::string_view text, double& ns) {
    while (!text.empty() && text.back() == ' ')
        text.remove_suffix(1);
    struct Unit {
        std::string_view suffix;
        double ns;
    };
    static constexpr Unit kUnits[] = {{"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    double scale = 1e9;  // seconds without a unit
    for (const Unit& u : kUnits) {
        if (text.size() > u.suffix.size() &&
            text.substr(text.size() - u.suffix.size()) == u.suffix) {
            scale = u.ns;
            text.remove_suffix(u.suffix.size());
            break;
        }
    }
    while (!text.empty() && text.back() == ' ')
        text.remove_suffix(1);
    const std::string number(text);
    if (number.empty()) return false;
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(v)) return false;
    ns = v * scale;
    return std::isfinite(ns);
}

std::string parse_time_window(std::string_view text, TimeWindow& out) {
    const std::size_t colon = text.find(':');
    double t0 = 0, t1 = 0;
    if (colon == std::string_view::npos || !parse_time_ns(text.substr(0, colon), t0) ||
        !parse_time_ns(text.substr(colon + 1), t1)) {
        return "expected START:END, times from the start of the runs in s (or with a unit: ns, "
               "us, ms, s), e.g. 0.75:0.8 or 120ms:135ms (got '" +
               std::string(text) + "')";
    }
    if (!(t1 - t0 >= kMinWindowNs)) {
        return "END must be after START by at least 10 ns (got '" + std::string(text) + "')";
    }
    out = {t0, t1};
    return "";
}

}  // namespace napkin::viewer
