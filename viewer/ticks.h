// Axis ticks and their labels, for the timeline's ruler, the memory charts' time and byte axes
// and the counter lanes' scales. No ImGui: the panels draw what these return, and
// tests/viewer/ticks_test.cpp checks the arithmetic.
//
// Ticks fall on round values (1, 2 or 5 x 10^k) at least `min_px` apart. Time labels are relative
// to an origin (the earliest time of the loaded runs, so a trace stamped in Unix-epoch
// microseconds reads from 0), all in one unit with as many decimals as the step needs: two
// neighbouring labels always differ and none is in exponent form. When that would take more than
// kMaxTickDigits significant digits (a 2 us step 3.8 s into a run), the ruler shows its base once
// ("3.7990 s +") and each tick as a short offset from it ("+2 us", "+4 us").
#pragma once

#include <string>
#include <vector>

namespace napkin::viewer {

inline constexpr int kMaxTickDigits = 6;

// The smallest 1, 2 or 5 x 10^k that is at least `span * min_px / width_px` (so ticks that far
// apart are at least min_px pixels apart); 1 for spans that are not positive and finite.
double nice_step(double span, double width_px, double min_px);

struct TimeTick {
    double t_ns = 0;  // absolute, on the same clock as the window
    std::string label;
};

struct TimeTicks {
    double step_ns = 0;
    std::string base;  // "" when labels are times from the origin; else the base's time ("3.799 s")
    double base_ns = 0;  // absolute; tick labels are offsets from it when `base` is set
    std::vector<TimeTick> ticks;
};

// The ticks of [t0_ns, t1_ns] drawn `width_px` wide, labelled relative to origin_ns.
TimeTicks time_ticks(double t0_ns, double t1_ns, double origin_ns, double width_px,
                     double min_px = 100.0);

// A time (from the origin) with the decimals that `resolution_ns` needs, in the unit of its own
// magnitude, never in exponent form: fmt_time_at(3799002531, 1000) is "3.799003 s",
// fmt_time_at(1.5e6, 1e5) "1.5 ms". Tooltips use the zoom's pixel width as the resolution.
std::string fmt_time_at(double t_ns, double resolution_ns);

struct ValueTick {
    double value = 0;
    std::string label;
};
// Round values from 0 up to `max_value` (bytes when `bytes`, else plain numbers), at least
// `min_px` apart on an axis `height_px` tall; at most a few dozen.
std::vector<ValueTick> value_ticks(double max_value, double height_px, double min_px, bool bytes);

// A counter lane's scale: "0 .. 9.21 MB" (bytes) or "-1.5 .. 3" (anything else).
std::string scale_label(double lo, double hi, bool bytes);

}  // namespace napkin::viewer
