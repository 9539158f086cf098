// The time window the timeline and the memory charts show, and how input moves it. No ImGui: the
// panels turn the wheel, a drag and the keys into these calls, and
// tests/viewer/time_window_test.cpp checks the arithmetic. Times are ns on the runs' own clock (a
// double: the window's edges fall between nanoseconds when zoomed in).
#pragma once

#include <string>
#include <string_view>

namespace napkin::viewer {

// Time <-> pixels: [t0, t1] ns onto screen x [x0, x1].
struct TimeAxis {
    double t0 = 0, t1 = 0;
    float x0 = 0, x1 = 0;
    float x(double t) const { return x0 + static_cast<float>((t - t0) / (t1 - t0)) * (x1 - x0); }
    double t(float px) const {
        return t0 + static_cast<double>(px - x0) / static_cast<double>(x1 - x0) * (t1 - t0);
    }
    double ns_per_px() const { return (t1 - t0) / static_cast<double>(x1 - x0); }
};

struct TimeWindow {
    double t0_ns = 0, t1_ns = 0;
    bool empty() const { return !(t1_ns > t0_ns); }
    double span() const { return t1_ns - t0_ns; }
};

inline constexpr double kMinWindowNs = 10.0;  // the deepest zoom
inline constexpr double kFitPad = 0.01;       // fitting leaves 1% of the span free on each side

// [t_min, t_max] with kFitPad on each side (1 us wide when t_max <= t_min).
TimeWindow fitted(double t_min_ns, double t_max_ns);
// Scales the window by `factor` (< 1 zooms in) keeping `t_ns` where it is on screen.
void zoom_around(TimeWindow& w, double t_ns, double factor);
// One wheel notch zooms by 0.8: `notches` > 0 in, < 0 out.
double wheel_zoom_factor(double notches);
void pan(TimeWindow& w, double dt_ns);
// A window at least kMinWindowNs wide; one wider than 100 times `fit` (or not finite) becomes
// `fit`.
void keep_sane(TimeWindow& w, const TimeWindow& fit);

// A time such as "120ms", "3.5 us", "0.25" (seconds without a unit), "-2s"; false when it is not.
bool parse_time_ns(std::string_view text, double& ns);
// "START:END" in the units above, END > START: `--window` of napkin view. "" or what was wrong.
std::string parse_time_window(std::string_view text, TimeWindow& out);

}  // namespace napkin::viewer
