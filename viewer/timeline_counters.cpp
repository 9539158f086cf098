// Counter lanes on the timeline (declared in viewer/timeline_counters.h).
#include "viewer/timeline_counters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

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

std::string draw_counter_lanes(ImDrawList* dl, TimelineState& st, const RunData& run,
                               const TimeAxis& axis, float label_x, float label_w, float y,
                               float clip_y0, float clip_y1, ImVec2 mouse) {
    std::string tip;
    const TraceData& trace = run.trace;
    const int columns = std::max(1, static_cast<int>((axis.x1 - axis.x0) / kCounterColumnPx));
    const double t_end = static_cast<double>(trace.t_max_ns);  // a value holds until the run ends
    for (const CounterSeries& s : trace.counters) {
        if (!counter_drawn(s)) continue;
        const float y0 = y + 2.0f, y1 = y + kCounterLanePx - 3.0f;
        y += kCounterLanePx;
        if (y1 < clip_y0 || y0 > clip_y1) continue;
        const double lo = std::min(0.0, s.min_value), hi = std::max(0.0, s.max_value);
        auto Y = [&](double v) {
            return std::round(y1 - static_cast<float>((v - lo) / (hi - lo)) * (y1 - y0));
        };
        const float y_zero = Y(0.0);
        const std::string label = s.name + " " + s.key;
        const ImVec4 clip(label_x, y0 - 2, label_x + label_w, y1 + 3);
        dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(label_x + 4, y0),
                    IM_COL32(190, 200, 230, 255), label.c_str(), label.c_str() + label.size(), 0.0f,
                    &clip);
        dl->AddLine(ImVec2(axis.x0, y1 + 1), ImVec2(axis.x1, y1 + 1), IM_COL32(50, 50, 60, 255));

        // Columns: the largest value in each, else the one carried in from the left.
        const auto& t = s.t_ns;
        auto first = std::upper_bound(t.begin(), t.end(), static_cast<std::int64_t>(axis.t0));
        std::size_t j = static_cast<std::size_t>(first - t.begin());
        double carried = j > 0 ? s.values[j - 1] : NAN;
        const ImU32 col = series_color(s);
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
            const float top = Y(v);
            if (open_x >= 0.0f && top == open_top) continue;
            close(x);
            open_x = x;
            open_top = top;
        }
        close(axis.x0 + static_cast<float>(columns * kCounterColumnPx));
        end_opaque_fills(dl);

        if (mouse.y >= y0 && mouse.y < y1 + 3 && mouse.x >= axis.x0 && mouse.x < axis.x1) {
            const double tm = axis.t(mouse.x);
            auto it = std::upper_bound(t.begin(), t.end(), std::llround(tm));
            if (it != t.begin()) {
                const std::size_t k = static_cast<std::size_t>(it - t.begin()) - 1;
                tip = label + ": " + fmt_value(s, s.values[k]) + " at " +
                      fmt_duration_ns(static_cast<double>(t[k])) + "\n(lane scale " +
                      fmt_value(s, lo) + " .. " + fmt_value(s, hi) + ", " +
                      std::to_string(t.size()) + " samples)";
            }
        }
    }
    return tip;
}

}  // namespace napkin::viewer
