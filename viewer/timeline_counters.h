// The timeline's counter tracks (internal to the timeline panel, view_timeline.cpp): one lane per
// counter series of a run ("memory" / "activations", "device memory" / "used", another tool's
// counters), a filled step chart scaled to the lane, its value at the pointer on hover. At any
// zoom a lane costs one column per kCounterColumnPx pixels: each column shows the largest value
// in it (a spike is never lost), and columns of equal height merge into one rect.
#pragma once

#include <string>

#include <imgui.h>

#include "viewer/run_data.h"
#include "viewer/view.h"

namespace napkin::viewer {

inline constexpr float kCounterLanePx = 28.0f;
inline constexpr int kCounterColumnPx = 2;

// Series drawn as lanes: those that are not zero throughout.
bool counter_drawn(const CounterSeries& s);
// The height of the run's counter lanes together (0 without any).
float counter_lanes_height(const TraceData& trace);

// Draws the run's counter lanes from y down; lanes outside [clip_y0, clip_y1] are skipped.
// `label_x` is where lane labels start (the gutter), `mouse` the pointer ((-1, -1) when the panel
// is not hovered). Returns the tooltip for the hovered lane, or "".
std::string draw_counter_lanes(ImDrawList* dl, TimelineState& s, const RunData& run,
                               const TimeAxis& axis, float label_x, float label_w, float y,
                               float clip_y0, float clip_y1, ImVec2 mouse);

}  // namespace napkin::viewer
