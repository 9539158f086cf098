// The timeline's counter tracks (internal to the timeline panel, view_timeline.cpp): one lane per
// counter series of a run ("memory" / "activations", "device memory" / "used", another tool's
// counters), a filled step chart scaled to the lane with the scale under the lane's name, its value
// at the pointer on hover (over the label: the whole name). At any zoom a lane costs one column
// per kCounterColumnPx pixels: each column shows the largest value in it (a spike is never lost),
// and columns of equal height merge into one rect.
#pragma once

#include <string>

#include <imgui.h>

#include "viewer/run_data.h"
#include "viewer/view.h"

namespace napkin::viewer {

inline constexpr float kCounterLanePx = 34.0f;  // two lines of label: name, scale
inline constexpr int kCounterColumnPx = 2;

// Series drawn as lanes: those that are not zero throughout.
bool counter_drawn(const CounterSeries& s);
// The height of the run's counter lanes together (0 without any).
float counter_lanes_height(const TraceData& trace);

// Where the counter lanes are drawn: the lanes' axis, the gutter (label_x, label_w) for their
// labels, the visible band of y (lanes outside it are skipped), the pointer ((-1, -1) when the
// panel is not hovered) and the origin the tooltip's times count from.
struct CounterLanesFrame {
    ImDrawList* dl = nullptr;
    TimeAxis axis;
    float label_x = 0, label_w = 0;
    float clip_y0 = 0, clip_y1 = 0;
    ImVec2 mouse;
    double origin_ns = 0;
};

// Draws the run's counter lanes from y down. Returns the tooltip for the hovered lane (over its
// label: its whole name and scale), or "".
std::string draw_counter_lanes(const CounterLanesFrame& f, TimelineState& s, const RunData& run,
                               float y);

}  // namespace napkin::viewer
