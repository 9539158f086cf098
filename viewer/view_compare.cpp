// Compare: runs side by side (precision, checkpointing, attention, ZeRO stage...). Predicted vs
// measured bytes per memory category, step time (and the performance model's), tokens/s, MFU and
// (data-parallel runs) bytes sent per step as bars, the table of settings and results
// (compare_table, run_compare.cpp) with the rows that differ marked, and each op's predicted vs
// measured time (op_time_table, run_stats.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/run_stats.h"
#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

constexpr const char* kCategories[] = {"parameters",      "master_weights", "gradients",
                                       "optimizer_state", "activations",    "temporaries"};

// Category g's (kCategories) predicted bytes and measured peak; 0 when the report has none.
double predicted(const ReportData& r, std::size_t g) {
    return r.predicted.bytes[g];
}
double measured(const ReportData& r, std::size_t g) {
    return static_cast<double>(r.measured.peak_bytes[g].value_or(0));
}

std::string run_tag(std::size_t i) {
    return std::string(1, static_cast<char>('A' + static_cast<int>(i % 26)));
}

// Grouped bars: per category, per run, predicted (outline) and measured (filled).
void draw_memory_bars(const std::vector<const RunData*>& rs, ImVec2 size) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    const float left = 70.0f, bottom = 34.0f, top = 24.0f;
    const ImVec2 a(p0.x + left, p0.y + top), b(p0.x + size.x - 8, p0.y + size.y - bottom);
    double y_max = 1;
    for (const RunData* r : rs) {
        for (std::size_t g = 0; g < std::size(kCategories); ++g)
            y_max = std::max({y_max, predicted(r->report, g), measured(r->report, g)});
    }
    y_max *= 1.1;
    auto Y = [&](double v) { return b.y - static_cast<float>(v / y_max) * (b.y - a.y); };
    dl->AddRectFilled(a, b, IM_COL32(28, 28, 34, 255));
    dl->AddText(ImVec2(a.x, p0.y + 2), IM_COL32(210, 220, 255, 255),
                "memory by category: predicted (outline) vs measured peak (filled), per run");
    for (int i = 0; i <= 4; ++i) {
        const double v = y_max * i / 4.0;
        dl->AddLine(ImVec2(a.x, Y(v)), ImVec2(b.x, Y(v)), IM_COL32(60, 60, 70, 255));
        dl->AddText(ImVec2(p0.x + 2, Y(v) - 7), IM_COL32(170, 170, 180, 255),
                    fmt_bytes_short(v).c_str());
    }
    const std::size_t groups = std::size(kCategories);
    const float group_w = (b.x - a.x) / static_cast<float>(groups);
    const float bar_w = std::min(
        36.0f, (group_w - 16.0f) / static_cast<float>(std::max<std::size_t>(1, rs.size())));
    for (std::size_t g = 0; g < groups; ++g) {
        const char* cat = kCategories[g];
        const float gx = a.x + group_w * static_cast<float>(g) + 8.0f;
        const ImU32 col = memory_category_color(cat);
        for (std::size_t r = 0; r < rs.size(); ++r) {
            const float x0 = gx + bar_w * static_cast<float>(r), x1 = x0 + bar_w - 4.0f;
            const double meas = measured(rs[r]->report, g), pred = predicted(rs[r]->report, g);
            dl->AddRectFilled(ImVec2(x0, Y(meas)), ImVec2(x1, b.y), col);
            dl->AddRect(ImVec2(x0 - 1, Y(pred)), ImVec2(x1 + 1, b.y), IM_COL32(255, 255, 255, 230),
                        0, 0, 1.5f);
            dl->AddText(ImVec2(x0 + 0.5f * (x1 - x0) - 4, b.y + 2), IM_COL32(200, 200, 210, 255),
                        run_tag(r).c_str());
            if (ImGui::IsMouseHoveringRect(ImVec2(x0, a.y), ImVec2(x1, b.y))) {
                tooltip_text(rs[r]->label + " " + cat + "\npredicted " + fmt_bytes_short(pred) +
                             "\nmeasured peak " + fmt_bytes_short(meas));
            }
        }
        dl->AddText(ImVec2(gx, b.y + 16), IM_COL32(220, 220, 225, 255), cat);
    }
}

// One horizontal bar per run for a scalar.
void draw_scalar_bars(const char* title, const std::vector<const RunData*>& rs,
                      const std::vector<double>& values, const std::vector<std::string>& labels,
                      ImVec2 size) {
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::Dummy(size);
    dl->AddText(p0, IM_COL32(210, 220, 255, 255), title);
    double vmax = 0;
    for (double v : values)
        vmax = std::max(vmax, std::isfinite(v) ? v : 0.0);
    if (vmax <= 0) vmax = 1;
    const float row =
        std::min(22.0f, (size.y - 20.0f) / static_cast<float>(std::max<std::size_t>(1, rs.size())));
    for (std::size_t r = 0; r < rs.size(); ++r) {
        const float y = p0.y + 20.0f + row * static_cast<float>(r);
        const float x0 = p0.x + 22.0f;
        const float w = (size.x - 30.0f) *
                        static_cast<float>((std::isfinite(values[r]) ? values[r] : 0.0) / vmax);
        dl->AddText(ImVec2(p0.x + 4, y + 2), IM_COL32(200, 200, 210, 255), run_tag(r).c_str());
        dl->AddRectFilled(ImVec2(x0, y + 2), ImVec2(x0 + std::max(w, 1.0f), y + row - 2),
                          IM_COL32(90, 140, 210, 255));
        dl->AddText(ImVec2(x0 + 4, y + 3), IM_COL32(255, 255, 255, 255), labels[r].c_str());
    }
}

// A table of rows (CompareRow) with a column per run, `height` tall (0: the rest of the view).
void draw_rows_table(const char* id, const char* first_column,
                     const std::vector<const RunData*>& rs, const std::vector<CompareRow>& rows,
                     float height) {
    const int columns = static_cast<int>(rs.size()) + 1;
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                  ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchSame;
    if (columns > 64 ||
        !ImGui::BeginTable(id, columns, flags,
                           ImVec2(0, height > 0 ? height : ImGui::GetContentRegionAvail().y)))
        return;
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn(first_column);
    for (std::size_t r = 0; r < rs.size(); ++r)
        ImGui::TableSetupColumn((run_tag(r) + ": " + rs[r]->label).c_str());
    ImGui::TableHeadersRow();
    for (const CompareRow& row : rows) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        if (row.differs) {
            ImGui::TextColored(ImVec4(1.0f, 0.85f, 0.3f, 1.0f), "%s *", row.key.c_str());
        } else {
            ImGui::TextUnformatted(row.key.c_str());
        }
        for (const std::string& v : row.values) {
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(v.c_str());
        }
    }
    ImGui::EndTable();
}

}  // namespace

void draw_compare(CompareState& /*state*/, const std::vector<RunData>& runs) {
    std::vector<const RunData*> rs;
    for (const RunData& r : runs) {
        if (r.has_report) rs.push_back(&r);
    }
    if (rs.empty()) {
        empty_state(
            "Nothing to compare: no report.json loaded. Open two or more run folders written by "
            "`napkin train --profile all --out DIR` (say one fp32, one bf16-amp with "
            "--checkpointing full).");
        return;
    }
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const bool parallel = std::any_of(
        rs.begin(), rs.end(), [](const RunData* r) { return r->report.communication.has_value(); });
    // Tall enough for a 16-pixel row per run in each scalar chart, up to 60% of the view.
    const float charts = parallel ? 4.0f : 3.0f;
    const float wanted = charts * (24.0f + 16.0f * static_cast<float>(rs.size()));
    const float top_h = std::max({220.0f, avail.y * 0.45f, std::min(wanted, avail.y * 0.6f)});
    draw_memory_bars(rs, ImVec2(avail.x * 0.62f, top_h));
    ImGui::SameLine();
    ImGui::BeginGroup();
    const float side_w = avail.x * 0.36f;
    const float each_h = top_h / charts - 4.0f;
    std::vector<double> step, tps, mfu;
    std::vector<std::string> step_l, tps_l, mfu_l;
    char buf[64];
    for (const RunData* r : rs) {
        step.push_back(median_step_seconds(r->report));
        step_l.push_back(std::isfinite(step.back()) ? fmt_duration_ns(step.back() * 1e9) : "-");
        if (const double pred = predicted_step_seconds(r->report); std::isfinite(pred))
            step_l.back() += " (predicted " + fmt_duration_ns(pred * 1e9) + ")";
        tps.push_back(r->report.measured.tokens_per_s);
        std::snprintf(buf, sizeof buf, "%.0f tok/s", tps.back());
        tps_l.push_back(std::isfinite(tps.back()) ? buf : "-");
        mfu.push_back(r->report.measured.mfu);
        std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * mfu.back());
        mfu_l.push_back(std::isfinite(mfu.back()) ? buf : "-");
    }
    draw_scalar_bars("step time (median; the performance model's prediction)", rs, step, step_l,
                     ImVec2(side_w, each_h));
    draw_scalar_bars("tokens/s", rs, tps, tps_l, ImVec2(side_w, each_h));
    draw_scalar_bars("MFU (model FLOP/s / peak)", rs, mfu, mfu_l, ImVec2(side_w, each_h));
    if (parallel) {
        // ZeRO's traffic: the optimizer state's collectives per step, as measured on the rank.
        std::vector<double> sent;
        std::vector<std::string> sent_l;
        for (const RunData* r : rs) {
            const auto& comm = r->report.communication;
            sent.push_back(comm ? static_cast<double>(comm->measured_per_step.state_sent_bytes)
                                : NAN);
            sent_l.push_back(comm ? fmt_bytes_short(sent.back()) + ", ZeRO-" +
                                        std::to_string(comm->zero) + " x" +
                                        std::to_string(comm->world)
                                  : "- (1 process)");
        }
        draw_scalar_bars("bytes sent per step (ZeRO, this rank)", rs, sent, sent_l,
                         ImVec2(side_w, each_h));
    }
    ImGui::EndGroup();

    // The table (compare_table, run_compare.cpp): settings, then results; rows that differ marked.
    // Under it, with a time prediction, each op's predicted (performance model) vs measured time.
    const std::vector<CompareRow> ops = op_time_table(rs);
    const float table_h = ImGui::GetContentRegionAvail().y;
    draw_rows_table("compare", "", rs, compare_table(rs), ops.empty() ? table_h : table_h * 0.55f);
    if (!ops.empty())
        draw_rows_table("op times", "op: predicted / measured per step", rs, ops, 0.0f);
}

}  // namespace napkin::viewer
