// Memory: bytes held by category, stacked over time, one chart per run, on the time window the
// timeline shows too (TimeView: zoom or pan either and both follow; F fits the profiled steps,
// "Whole run" every sample from the first allocation). The peak marked, the predicted peak
// (report.json) as a line, the process's or device's own total beside the allocator's, their
// labels placed so that none overprints another (label_layout.h). A click lists the blocks live
// at that time with the op that allocated them.
//
// The chart draws one column per two pixels, taking the sample with the largest total in it, so
// a peak is never lost to downsampling; the columns are cached (MemoryChartCache) until the
// window, the chart's width or the data change, and the bands drawn opaque (widgets.h): the frame
// cost is the fill, and that is what llvmpipe under Xvfb runs short of. On GPU runs the trace's
// "device memory" counter (cudaMemGetInfo) is drawn as a line over the allocator's bands.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/label_layout.h"
#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

constexpr int kColumnPx = 2;  // one chart column per this many pixels
constexpr float kLeftPx = 78.0f, kRightPx = 10.0f, kTopPx = 22.0f, kBottomPx = 18.0f;
constexpr float kLineH = 16.0f;  // a label's height

// The device's (or process's) own view of memory, when the report has one.
struct OtherTotal {
    const char* label;
    double bytes;
};

OtherTotal other_total(const RunData& run) {
    if (!run.has_report) return {nullptr, 0};
    if (const auto& d = run.report.measured.device_memory; d && d->peak_used_bytes > 0)
        return {"device peak", static_cast<double>(d->peak_used_bytes)};
    const double rss = run.report.measured.peak_rss_bytes;
    if (std::isfinite(rss) && rss > 0) return {"process peak RSS", rss};
    return {nullptr, 0};
}

// What does not change with the window: the sample at the peak, the device's largest "used",
// the run's end.
void cache_data(MemoryChartCache& c, const RunData& run, const CounterSeries* device) {
    const MemoryData& m = run.memory;
    c.t_end = static_cast<double>(m.t_ns.back());
    if (run.has_trace && !run.trace.empty())
        c.t_end = std::max(c.t_end, static_cast<double>(run.trace.t_max_ns));
    for (const CounterSeries& series : run.trace.counters) {
        if (!series.t_ns.empty())
            c.t_end = std::max(c.t_end, static_cast<double>(series.t_ns.back()));
    }
    c.memory = &m;
    c.device = device;
    c.samples = m.t_ns.size();
    c.columns = -1;  // the columns are stale
    c.peak_index = 0;
    for (std::size_t k = 0; k < m.t_ns.size(); ++k) {
        if (m.t_ns[k] == m.peak_t_ns) c.peak_index = k;
    }
    c.device_max = 0;
    if (device != nullptr) {
        for (double v : device->values)
            c.device_max = std::max(c.device_max, v);
    }
}

// Per column, the sample with the largest total in it, else the last one before it.
void cache_columns(MemoryChartCache& c, const MemoryData& m) {
    const auto& t = m.t_ns;
    c.sample.assign(static_cast<std::size_t>(c.columns), kNone);
    auto first = std::upper_bound(t.begin(), t.end(), static_cast<std::int64_t>(std::floor(c.t0)));
    std::size_t i = static_cast<std::size_t>(first - t.begin());
    std::size_t carried = i > 0 ? i - 1 : SIZE_MAX;
    for (int col = 0; col < c.columns; ++col) {
        const double tc0 = c.t0 + (c.t1 - c.t0) * col / c.columns;
        const double tc1 = c.t0 + (c.t1 - c.t0) * (col + 1) / c.columns;
        if (tc0 > c.t_end) break;  // after the run: nothing held, nothing drawn
        std::size_t best = carried;
        bool in_column = false;
        for (; i < t.size() && static_cast<double>(t[i]) < tc1; ++i) {
            if (!in_column || m.total[i] > m.total[best]) best = i;
            in_column = true;
            carried = i;
        }
        if (best != SIZE_MAX)
            c.sample[static_cast<std::size_t>(col)] = static_cast<std::uint32_t>(best);
    }
    // The device's largest "used" per column, else the last value before it.
    c.device_used.assign(c.device != nullptr ? static_cast<std::size_t>(c.columns) : 0u, NAN);
    if (c.device == nullptr) return;
    const auto& dt = c.device->t_ns;
    auto d = std::upper_bound(dt.begin(), dt.end(), static_cast<std::int64_t>(std::floor(c.t0)));
    std::size_t j = static_cast<std::size_t>(d - dt.begin());
    double last = j > 0 ? c.device->values[j - 1] : NAN;
    for (int col = 0; col < c.columns; ++col) {
        const double tc1 = c.t0 + (c.t1 - c.t0) * (col + 1) / c.columns;
        if (tc1 - (c.t1 - c.t0) / c.columns > c.t_end) break;
        double v = last;
        bool any = false;
        for (; j < dt.size() && static_cast<double>(dt[j]) < tc1; ++j) {
            v = any ? std::max(v, c.device->values[j]) : c.device->values[j];
            any = true;
            last = c.device->values[j];
        }
        c.device_used[static_cast<std::size_t>(col)] = v;
    }
}

// The columns of one chart (see MemoryChartCache), recomputed only when they would change.
const MemoryChartCache& chart_columns(MemoryState& s, int run_index, const RunData& run,
                                      int columns, double t0, double t1) {
    if (s.charts.size() <= static_cast<std::size_t>(run_index)) s.charts.resize(run_index + 1u);
    MemoryChartCache& c = s.charts[static_cast<std::size_t>(run_index)];
    const CounterSeries* device =
        run.has_trace ? run.trace.counter(kDeviceMemoryCounter, kDeviceMemoryUsedKey) : nullptr;
    if (c.memory != &run.memory || c.device != device || c.samples != run.memory.t_ns.size())
        cache_data(c, run, device);
    if (c.columns != columns || c.t0 != t0 || c.t1 != t1) {
        c.columns = columns;
        c.t0 = t0;
        c.t1 = t1;
        cache_columns(c, run.memory);
    }
    return c;
}

// One chart's frame on screen: its plot area [a, b], time across, bytes up.
struct Chart {
    ImDrawList* dl = nullptr;
    ImVec2 p0, a, b;
    TimeAxis x;
    double y_max = 1;
    double origin_ns = 0;
    int columns = 0;
    float Y(double v) const { return b.y - static_cast<float>(v / y_max) * (b.y - a.y); }
    float column_x(int col) const { return a.x + static_cast<float>(col * kColumnPx); }
};

// The frame, the byte grid, the time ticks; over the plot the run's name, and on its right the
// process's or device's own peak when it is off the chart.
void draw_axes(const Chart& c, const RunData& run, const OtherTotal& other, bool other_on_chart) {
    ImDrawList* dl = c.dl;
    // No filled plot background: the bands are the content, and fill rate is what software
    // rasterizers (llvmpipe under Xvfb) run out of. A frame and grid lines instead.
    dl->AddRect(c.a, c.b, IM_COL32(70, 70, 80, 255));
    for (const ValueTick& t : value_ticks(c.y_max, c.b.y - c.a.y, 36.0f, true)) {
        const float y = std::round(c.Y(t.value));
        dl->AddLine(ImVec2(c.a.x, y), ImVec2(c.b.x, y), IM_COL32(60, 60, 70, 255));
        dl->AddText(ImVec2(c.p0.x + 2, y - 8), IM_COL32(170, 170, 180, 255), t.label.c_str());
    }
    const TimeTicks ticks = draw_time_ticks(dl, c.x, c.origin_ns, c.b.y, c.b.y + 4, c.b.y + 2,
                                            IM_COL32(150, 150, 160, 255));
    if (!ticks.base.empty()) {
        text_fitted(dl, ImVec2(c.p0.x + 2, c.b.y + 2), kLeftPx - 4, IM_COL32(230, 230, 160, 255),
                    ticks.base + " +");
    }
    float title_w = c.b.x - c.a.x;
    if (other.label != nullptr && !other_on_chart) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s %s (allocator peak %s)", other.label,
                      fmt_bytes_short(other.bytes).c_str(),
                      fmt_bytes_short(run.memory.peak_bytes).c_str());
        const float w = ImGui::CalcTextSize(buf).x;
        dl->AddText(ImVec2(c.b.x - w - 4, c.p0.y + 2), IM_COL32(120, 200, 255, 255), buf);
        title_w -= w + 16;
    }
    const MemoryData& m = run.memory;
    text_fitted(dl, ImVec2(c.a.x, c.p0.y + 2), title_w, IM_COL32(210, 220, 255, 255),
                run.label + (m.from_counters ? " (from trace counters)" : "") +
                    (m.device.empty() ? "" : ", " + m.device));
}

// The bands, from the cached columns. A category's band is extended while its top and bottom
// stay on the same pixels, so a flat band is one rect (software rasterizers pay per triangle and
// per tile it spans); drawn opaque (begin_opaque_fills) since they never overlap.
void draw_bands(MemoryState& s, const Chart& c, const MemoryData& m,
                const MemoryChartCache& cache) {
    const std::size_t nc = m.category_count();
    s.bands.assign(3 * nc, 0.0f);  // x0 (< 0: no open band), y_top, y_bottom
    for (std::size_t k = 0; k < nc; ++k)
        s.bands[3 * k] = -1.0f;
    begin_opaque_fills(c.dl);
    auto close = [&](std::size_t k, float x1) {
        float* band = &s.bands[3 * k];
        if (band[0] >= 0.0f && band[1] < band[2]) {
            c.dl->AddRectFilled(ImVec2(band[0], band[1]), ImVec2(x1, band[2]),
                                memory_category_color(m.categories[k]));
            ++s.drawn_rects;
        }
        band[0] = -1.0f;
    };
    for (int col = 0; col < c.columns; ++col) {
        const std::uint32_t i = cache.sample[static_cast<std::size_t>(col)];
        const float x = c.column_x(col);
        if (i == kNone) {  // before the first sample or after the run's end
            for (std::size_t k = 0; k < nc; ++k)
                close(k, x);
            continue;
        }
        double below = 0;
        for (std::size_t k = 0; k < nc; ++k) {
            const double v = std::max(0.0, m.by_category[i * nc + k]);
            const float y_bottom = std::round(c.Y(below)), y_top = std::round(c.Y(below + v));
            below += v;
            float* band = &s.bands[3 * k];
            if (band[0] >= 0.0f && band[1] == y_top && band[2] == y_bottom) continue;
            close(k, x);
            band[0] = x;
            band[1] = y_top;
            band[2] = y_bottom;
        }
    }
    for (std::size_t k = 0; k < nc; ++k)
        close(k, c.column_x(c.columns));
    end_opaque_fills(c.dl);
}

// The device's own total over time (cudaMemGetInfo, GPU runs): a step line, one point per column
// where it changes.
void draw_device_line(const Chart& c, const MemoryChartCache& cache) {
    float last_y = -1.0f;
    for (int col = 0; col < c.columns; ++col) {
        const double v = cache.device_used[static_cast<std::size_t>(col)];
        if (!std::isfinite(v)) continue;
        const float x = c.column_x(col), y = std::round(c.Y(v));
        if (y == last_y) continue;
        if (last_y >= 0.0f) c.dl->PathLineTo(ImVec2(x, last_y));
        c.dl->PathLineTo(ImVec2(x, y));
        last_y = y;
    }
    if (last_y < 0.0f) return;
    c.dl->PathLineTo(ImVec2(c.column_x(c.columns), last_y));
    c.dl->PathStroke(IM_COL32(120, 200, 255, 255), 0, 2.0f);
}

// The legend: the categories that hold anything at the peak, with their bytes then.
LabelBox draw_legend(const Chart& c, const MemoryData& m, std::size_t peak_i) {
    const std::size_t nc = m.category_count();
    std::vector<std::pair<std::size_t, std::string>> rows;
    float w = 0;
    for (std::size_t k = 0; k < nc; ++k) {
        const double v = m.by_category[peak_i * nc + k];
        if (v <= 0) continue;
        rows.emplace_back(k, m.categories[k] + " " + fmt_bytes_short(v));
        w = std::max(w, ImGui::CalcTextSize(rows.back().second.c_str()).x);
    }
    const float lx = c.a.x + 8, ly = c.a.y + 6;
    const LabelBox box{lx - 4, ly - 2, lx + w + 20,
                       ly + kLineH * static_cast<float>(rows.size()) + 2};
    c.dl->AddRectFilled(ImVec2(box.x0, box.y0), ImVec2(box.x1, box.y1), IM_COL32(20, 20, 26, 220),
                        3.0f);
    float y = ly;
    for (const auto& [k, text] : rows) {
        c.dl->AddRectFilled(ImVec2(lx, y + 2), ImVec2(lx + 10, y + 12),
                            memory_category_color(m.categories[k]));
        c.dl->AddText(ImVec2(lx + 14, y), IM_COL32(220, 220, 225, 255), text.c_str());
        y += kLineH;
    }
    return box;
}

// A label to place: its text, colour, and the spot it wants (left x, top y).
struct ChartLabel {
    std::string text;
    ImU32 color;
    float x, y;
};

// The lines (peak, prediction, the other total), the legend over them, and their labels, placed
// so that none overprints another or the legend.
void draw_marks(const Chart& c, const RunData& run, const MemoryChartCache& cache,
                const OtherTotal& other, bool other_on_chart) {
    const MemoryData& m = run.memory;
    std::vector<ChartLabel> labels;
    auto right_aligned = [&](const std::string& text, ImU32 color, float y) {
        labels.push_back({text, color, c.b.x - ImGui::CalcTextSize(text.c_str()).x - 4, y});
    };
    // The peak: its line when inside the window, else an arrow towards it.
    const float px = c.x.x(static_cast<double>(m.peak_t_ns));
    std::string peak =
        "peak " + fmt_bytes_short(m.peak_bytes) + " at " +
        fmt_time_at(static_cast<double>(m.peak_t_ns) - c.origin_ns, std::max(1.0, c.x.ns_per_px()));
    const ImU32 white = IM_COL32(255, 255, 255, 255);
    if (px < c.a.x) {
        labels.push_back({"<- " + peak, white, c.a.x + 4, c.Y(m.peak_bytes) - kLineH});
    } else if (px > c.b.x) {
        right_aligned(peak + " ->", white, c.Y(m.peak_bytes) - kLineH);
    } else {
        c.dl->AddLine(ImVec2(px, c.a.y), ImVec2(px, c.b.y), IM_COL32(255, 255, 255, 200), 1.5f);
        const float w = ImGui::CalcTextSize(peak.c_str()).x;
        labels.push_back({peak, white, std::min(px + 4, c.b.x - w), c.Y(m.peak_bytes) - kLineH});
    }
    const double predicted = run.has_report ? predicted_total_bytes(run.report) : 0.0;
    if (predicted > 0) {
        const float y = c.Y(predicted);
        for (float x = c.a.x; x < c.b.x; x += 12)
            c.dl->AddLine(ImVec2(x, y), ImVec2(std::min(x + 7, c.b.x), y),
                          IM_COL32(255, 80, 200, 255), 2.0f);
        right_aligned("predicted peak " + fmt_bytes_short(predicted), IM_COL32(255, 120, 220, 255),
                      y - kLineH);
    }
    if (other_on_chart) {
        const float y = c.Y(other.bytes);
        c.dl->AddLine(ImVec2(c.a.x, y), ImVec2(c.b.x, y), IM_COL32(120, 200, 255, 255), 1.0f);
        right_aligned(std::string(other.label) + " " + fmt_bytes_short(other.bytes) +
                          " (allocator peak " + fmt_bytes_short(m.peak_bytes) + ")",
                      IM_COL32(120, 200, 255, 255), y - kLineH);
    }
    if (cache.device != nullptr) {
        right_aligned("device used (cudaMemGetInfo), peak " + fmt_bytes_short(cache.device_max),
                      IM_COL32(120, 200, 255, 255), c.Y(cache.device_max) - kLineH);
    }
    const LabelBox legend = draw_legend(c, m, cache.peak_index);
    std::vector<PlacedLabel> placed = {{legend, true}};
    for (const ChartLabel& l : labels) {
        const float w = ImGui::CalcTextSize(l.text.c_str()).x;
        placed.push_back({LabelBox{l.x, l.y, l.x + w, l.y + kLineH - 1}, true});
    }
    place_labels(placed, LabelBox{c.a.x, c.a.y, c.b.x, c.b.y});
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const PlacedLabel& p = placed[i + 1];
        if (!p.shown) continue;
        // On a dark backing, so that the lines and bands under a label do not cross its text.
        c.dl->AddRectFilled(ImVec2(p.box.x0 - 2, p.box.y0), ImVec2(p.box.x1 + 2, p.box.y1),
                            IM_COL32(20, 20, 26, 200), 2.0f);
        c.dl->AddText(ImVec2(p.box.x0, p.box.y0), labels[i].color, labels[i].text.c_str());
    }
}

// The tooltip at time t: the bytes by category then, the device's own total.
std::string hover_tip(const Chart& c, const RunData& run, const MemoryChartCache& cache, double t) {
    const MemoryData& m = run.memory;
    auto it = std::upper_bound(m.t_ns.begin(), m.t_ns.end(), std::llround(t));
    if (it == m.t_ns.begin()) return "";
    const std::size_t k = static_cast<std::size_t>(it - m.t_ns.begin()) - 1;
    const std::size_t nc = m.category_count();
    std::string tip = fmt_time_at(t - c.origin_ns, std::max(1.0, c.x.ns_per_px())) + ": " +
                      fmt_bytes_short(m.total[k]) + "\n";
    for (std::size_t i = 0; i < nc; ++i) {
        if (m.by_category[k * nc + i] > 0)
            tip += m.categories[i] + " " + fmt_bytes_short(m.by_category[k * nc + i]) + "\n";
    }
    if (cache.device != nullptr) {
        const auto& dt = cache.device->t_ns;
        auto d = std::upper_bound(dt.begin(), dt.end(), std::llround(t));
        if (d != dt.begin()) {
            tip += "device used " +
                   fmt_bytes_short(
                       cache.device->values[static_cast<std::size_t>(d - dt.begin() - 1)]) +
                   "\n";
        }
    }
    return tip + (m.rows.empty() ? "(no allocation list: the trace's counters only)"
                                 : "click: list the live blocks");
}

// One run's chart. Returns its plot's time axis and whether the pointer is over it.
std::pair<TimeAxis, bool> draw_chart(MemoryState& s, const TimeView& time, int run_index,
                                     const RunData& run, ImVec2 size) {
    Chart c;
    c.dl = ImGui::GetWindowDrawList();
    c.p0 = ImGui::GetCursorScreenPos();
    c.a = ImVec2(c.p0.x + kLeftPx, c.p0.y + kTopPx);
    c.b = ImVec2(c.p0.x + size.x - kRightPx, c.p0.y + size.y - kBottomPx);
    c.origin_ns = time.origin_ns;
    ImGui::InvisibleButton(("chart" + std::to_string(run_index)).c_str(), size);
    const bool hovered = ImGui::IsItemHovered();
    c.columns = std::max(1, static_cast<int>(c.b.x - c.a.x) / kColumnPx);
    // The axis ends on the last column, so that columns and the axis agree to the pixel.
    c.x = TimeAxis{time.window.t0_ns, time.window.t1_ns, c.a.x, c.column_x(c.columns)};
    const MemoryChartCache& cache =
        chart_columns(s, run_index, run, c.columns, time.window.t0_ns, time.window.t1_ns);
    MemoryChartCache& plot = s.charts[static_cast<std::size_t>(run_index)];
    plot.plot_x0 = c.x.x0;
    plot.plot_x1 = c.x.x1;
    plot.plot_y0 = c.a.y;
    plot.plot_y1 = c.b.y;
    const double predicted = run.has_report ? predicted_total_bytes(run.report) : 0.0;
    const OtherTotal other = other_total(run);
    double y_max = std::max({run.memory.peak_bytes, predicted, cache.device_max});
    const bool other_on_chart = other.label != nullptr && other.bytes < 1.5 * y_max;
    if (other_on_chart) y_max = std::max(y_max, other.bytes);
    c.y_max = std::max(1.0, y_max * 1.08);

    draw_axes(c, run, other, other_on_chart);
    c.dl->PushClipRect(c.a, ImVec2(c.b.x + 1, c.b.y + 1), true);
    draw_bands(s, c, run.memory, cache);
    if (cache.device != nullptr) draw_device_line(c, cache);
    draw_marks(c, run, cache, other, other_on_chart);
    if (s.selected_run == run_index) {
        const float x = c.x.x(static_cast<double>(s.selected_t_ns));
        c.dl->AddLine(ImVec2(x, c.a.y), ImVec2(x, c.b.y), IM_COL32(255, 230, 0, 255), 1.5f);
    }
    const ImVec2 mp = ImGui::GetIO().MousePos;
    if (hovered) {
        c.dl->AddLine(ImVec2(mp.x, c.a.y), ImVec2(mp.x, c.b.y), IM_COL32(200, 200, 200, 120));
        const std::string tip = hover_tip(c, run, cache, c.x.t(mp.x));
        if (!tip.empty()) tooltip_text(tip);
    }
    c.dl->PopClipRect();
    return {c.x, hovered};
}

void draw_live_table(const MemoryState& s, const std::vector<RunData>& runs, double origin_ns) {
    if (s.selected_run < 0 || static_cast<std::size_t>(s.selected_run) >= runs.size()) {
        ImGui::TextDisabled("Click a time in a chart to list the blocks live then.");
        return;
    }
    double total = 0;
    for (const LiveBlock& b : s.live)
        total += static_cast<double>(b.bytes);
    ImGui::Text("%s at %s: %zu live blocks, %s", runs[s.selected_run].label.c_str(),
                fmt_time_at(static_cast<double>(s.selected_t_ns) - origin_ns, 1000.0).c_str(),
                s.live.size(), fmt_bytes_short(total).c_str());
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                  ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                  ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("live", 5, flags, ImVec2(0, ImGui::GetContentRegionAvail().y))) return;
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h : {"category", "name", "size", "op (allocated in)", "allocated at"})
        ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(s.live.size()));
    while (clipper.Step()) {
        for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
            const LiveBlock& b = s.live[static_cast<std::size_t>(i)];
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::ColorButton("##c",
                               ImGui::ColorConvertU32ToFloat4(memory_category_color(b.category)),
                               ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
            ImGui::SameLine();
            ImGui::TextUnformatted(b.category.c_str());
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(b.name.empty() ? "(unnamed)" : b.name.c_str());
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(fmt_bytes_short(static_cast<double>(b.bytes)).c_str());
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(b.op.empty() ? "-" : b.op.c_str());
            ImGui::TableNextColumn();
            const double at = static_cast<double>(b.t_allocated_ns) - origin_ns;
            ImGui::TextUnformatted(fmt_time_at(at, 1000.0).c_str());
        }
    }
    ImGui::EndTable();
}

void draw_toolbar(TimeView& time) {
    if (ImGui::Button("Fit")) time.window = time.profiled;
    ImGui::SameLine();
    if (ImGui::Button("Whole run")) time.window = time.whole;
    ImGui::SameLine();
    ImGui::TextDisabled("%s | wheel zoom, drag pan, F fit, click: live blocks, ? keys",
                        window_text(time).c_str());
}

}  // namespace

void draw_memory(MemoryState& s, TimeView& time, const std::vector<RunData>& runs) {
    s.drawn_rects = 0;
    std::vector<int> shown;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].has_memory && !runs[r].memory.empty()) shown.push_back(static_cast<int>(r));
    }
    if (shown.empty()) {
        empty_state(
            "No memory data collected. A run folder from `napkin train --profile all --out DIR` "
            "has memory.json; traces with \"memory\" counters work too.");
        return;
    }
    if (time.window.empty()) time.window = time.profiled;
    draw_toolbar(time);
    const float avail = ImGui::GetContentRegionAvail().y;
    const float table_h = std::max(120.0f, avail * 0.28f);
    const float chart_h =
        std::max(160.0f, (avail - table_h) / static_cast<float>(shown.size()) - 4.0f);
    ImGui::BeginChild("charts", ImVec2(0, avail - table_h), false);
    TimeAxis axis;
    int hovered_run = -1;
    for (int r : shown) {
        const auto [x, hovered] = draw_chart(s, time, r, runs[static_cast<std::size_t>(r)],
                                             ImVec2(ImGui::GetContentRegionAvail().x, chart_h));
        if (hovered || hovered_run < 0) axis = x;
        if (hovered) hovered_run = r;
    }
    // After every chart is drawn, so that all of them show the same window this frame.
    if (navigate_time(time, s.dragging, axis, hovered_run >= 0, true)) {
        const RunData& run = runs[static_cast<std::size_t>(hovered_run)];
        if (!run.memory.rows.empty()) {
            s.selected_run = hovered_run;
            s.selected_t_ns = std::llround(axis.t(ImGui::GetIO().MousePos.x));
            s.live = run.live_at(s.selected_t_ns);
        }
    }
    ImGui::EndChild();
    draw_live_table(s, runs, time.origin_ns);
}

}  // namespace napkin::viewer
