// The kernels view's A-vs-B table: two runs' ops or kernels matched by name (versus_table,
// run_stats.cpp), napkin against napkin or against a PyTorch trace: calls, time (per step when
// both runs have steps), achieved TFLOP/s and bytes of each, and B's time over A's.
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

// One side's calls, time, TFLOP/s and bytes; dashes where the run lacks the name.
void draw_side(const KernelStat& k, double ns) {
    ImGui::TableNextColumn();
    if (k.count == 0) {
        for (int i = 0; i < 3; ++i) {
            ImGui::TextUnformatted("-");
            ImGui::TableNextColumn();
        }
        ImGui::TextUnformatted("-");
        return;
    }
    ImGui::Text("%lld", static_cast<long long>(k.count));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fmt_duration_ns(ns).c_str());
    ImGui::TableNextColumn();
    number_or_dash(k.flops > 0, "%.4g", k.achieved_flop_per_s() / 1e12);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(k.bytes > 0 ? fmt_bytes_short(k.bytes).c_str() : "-");
}

}  // namespace

void draw_versus(KernelsState& s, const std::vector<RunData>& runs) {
    const RunData& a = runs[static_cast<std::size_t>(s.run)];
    const RunData& b = runs[static_cast<std::size_t>(s.versus)];
    if (s.versus_run != s.run || s.versus_scope != s.scope) {
        const auto scope = static_cast<StatScope>(s.scope);
        s.table = versus_table(kernel_stats(a.trace, scope, a.roofline()),
                               kernel_stats(b.trace, scope, b.roofline()));
        s.versus_run = s.run;
        s.versus_scope = s.scope;
    }
    ImGui::TextDisabled("A: %s (%d steps)   B: %s (%d steps)   times %s", a.label.c_str(),
                        s.table.steps_a, b.label.c_str(), s.table.steps_b,
                        s.table.per_step ? "per step" : "over each whole trace");
    if (s.table.rows.empty()) {
        empty_state("Neither run has events of this kind.");
        return;
    }
    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_Borders |
                                  ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                  ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("versus", 10, flags, ImGui::GetContentRegionAvail())) return;
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 3.0f);
    for (const char* h : {"A calls", "A time", "A TFLOP/s", "A bytes", "B calls", "B time",
                          "B TFLOP/s", "B bytes", "B / A time"})
        ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(s.table.rows.size()));
    while (clipper.Step()) {
        for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
            const VersusRow& row = s.table.rows[static_cast<std::size_t>(i)];
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(row.name.c_str());
            draw_side(row.a, s.table.a_ns(row));
            draw_side(row.b, s.table.b_ns(row));
            ImGui::TableNextColumn();
            number_or_dash(s.table.ratio(row) > 0, "%.2fx", s.table.ratio(row));
        }
    }
    ImGui::EndTable();
}

}  // namespace napkin::viewer
