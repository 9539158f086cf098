// Memory: bytes held by category, stacked over time, one chart per run; the peak marked, the
// predicted peak (report.json) as a line, the process's or device's own total beside the
// allocator's. A click lists the blocks live at that time with the op that allocated them.
// The chart draws one column per two pixels, taking the sample with the largest total in it, so
// a peak is never lost to downsampling; the columns are cached (MemoryChartCache) until the
// chart's width or data change, and the bands drawn opaque (widgets.h): the frame cost is the
// fill, and that is what llvmpipe under Xvfb runs short of. On GPU runs the trace's "device
// memory" counter (cudaMemGetInfo) is drawn as a line over the allocator's bands.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

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

constexpr int kColumnPx = 2;  // one chart column per this many pixels

// The columns of one chart (see MemoryChartCache), recomputed only when they would change.
const MemoryChartCache& chart_columns(MemoryState& s, int run_index, const RunData& run,
                                      int columns, double t0, double t1) {
    if (s.charts.size() <= static_cast<std::size_t>(run_index)) s.charts.resize(run_index + 1u);
    MemoryChartCache& c = s.charts[static_cast<std::size_t>(run_index)];
    const MemoryData& m = run.memory;
    const CounterSeries* device =
        run.has_trace ? run.trace.counter(kDeviceMemoryCounter, kDeviceMemoryUsedKey) : nullptr;
    if (c.memory == &m && c.device == device && c.samples == m.t_ns.size() &&
        c.columns == columns && c.t0 == t0 && c.t1 == t1) {
        return c;
    }
    c.memory = &m;
    c.device = device;
    c.samples = m.t_ns.size();
    c.columns = columns;
    c.t0 = t0;
    c.t1 = t1;
    c.sample.assign(static_cast<std::size_t>(columns), kNone);
    std::size_t i = 0, carried = SIZE_MAX;
    for (int col = 0; col < columns; ++col) {
        const double tc1 = t0 + (t1 - t0) * (col + 1) / columns;
        std::size_t best = carried;
        while (i < m.t_ns.size() && static_cast<double>(m.t_ns[i]) < tc1) {
            if (best == SIZE_MAX || best == carried || m.total[i] > m.total[best]) best = i;
            carried = i;
            ++i;
        }
        if (best != SIZE_MAX)
            c.sample[static_cast<std::size_t>(col)] = static_cast<std::uint32_t>(best);
    }
    c.peak_index = 0;
    for (std::size_t k = 0; k < m.t_ns.size(); ++k) {
        if (m.t_ns[k] == m.peak_t_ns) c.peak_index = k;
    }
    c.device_used.assign(device != nullptr ? static_cast<std::size_t>(columns) : 0u, NAN);
    c.device_max = 0;
    if (device != nullptr) {
        std::size_t j = 0;
        double last = NAN;
        for (int col = 0; col < columns; ++col) {
            const double tc1 = t0 + (t1 - t0) * (col + 1) / columns;
            double v = last;
            bool any = false;
            while (j < device->t_ns.size() && static_cast<double>(device->t_ns[j]) < tc1) {
                v = any ? std::max(v, device->values[j]) : device->values[j];
                any = true;
                last = device->values[j];
                ++j;
            }
            c.device_used[static_cast<std::size_t>(col)] = v;
        }
        for (double v : device->values)
            c.device_max = std::max(c.device_max, v);
    }
    return c;
}

void draw_chart(MemoryState& s, int run_index, const RunData& run, ImVec2 size) {
    const MemoryData& m = run.memory;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    const float left = 70.0f, right = 10.0f, top = 22.0f, bottom = 18.0f;
    const ImVec2 a(p0.x + left, p0.y + top), b(p0.x + size.x - right, p0.y + size.y - bottom);
    ImGui::InvisibleButton(("chart" + std::to_string(run_index)).c_str(), size);
    const bool hovered = ImGui::IsItemHovered();
    const bool clicked = ImGui::IsItemClicked(ImGuiMouseButton_Left);

    const std::size_t nc = m.category_count();
    double t0 = static_cast<double>(m.t_ns.front()), t1 = static_cast<double>(m.t_ns.back());
    if (run.has_trace && !run.trace.events.empty()) {
        t0 = std::min(t0, static_cast<double>(run.trace.t_min_ns));
        t1 = std::max(t1, static_cast<double>(run.trace.t_max_ns));
    }
    t0 = std::min(t0, 0.0);
    if (t1 <= t0) t1 = t0 + 1000.0;
    const int columns = std::max(1, static_cast<int>(b.x - a.x) / kColumnPx);
    const MemoryChartCache& cache = chart_columns(s, run_index, run, columns, t0, t1);
    MemoryChartCache& plot = s.charts[static_cast<std::size_t>(run_index)];
    plot.plot_x0 = a.x;
    plot.plot_x1 = b.x;
    plot.plot_y0 = a.y;
    plot.plot_y1 = b.y;
    const double predicted = run.has_report ? predicted_total_bytes(run.report) : 0.0;
    const OtherTotal other = other_total(run);
    double y_max = std::max({m.peak_bytes, predicted, cache.device_max});
    const bool other_on_chart = other.label != nullptr && other.bytes < 1.5 * y_max;
    if (other_on_chart) y_max = std::max(y_max, other.bytes);
    y_max = std::max(1.0, y_max * 1.08);
    auto X = [&](double t) { return a.x + static_cast<float>((t - t0) / (t1 - t0)) * (b.x - a.x); };
    auto Y = [&](double v) { return b.y - static_cast<float>(v / y_max) * (b.y - a.y); };

    // No filled plot background: the bands are the content, and fill rate is what software
    // rasterizers (llvmpipe under Xvfb) run out of. A frame and grid lines instead.
    dl->AddRect(a, b, IM_COL32(70, 70, 80, 255));
    for (int i = 0; i <= 4; ++i) {
        const double v = y_max * i / 4.0;
        const float y = Y(v);
        dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), IM_COL32(60, 60, 70, 255));
        const std::string label = fmt_bytes_short(v);
        dl->AddText(ImVec2(p0.x + 2, y - 7), IM_COL32(170, 170, 180, 255), label.c_str());
    }
    dl->AddText(ImVec2(a.x, p0.y + 2), IM_COL32(210, 220, 255, 255),
                (run.label + (m.from_counters ? " (from trace counters)" : "") +
                 (m.device.empty() ? "" : ", " + m.device))
                    .c_str());
    dl->AddText(ImVec2(a.x, b.y + 2), IM_COL32(150, 150, 160, 255), fmt_duration_ns(t0).c_str());
    const std::string t_end = fmt_duration_ns(t1);
    dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(t_end.c_str()).x, b.y + 2),
                IM_COL32(150, 150, 160, 255), t_end.c_str());

    // The bands, from the cached columns. A category's band is extended while its top and bottom
    // stay on the same pixels, so a flat band is one rect (software rasterizers pay per triangle
    // and per tile it spans); drawn opaque (begin_opaque_fills) since they never overlap.
    s.bands.assign(3 * nc, 0.0f);  // x0 (< 0: no open band), y_top, y_bottom
    for (std::size_t c = 0; c < nc; ++c)
        s.bands[3 * c] = -1.0f;
    begin_opaque_fills(dl);
    auto close = [&](std::size_t c, float x1) {
        float* band = &s.bands[3 * c];
        if (band[0] >= 0.0f && band[1] < band[2]) {
            dl->AddRectFilled(ImVec2(band[0], band[1]), ImVec2(x1, band[2]),
                              memory_category_color(m.categories[c]));
            ++s.drawn_rects;
        }
        band[0] = -1.0f;
    };
    for (int col = 0; col < columns; ++col) {
        const std::uint32_t k = cache.sample[static_cast<std::size_t>(col)];
        if (k == kNone) continue;
        const float x = a.x + static_cast<float>(col * kColumnPx);
        double below = 0;
        for (std::size_t c = 0; c < nc; ++c) {
            const double v = std::max(0.0, m.by_category[k * nc + c]);
            const float y_bottom = std::round(Y(below)), y_top = std::round(Y(below + v));
            below += v;
            float* band = &s.bands[3 * c];
            if (band[0] >= 0.0f && band[1] == y_top && band[2] == y_bottom) continue;
            close(c, x);
            band[0] = x;
            band[1] = y_top;
            band[2] = y_bottom;
        }
    }
    for (std::size_t c = 0; c < nc; ++c)
        close(c, a.x + static_cast<float>(columns * kColumnPx));
    end_opaque_fills(dl);

    // The device's own total over time (cudaMemGetInfo, GPU runs): a step line, one point per
    // column where it changes.
    char buf[200];
    if (cache.device != nullptr) {
        const ImU32 col = IM_COL32(120, 200, 255, 255);
        float last_y = -1.0f;
        for (int c = 0; c < columns; ++c) {
            const double v = cache.device_used[static_cast<std::size_t>(c)];
            if (!std::isfinite(v)) continue;
            const float x = a.x + static_cast<float>(c * kColumnPx), y = std::round(Y(v));
            if (y == last_y) continue;
            if (last_y >= 0.0f) dl->PathLineTo(ImVec2(x, last_y));
            dl->PathLineTo(ImVec2(x, y));
            last_y = y;
        }
        if (last_y >= 0.0f) {
            dl->PathLineTo(ImVec2(a.x + static_cast<float>(columns * kColumnPx), last_y));
            dl->PathStroke(col, 0, 2.0f);
        }
        std::snprintf(buf, sizeof buf, "device used (cudaMemGetInfo), peak %s",
                      fmt_bytes_short(cache.device_max).c_str());
        // Right-aligned, where the legend (top left) is not.
        dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(buf).x - 4, Y(cache.device_max) - 15), col,
                    buf);
    }
    // The peak, the prediction, the other total.
    const float px = X(static_cast<double>(m.peak_t_ns));
    dl->AddLine(ImVec2(px, a.y), ImVec2(px, b.y), IM_COL32(255, 255, 255, 200), 1.5f);
    std::snprintf(buf, sizeof buf, "peak %s at %s", fmt_bytes_short(m.peak_bytes).c_str(),
                  fmt_duration_ns(static_cast<double>(m.peak_t_ns)).c_str());
    const float tw = ImGui::CalcTextSize(buf).x;
    dl->AddText(ImVec2(std::min(px + 4, b.x - tw), Y(m.peak_bytes) - 16),
                IM_COL32(255, 255, 255, 255), buf);
    if (predicted > 0) {
        const float y = Y(predicted);
        for (float x = a.x; x < b.x; x += 12)
            dl->AddLine(ImVec2(x, y), ImVec2(std::min(x + 7, b.x), y), IM_COL32(255, 80, 200, 255),
                        2.0f);
        std::snprintf(buf, sizeof buf, "predicted peak %s", fmt_bytes_short(predicted).c_str());
        dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(buf).x - 4, y - 15),
                    IM_COL32(255, 120, 220, 255), buf);
    }
    if (other.label != nullptr) {
        std::snprintf(buf, sizeof buf, "%s %s (allocator peak %s)", other.label,
                      fmt_bytes_short(other.bytes).c_str(), fmt_bytes_short(m.peak_bytes).c_str());
        if (other_on_chart) {
            const float y = Y(other.bytes);
            dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), IM_COL32(120, 200, 255, 255), 1.0f);
            dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(buf).x - 4, y - 15),
                        IM_COL32(120, 200, 255, 255), buf);
        } else {
            dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(buf).x - 4, p0.y + 2),
                        IM_COL32(120, 200, 255, 255), buf);
        }
    }
    // Legend: the categories that hold anything at the peak.
    float lx = a.x + 8, ly = a.y + 6;
    const std::size_t peak_i = cache.peak_index;
    int legend_rows = 0;
    float legend_w = 0;
    for (std::size_t c = 0; c < nc; ++c) {
        const double v = m.by_category[peak_i * nc + c];
        if (v <= 0) continue;
        ++legend_rows;
        std::snprintf(buf, sizeof buf, "%s %s", m.categories[c].c_str(),
                      fmt_bytes_short(v).c_str());
        legend_w = std::max(legend_w, ImGui::CalcTextSize(buf).x);
    }
    dl->AddRectFilled(ImVec2(lx - 4, ly - 2),
                      ImVec2(lx + legend_w + 20, ly + 16.0f * static_cast<float>(legend_rows) + 2),
                      IM_COL32(20, 20, 26, 220), 3.0f);
    for (std::size_t c = 0; c < nc; ++c) {
        const double v = m.by_category[peak_i * nc + c];
        if (v <= 0) continue;
        std::snprintf(buf, sizeof buf, "%s %s", m.categories[c].c_str(),
                      fmt_bytes_short(v).c_str());
        dl->AddRectFilled(ImVec2(lx, ly + 2), ImVec2(lx + 10, ly + 12),
                          memory_category_color(m.categories[c]));
        dl->AddText(ImVec2(lx + 14, ly), IM_COL32(220, 220, 225, 255), buf);
        ly += 16;
    }
    if (s.selected_run == run_index) {
        const float x = X(static_cast<double>(s.selected_t_ns));
        dl->AddLine(ImVec2(x, a.y), ImVec2(x, b.y), IM_COL32(255, 230, 0, 255), 1.5f);
    }
    if (hovered) {
        const ImVec2 mp = ImGui::GetIO().MousePos;
        const double t = t0 + static_cast<double>((mp.x - a.x) / (b.x - a.x)) * (t1 - t0);
        dl->AddLine(ImVec2(mp.x, a.y), ImVec2(mp.x, b.y), IM_COL32(200, 200, 200, 120));
        auto it = std::upper_bound(m.t_ns.begin(), m.t_ns.end(),
                                   static_cast<std::int64_t>(std::llround(t)));
        if (it != m.t_ns.begin()) {
            const std::size_t k = static_cast<std::size_t>(it - m.t_ns.begin()) - 1;
            std::string tip = fmt_duration_ns(t) + ": " + fmt_bytes_short(m.total[k]) + "\n";
            for (std::size_t c = 0; c < nc; ++c) {
                if (m.by_category[k * nc + c] > 0)
                    tip +=
                        m.categories[c] + " " + fmt_bytes_short(m.by_category[k * nc + c]) + "\n";
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
            tip += m.rows.empty() ? "(no allocation list: the trace's counters only)"
                                  : "click: list the live blocks";
            tooltip_text(tip);
        }
        if (clicked && !m.rows.empty()) {
            s.selected_run = run_index;
            s.selected_t_ns = std::llround(t);
            s.live = run.live_at(s.selected_t_ns);
        }
    }
}

void draw_live_table(const MemoryState& s, const std::vector<RunData>& runs) {
    if (s.selected_run < 0 || static_cast<std::size_t>(s.selected_run) >= runs.size()) {
        ImGui::TextDisabled("Click a time in a chart to list the blocks live then.");
        return;
    }
    double total = 0;
    for (const LiveBlock& b : s.live)
        total += static_cast<double>(b.bytes);
    ImGui::Text("%s at %s: %zu live blocks, %s", runs[s.selected_run].label.c_str(),
                fmt_duration_ns(static_cast<double>(s.selected_t_ns)).c_str(), s.live.size(),
                fmt_bytes_short(total).c_str());
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                  ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                  ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("live", 5, flags, ImVec2(0, ImGui::GetContentRegionAvail().y))) return;
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("category");
    ImGui::TableSetupColumn("name");
    ImGui::TableSetupColumn("size");
    ImGui::TableSetupColumn("op (allocated in)");
    ImGui::TableSetupColumn("allocated at");
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
            ImGui::TextUnformatted(fmt_duration_ns(static_cast<double>(b.t_allocated_ns)).c_str());
        }
    }
    ImGui::EndTable();
}

}  // namespace

void draw_memory(MemoryState& s, const std::vector<RunData>& runs) {
    s.drawn_rects = 0;
    std::vector<int> shown;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].has_memory && !runs[r].memory.empty()) shown.push_back(static_cast<int>(r));
    }
    if (shown.empty()) {
        empty_state(
            "No memory data collected. A run folder from `napkin train --profile all --out DIR` "
            "has "
            "memory.json; traces with \"memory\" counters work too.");
        return;
    }
    const float avail = ImGui::GetContentRegionAvail().y;
    const float table_h = std::max(120.0f, avail * 0.28f);
    const float chart_h =
        std::max(160.0f, (avail - table_h) / static_cast<float>(shown.size()) - 4.0f);
    ImGui::BeginChild("charts", ImVec2(0, avail - table_h), false);
    for (int r : shown)
        draw_chart(s, r, runs[static_cast<std::size_t>(r)],
                   ImVec2(ImGui::GetContentRegionAvail().x, chart_h));
    ImGui::EndChild();
    draw_live_table(s, runs);
}

}  // namespace napkin::viewer
