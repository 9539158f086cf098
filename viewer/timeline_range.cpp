// The timeline's range selection: viewer/timeline_range.h.
#include "viewer/timeline_range.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "viewer/run_stats.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

constexpr float kMinRangePx = 3.0f;  // a shorter right drag is a click: it clears the range

bool traced(const RunData& r) {
    return r.has_trace && !r.trace.empty();
}

}  // namespace

bool has_range(const TimelineState& s) {
    return s.range_t1 > s.range_t0;
}

void range_input(TimelineState& s, const TimeAxis& axis, bool hovered) {
    const ImGuiIO& io = ImGui::GetIO();
    const float mx = std::clamp(io.MousePos.x, axis.x0, axis.x1);
    if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Right) && io.MousePos.x >= axis.x0) {
        s.ranging = true;
        s.range_anchor = axis.t(mx);
    }
    if (!s.ranging) return;
    const double t = axis.t(mx);
    s.range_t0 = std::min(s.range_anchor, t);
    s.range_t1 = std::max(s.range_anchor, t);
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) {
        s.ranging = false;
        if (s.range_t1 - s.range_t0 < kMinRangePx * axis.ns_per_px()) s.range_t0 = s.range_t1 = 0;
    }
}

void draw_range(ImDrawList* dl, const TimelineState& s, const TimeAxis& axis, float y0, float y1) {
    if (!has_range(s)) return;
    const float x0 = std::max(axis.x(s.range_t0), axis.x0);
    const float x1 = std::min(axis.x(s.range_t1), axis.x1);
    if (x1 < axis.x0 || x0 > axis.x1) return;
    dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), IM_COL32(255, 200, 60, 48));
    // An opaque bar along the top: the range's extent at a glance (and in exact pixels for the
    // GUI tests).
    dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y0 + kRangeBarPx), kRangeBarColor);
    dl->AddLine(ImVec2(x0, y0), ImVec2(x0, y1), IM_COL32(255, 200, 60, 220), 1.5f);
    dl->AddLine(ImVec2(x1, y0), ImVec2(x1, y1), IM_COL32(255, 200, 60, 220), 1.5f);
}

int range_summary_lines(const TimelineState& s, const std::vector<RunData>& runs) {
    if (!has_range(s)) return 0;
    return static_cast<int>(std::count_if(runs.begin(), runs.end(), traced));
}

void draw_range_summaries(TimelineState& s, const std::vector<RunData>& runs) {
    if (!has_range(s)) return;
    if (s.summary_t0 != s.range_t0 || s.summary_t1 != s.range_t1 ||
        s.summaries.size() != runs.size()) {
        s.summaries.clear();
        for (const RunData& r : runs) {
            s.summaries.push_back(
                traced(r) ? summarize_range(r, std::llround(s.range_t0), std::llround(s.range_t1))
                          : RangeSummary{});
        }
        s.summary_t0 = s.range_t0;
        s.summary_t1 = s.range_t1;
    }
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (!traced(runs[r])) continue;
        ImGui::TextColored(ImVec4(1.0f, 0.8f, 0.25f, 1.0f), "range %s:", runs[r].label.c_str());
        ImGui::SameLine();
        ImGui::TextUnformatted(range_summary_text(s.summaries[r]).c_str());
    }
}

}  // namespace napkin::viewer
