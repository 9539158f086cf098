// Kernels: one row per kernel (or op, or any range) name of a run: calls, total and mean time,
// share of the step time, for ops the device time of the work they launched (which TFLOP/s then
// divides by), FLOPs, achieved TFLOP/s and its share of the run's peak, napkin's
// roofline prediction for the same calls and measured / roofline (report.json's ceilings).
// Sortable. With a second run chosen ("vs"), the A-vs-B table of the two (view_versus.cpp).
#include <algorithm>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "viewer/view.h"
#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

enum Column : int {
    kName,
    kCount,
    kTotal,
    kDevice,
    kMean,
    kShare,
    kFlops,
    kTflops,
    kPeak,
    kRoofline,
    kOverRoofline,
    kColumns
};

double sort_key(const KernelStat& k, int column, double peak) {
    switch (column) {
        case kCount:
            return static_cast<double>(k.count);
        case kTotal:
            return static_cast<double>(k.total_ns);
        case kDevice:
            return static_cast<double>(k.device_ns);
        case kMean:
            return k.mean_ns();
        case kShare:
            return static_cast<double>(k.total_ns);
        case kFlops:
            return k.flops;
        case kTflops:
            return k.achieved_flop_per_s();
        case kPeak:
            return peak > 0 ? k.achieved_flop_per_s() / peak : 0;
        case kRoofline:
            return k.roofline_ns;
        case kOverRoofline:
            return k.over_roofline();
        default:
            return 0;
    }
}

// The run, the scope (kernels, ops, every range), the step time and the peak compared against.
void draw_toolbar(KernelsState& s, const std::vector<RunData>& runs,
                  const std::vector<int>& with_trace) {
    ImGui::SetNextItemWidth(260);
    if (ImGui::BeginCombo("run", runs[static_cast<std::size_t>(s.run)].label.c_str())) {
        for (int r : with_trace) {
            if (ImGui::Selectable(runs[static_cast<std::size_t>(r)].label.c_str(), r == s.run))
                s.run = r;
        }
        ImGui::EndCombo();
    }
    ImGui::SameLine();
    ImGui::SetNextItemWidth(200);
    const char* versus = s.versus >= 0 ? runs[static_cast<std::size_t>(s.versus)].label.c_str()
                                       : "(none: one run's table)";
    if (ImGui::BeginCombo("vs", versus)) {
        if (ImGui::Selectable("(none: one run's table)", s.versus < 0)) s.versus = -1;
        for (int r : with_trace) {
            if (r != s.run &&
                ImGui::Selectable(runs[static_cast<std::size_t>(r)].label.c_str(), r == s.versus)) {
                s.versus = r;
                s.versus_run = -1;  // a new pair: the table is recomputed
            }
        }
        ImGui::EndCombo();
    }
    ImGui::SameLine();
    ImGui::RadioButton("kernels", &s.scope, static_cast<int>(StatScope::kernels));
    ImGui::SameLine();
    ImGui::RadioButton("ops", &s.scope, static_cast<int>(StatScope::ops));
    ImGui::SameLine();
    ImGui::RadioButton("all ranges", &s.scope, static_cast<int>(StatScope::all));
}

void refresh_stats(KernelsState& s, const RunData& run) {
    if (s.stats_valid && s.stats_run == s.run && s.stats_scope == s.scope) return;
    s.stats = kernel_stats(run.trace, static_cast<StatScope>(s.scope), run.roofline());
    s.stats_valid = true;
    s.stats_run = s.run;
    s.stats_scope = s.scope;
    s.resort = true;  // new rows: apply the table's current sort order
}

// Sorts the rows when the table's sort order changed or the rows are new.
void sort_rows(KernelsState& s, double peak) {
    ImGuiTableSortSpecs* spec = ImGui::TableGetSortSpecs();
    if (spec == nullptr || !(spec->SpecsDirty || s.resort)) return;
    s.resort = false;
    if (spec->SpecsCount > 0) {
        const int col = spec->Specs[0].ColumnIndex;
        const bool asc = spec->Specs[0].SortDirection == ImGuiSortDirection_Ascending;
        std::stable_sort(s.stats.rows.begin(), s.stats.rows.end(),
                         [&](const KernelStat& a, const KernelStat& b) {
                             if (col == kName) return asc ? a.name < b.name : a.name > b.name;
                             const double ka = sort_key(a, col, peak), kb = sort_key(b, col, peak);
                             return asc ? ka < kb : ka > kb;
                         });
    }
    spec->SpecsDirty = false;
}

void draw_row(const KernelStat& k, double step_ns, double peak) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(k.name.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%lld", static_cast<long long>(k.count));
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fmt_duration_ns(static_cast<double>(k.total_ns)).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(
        k.device_ns > 0 ? fmt_duration_ns(static_cast<double>(k.device_ns)).c_str() : "-");
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(fmt_duration_ns(k.mean_ns()).c_str());
    ImGui::TableNextColumn();
    const float share =
        step_ns > 0 ? static_cast<float>(static_cast<double>(k.total_ns) / step_ns) : 0.0f;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0f * share);
    ImGui::ProgressBar(std::min(share, 1.0f), ImVec2(-1, 0), buf);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(k.flops > 0 ? fmt_flops(k.flops).c_str() : "-");
    ImGui::TableNextColumn();
    number_or_dash(k.flops > 0, "%.4g", k.achieved_flop_per_s() / 1e12);
    ImGui::TableNextColumn();
    number_or_dash(k.flops > 0 && peak > 0, "%.1f%%", 100.0 * k.achieved_flop_per_s() / peak);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(k.roofline_ns > 0 ? fmt_duration_ns(k.roofline_ns).c_str() : "-");
    ImGui::TableNextColumn();
    number_or_dash(k.roofline_ns > 0, "%.2fx", k.over_roofline());
}

void draw_table(KernelsState& s, double peak) {
    const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg |
                                  ImGuiTableFlags_Borders | ImGuiTableFlags_ScrollY |
                                  ImGuiTableFlags_Resizable | ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("kernels", kColumns, flags, ImGui::GetContentRegionAvail())) return;
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 3.0f);
    // Numbers fit their widest cell or header (never a clipped "TFLO"); the name takes the rest.
    const ImGuiTableColumnFlags number = ImGuiTableColumnFlags_WidthFixed;
    ImGui::TableSetupColumn("count", number);
    ImGui::TableSetupColumn("total", number | ImGuiTableColumnFlags_DefaultSort |
                                         ImGuiTableColumnFlags_PreferSortDescending);
    for (const char* h : {"device", "mean"})
        ImGui::TableSetupColumn(h, number | ImGuiTableColumnFlags_PreferSortDescending);
    // The share's bar fills its column: a fixed width, room for the header and "100.0%".
    ImGui::TableSetupColumn("% of step", number | ImGuiTableColumnFlags_PreferSortDescending,
                            ImGui::CalcTextSize("% of step ").x * 1.5f);
    for (const char* h : {"FLOPs", "TFLOP/s", "% of peak", "roofline", "x roofline"})
        ImGui::TableSetupColumn(h, number | ImGuiTableColumnFlags_PreferSortDescending);
    ImGui::TableHeadersRow();
    sort_rows(s, peak);
    const double step = static_cast<double>(s.stats.step_total_ns);
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(s.stats.rows.size()));
    while (clipper.Step()) {
        for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i)
            draw_row(s.stats.rows[static_cast<std::size_t>(i)], step, peak);
    }
    ImGui::EndTable();
}

}  // namespace

void draw_kernels(KernelsState& s, const std::vector<RunData>& runs) {
    std::vector<int> with_trace;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].has_trace && !runs[r].trace.events.empty())
            with_trace.push_back(static_cast<int>(r));
    }
    if (with_trace.empty()) {
        empty_state(
            "No kernels: no trace is loaded. Open a run folder with a trace.json "
            "(napkin train --profile all --out DIR) or a Chrome trace.");
        return;
    }
    if (std::find(with_trace.begin(), with_trace.end(), s.run) == with_trace.end())
        s.run = with_trace.front();
    draw_toolbar(s, runs, with_trace);
    if (s.versus == s.run ||
        std::find(with_trace.begin(), with_trace.end(), s.versus) == with_trace.end())
        s.versus = -1;
    if (s.versus >= 0) {
        draw_versus(s, runs);
        return;
    }
    const RunData& run = runs[static_cast<std::size_t>(s.run)];
    refresh_stats(s, run);
    const double peak = run.peak_flops_per_s();
    ImGui::SameLine();
    const std::string span = fmt_duration_ns(static_cast<double>(s.stats.step_total_ns));
    const std::string peak_text = peak > 0 ? fmt_rate(peak, "FLOP") : "unknown (no report.json)";
    if (s.stats.steps > 0)
        ImGui::TextDisabled("| %d step%s, %s | peak %s", s.stats.steps,
                            s.stats.steps == 1 ? "" : "s", span.c_str(), peak_text.c_str());
    else  // "% of step" is then a share of the whole trace
        ImGui::TextDisabled("| no step ranges: %% of the trace's %s | peak %s", span.c_str(),
                            peak_text.c_str());
    if (s.stats.rows.empty()) {
        empty_state(s.scope == static_cast<int>(StatScope::kernels)
                        ? "No kernel events in this trace (category \"kernel\" or a device lane). "
                          "Try \"ops\" or \"all ranges\"."
                        : "No events of this kind in the trace.");
        return;
    }
    draw_table(s, peak);
}

}  // namespace napkin::viewer
