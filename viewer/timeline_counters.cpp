// Counter lanes on the timeline (declared in viewer/timeline_counters.h).
#include "viewer/timeline_counters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "viewer/ticks.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

bool is_bytes(const CounterSeries& s) {
    auto has = [](const std::string& text, const char* word) {
        std::string lower = text;
        for (char& c : lower)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return lower.find(word) != std::string::npos;
    };
    return has(s.name, "memory") || has(s.key, "bytes") || has(s.key, "allocated");
}

std::string fmt_value(const CounterSeries& s, double v) {
    if (is_bytes(s)) return fmt_bytes_short(v);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

// napkin's memory categories keep their colours; other series are coloured by name.
ImU32 series_color(const CounterSeries& s) {
    if (s.name == "memory") return memory_category_color(s.key);
    if (s.name == kDeviceMemoryCounter) return IM_COL32(120, 200, 255, 255);
    return event_color("counter", s.name + " " + s.key);
}

}  // namespace

bool counter_drawn(const CounterSeries& s) {
    return !s.t_ns.empty() && (s.max_value != 0.0 || s.min_value != 0.0);
}

float counter_lanes_height(const TraceData& trace) {
    float h = 0;
    for (const CounterSeries& s : trace.counters) {
        if (counter_drawn(s)) h += kCounterLanePx;
    }
    return h;
}

namespace {

// A lane's vertical scale: [lo, hi] onto [y1, y0] (y0 the top), on whole pixels.
struct LaneScale {
    double lo, hi;
    float y0, y1;
    float y(double v) const {
        return std::round(y1 - static_cast<float>((v - lo) / (hi - lo)) * (y1 - y0));
    }
};

// The lane's step chart: per column the largest value in it, else the one carried in from the
// left; equal neighbours merge into one rect, filled down (or up) to the zero line.
void draw_columns(ImDrawList* dl, TimelineState& st, const CounterSeries& s, const TimeAxis& axis,
                  double t_end, const LaneScale& scale) {
    const int columns = std::max(1, static_cast<int>((axis.x1 - axis.x0) / kCounterColumnPx));
    const auto& t = s.t_ns;
    auto first = std::upper_bound(t.begin(), t.end(), static_cast<std::int64_t>(axis.t0));
    std::size_t j = static_cast<std::size_t>(first - t.begin());
    double carried = j > 0 ? s.values[j - 1] : NAN;
    const ImU32 col = series_color(s);
    const float y_zero = scale.y(0.0);
    float open_x = -1.0f, open_top = 0.0f;
    auto close = [&](float x1) {
        if (open_x >= 0.0f && open_top != y_zero) {
            dl->AddRectFilled(ImVec2(open_x, std::min(open_top, y_zero)),
                              ImVec2(x1, std::max(open_top, y_zero) + 1.0f), col);
            ++st.counter_rects;
        }
        open_x = -1.0f;
    };
    begin_opaque_fills(dl);
    for (int c = 0; c < columns; ++c) {
        const float x = axis.x0 + static_cast<float>(c * kCounterColumnPx);
        const double tc1 = axis.t(x + kCounterColumnPx);
        double v = carried;
        bool any = false;
        while (j < t.size() && static_cast<double>(t[j]) < tc1) {
            v = any ? std::max(v, s.values[j]) : s.values[j];
            any = true;
            carried = s.values[j];
            ++j;
        }
        if (!std::isfinite(v) || axis.t(x) > t_end) {
            close(x);
            continue;
        }
        const float top = scale.y(v);
        if (open_x >= 0.0f && top == open_top) continue;
        close(x);
        open_x = x;
        open_top = top;
    }
    close(axis.x0 + static_cast<float>(columns * kCounterColumnPx));
    end_opaque_fills(dl);
}

// The value under the pointer (its time from the origin), with the lane's scale.
std::string value_tip(const CounterSeries& s, const std::string& label, const TimeAxis& axis,
                      float mouse_x, double origin_ns, const std::string& scale) {
    const auto& t = s.t_ns;
    auto it = std::upper_bound(t.begin(), t.end(), std::llround(axis.t(mouse_x)));
    if (it == t.begin()) return "";
    const std::size_t k = static_cast<std::size_t>(it - t.begin()) - 1;
    return label + ": " + fmt_value(s, s.values[k]) + " at " +
           fmt_time_at(static_cast<double>(t[k]) - origin_ns, axis.ns_per_px()) + "\n(lane scale " +
           scale + ", " + std::to_string(t.size()) + " samples)";
}

}  // namespace

std::string draw_counter_lanes(const CounterLanesFrame& f, TimelineState& st, const RunData& run,
                               float y) {
    std::string tip;
    const double t_end = static_cast<double>(run.trace.t_max_ns);  // values hold until the end
    const float small = ImGui::GetFontSize() * 0.85f;
    for (const CounterSeries& s : run.trace.counters) {
        if (!counter_drawn(s)) continue;
        const LaneScale scale{std::min(0.0, s.min_value), std::max(0.0, s.max_value), y + 2.0f,
                              y + kCounterLanePx - 3.0f};
        y += kCounterLanePx;
        if (scale.y1 < f.clip_y0 || scale.y0 > f.clip_y1) continue;
        const std::string label = s.name + " " + s.key;
        const std::string range = scale_label(scale.lo, scale.hi, is_bytes(s));
        text_fitted(f.dl, ImVec2(f.label_x + 4, scale.y0 - 1), f.label_w - 4,
                    IM_COL32(190, 200, 230, 255), label);
        text_fitted(f.dl, ImVec2(f.label_x + 4, scale.y0 + 14), f.label_w - 4,
                    IM_COL32(130, 135, 150, 255), range, small);
        f.dl->AddLine(ImVec2(f.axis.x0, scale.y1 + 1), ImVec2(f.axis.x1, scale.y1 + 1),
                      IM_COL32(50, 50, 60, 255));
        draw_columns(f.dl, st, s, f.axis, t_end, scale);
        if (f.mouse.y < scale.y0 || f.mouse.y >= scale.y1 + 3) continue;
        if (f.mouse.x >= f.axis.x0 && f.mouse.x < f.axis.x1) {
            tip = value_tip(s, label, f.axis, f.mouse.x, f.origin_ns, range);
        } else if (f.mouse.x >= f.label_x && f.mouse.x < f.label_x + f.label_w) {
            tip = label + " (counter, pid " + s.pid + ")\nscale " + range + ", " +
                  std::to_string(s.t_ns.size()) + " samples";
        }
    }
    return tip;
}

}  // namespace napkin::viewer
