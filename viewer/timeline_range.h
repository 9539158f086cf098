// The timeline's range selection (internal to the timeline panel, view_timeline.cpp): a right
// drag over the lanes marks a time range [t0, t1), shaded over every lane; each run's ops,
// kernels, FLOPs, bytes and allocations inside it (summarize_range, run_stats.h) are summed in
// lines under the lanes. A right click without a drag clears it. --range opens with one.
#pragma once

#include <vector>

#include <imgui.h>

#include "viewer/run_data.h"
#include "viewer/view.h"

namespace napkin::viewer {

inline constexpr float kRangeBarPx = 4.0f;  // the opaque bar along the lanes' top
inline constexpr ImU32 kRangeBarColor = IM_COL32(255, 200, 60, 255);

bool has_range(const TimelineState& s);
// The right button over the lanes (`hovered`), after the frame's drawing: starts, extends, ends or
// clears the range. `axis` is the frame's time axis.
void range_input(TimelineState& s, const TimeAxis& axis, bool hovered);
// The range shaded between y0 and y1 (the lanes' visible band), with its bounds as lines.
void draw_range(ImDrawList* dl, const TimelineState& s, const TimeAxis& axis, float y0, float y1);
// The lines of the summary (one per run with a trace) the status area needs: 0 without a range.
int range_summary_lines(const TimelineState& s, const std::vector<RunData>& runs);
// Those lines, each run's summary recomputed only when the range changed.
void draw_range_summaries(TimelineState& s, const std::vector<RunData>& runs);

}  // namespace napkin::viewer
