#include "viewer/app.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <imgui.h>

#include "viewer/widgets.h"

namespace napkin::viewer {

namespace {

// The keys and mouse of every view: the `?` overlay (docs/VIEWER.md lists the same).
struct Shortcut {
    const char* input;
    const char* does;
};
struct ShortcutGroup {
    const char* title;
    std::vector<Shortcut> keys;
};
const std::vector<ShortcutGroup>& shortcuts() {
    static const std::vector<ShortcutGroup> kGroups = {
        {"Timeline + Memory",
         {{"mouse wheel", "zoom around the pointer"},
          {"W / S", "zoom in / out around the centre (both views show one window)"},
          {"drag, A / D", "pan"},
          {"F, Fit", "the profiled window (the traces' ranges)"},
          {"Whole run", "everything: counters and memory samples from the process's start"}}},
        {"Timeline",
         {{"shift + wheel", "scroll the lanes"},
          {"hover", "a range's args; a lane label's whole name; a counter's value and scale"},
          {"click", "select a range (its args stay in the status line)"},
          {"right drag", "mark a time range: its ops, kernels and bytes summed per run"},
          {"right click", "clear the marked range"},
          {"find box, Enter",
           "outline every range whose name contains the text; jump to the next"}}},
        {"Memory", {{"click", "list the blocks live at that time"}}},
        {"Kernels",
         {{"click a column header", "sort by it"},
          {"vs", "a second run: the A-vs-B table per name"}}},
        {"Everywhere", {{"?", "this list (? or Esc closes it)"}}},
    };
    return kGroups;
}

void extend(bool& any, double& lo, double& hi, double t0, double t1) {
    lo = any ? std::min(lo, t0) : t0;
    hi = any ? std::max(hi, t1) : t1;
    any = true;
}

}  // namespace

TimeView time_view_of(const std::vector<RunData>& runs) {
    TimeView v;
    bool traces = false, memory = false;  // memory: anything else with a time (counters too)
    double trace_lo = 0, trace_hi = 0, mem_lo = 0, mem_hi = 0;
    for (const RunData& r : runs) {
        // The profiled window is the trace's ranges (its t_min/t_max when it has any): napkin's
        // counters and memory.json start with the process, the ranges when profiling does.
        if (r.has_trace && !r.trace.empty()) {
            extend(traces, trace_lo, trace_hi, static_cast<double>(r.trace.t_min_ns),
                   static_cast<double>(r.trace.t_max_ns));
        }
        for (const CounterSeries& c : r.trace.counters) {
            if (!c.t_ns.empty()) {
                extend(memory, mem_lo, mem_hi, static_cast<double>(c.t_ns.front()),
                       static_cast<double>(c.t_ns.back()));
            }
        }
        if (r.has_memory && !r.memory.empty()) {
            extend(memory, mem_lo, mem_hi, static_cast<double>(r.memory.t_ns.front()),
                   static_cast<double>(r.memory.t_ns.back()));
        }
    }
    v.any = traces || memory;
    if (!v.any) return v;
    double lo = traces ? trace_lo : mem_lo, hi = traces ? trace_hi : mem_hi;
    v.profiled = fitted(lo, hi);
    if (memory) {
        lo = std::min(lo, mem_lo);
        hi = std::max(hi, mem_hi);
    }
    v.whole = fitted(lo, hi);
    v.origin_ns = lo;
    return v;
}

int run_named(const std::vector<RunData>& runs, const std::string& name) {
    int part = -1;
    for (std::size_t r = 0; r < runs.size(); ++r) {
        if (runs[r].label == name) return static_cast<int>(r);
        if (part < 0 && runs[r].label.find(name) != std::string::npos) part = static_cast<int>(r);
    }
    return part;
}

App::App(std::vector<RunData> runs) : runs_(std::move(runs)), time_(time_view_of(runs_)) {}

std::string App::open(const OpenOptions& o) {
    pending_ = o.view;
    help_ = o.keys;
    if (o.mode) kernels_.scope = static_cast<int>(*o.mode);
    if (o.window)
        time_.window = {time_.origin_ns + o.window->t0_ns, time_.origin_ns + o.window->t1_ns};
    std::snprintf(timeline_.find, sizeof timeline_.find, "%s", o.find.c_str());
    if (o.range) {
        timeline_.range_t0 = time_.origin_ns + o.range->t0_ns;
        timeline_.range_t1 = time_.origin_ns + o.range->t1_ns;
    }
    if (!o.versus.empty()) {
        kernels_.versus = run_named(runs_, o.versus);
        if (kernels_.versus < 0)
            return "--versus: no run named '" + o.versus + "' (nor with it in its name)";
        if (kernels_.versus == kernels_.run) kernels_.run = kernels_.versus == 0 ? 1 : 0;
    }
    if (!o.select.empty() &&
        !select_event(timeline_, time_, runs_, o.select, !o.window.has_value())) {
        return "--select: no event named '" + o.select + "' (nor with it in its name)";
    }
    return "";
}

void App::draw_header() {
    // One line per run: its name, what was found, and any file that could not be used.
    for (const RunData& r : runs_) {
        std::string parts;
        if (r.has_trace) {
            parts += std::to_string(r.trace.events.size()) + " events, " +
                     std::to_string(r.trace.lanes.size()) + " lanes";
        }
        if (r.has_memory)
            parts += std::string(parts.empty() ? "" : "; ") +
                     (r.memory.from_counters ? "memory counters" : "memory snapshot");
        if (r.has_report) parts += std::string(parts.empty() ? "" : "; ") + "report";
        ImGui::TextColored(ImVec4(0.75f, 0.85f, 1.0f, 1.0f), "%s", r.label.c_str());
        ImGui::SameLine();
        ImGui::TextDisabled("%s", parts.empty() ? "(nothing loaded)" : parts.c_str());
        if (r.has_report) {
            ImGui::SameLine();
            const profiler::RunOptions& o = r.report.run;
            std::string desc = r.report.model.name + " " + o.precision + ", checkpointing " +
                               o.checkpointing + ", attention " + o.attention + ", " + o.device;
            if (o.finetune != "full")
                desc += ", " + o.finetune + " r" + std::to_string(o.lora_rank.value_or(0));
            if (const auto& c = r.report.communication) {
                desc += ", ZeRO-" + std::to_string(c->zero) + " x " + std::to_string(c->world) +
                        " ranks";
            }
            ImGui::TextDisabled("| %s", desc.c_str());
        }
        for (const std::string& e : r.errors)
            error_text("  " + e);
        for (const std::string& w : r.warnings)
            ImGui::TextColored(ImVec4(1.0f, 0.8f, 0.3f, 1.0f), "  %s", w.c_str());
    }
}

void App::draw_views() {
    if (!ImGui::BeginTabBar("views")) return;
    static constexpr const char* kTitles[] = {"Timeline", "Memory", "Kernels", "Compare",
                                              "Estimate"};
    for (std::size_t i = 0; i < kViewNames.size(); ++i) {
        const auto id = static_cast<ViewId>(i);
        const ImGuiTabItemFlags tab_flags = pending_ == id ? ImGuiTabItemFlags_SetSelected : 0;
        if (!ImGui::BeginTabItem(kTitles[i], nullptr, tab_flags)) continue;
        current_ = id;
        ImGui::BeginChild("view", ImVec2(0, 0), false,
                          ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
        switch (id) {
            case ViewId::timeline:
                draw_timeline(timeline_, time_, runs_);
                break;
            case ViewId::memory:
                draw_memory(memory_, time_, runs_);
                break;
            case ViewId::kernels:
                draw_kernels(kernels_, runs_);
                break;
            case ViewId::compare:
                draw_compare(compare_, runs_);
                break;
            case ViewId::estimate:
                draw_estimate(estimate_, runs_);
                break;
        }
        ImGui::EndChild();
        ImGui::EndTabItem();
    }
    if (ImGui::TabItemButton("?", ImGuiTabItemFlags_Trailing | ImGuiTabItemFlags_NoTooltip))
        help_ = !help_;
    ImGui::EndTabBar();
}

void App::draw_help() {
    const ImGuiIO& io = ImGui::GetIO();
    if (!io.WantTextInput) {
        for (ImWchar c : io.InputQueueCharacters) {
            if (c == '?') help_ = !help_;
        }
        if (help_ && ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false)) help_ = false;
    }
    if (!help_) return;
    const ImGuiViewport* vp = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(
        ImVec2(vp->WorkPos.x + 0.5f * vp->WorkSize.x, vp->WorkPos.y + 0.5f * vp->WorkSize.y),
        ImGuiCond_Always, ImVec2(0.5f, 0.5f));
    ImGui::PushStyleColor(ImGuiCol_WindowBg, IM_COL32(28, 30, 38, 255));
    ImGui::Begin("keys", nullptr,
                 ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_AlwaysAutoResize |
                     ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoMove);
    ImGui::PopStyleColor();
    if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_SizingFixedFit)) {
        for (const ShortcutGroup& g : shortcuts()) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::Spacing();
            ImGui::TextColored(ImVec4(0.75f, 0.85f, 1.0f, 1.0f), "%s", g.title);
            for (const Shortcut& k : g.keys) {
                ImGui::TableNextRow();
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(k.input);
                ImGui::TableNextColumn();
                ImGui::TextDisabled("%s", k.does);
            }
        }
        ImGui::EndTable();
    }
    ImGui::End();
}

void App::draw() {
    const ImGuiViewport* vp = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(vp->WorkPos);
    ImGui::SetNextWindowSize(vp->WorkSize);
    const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                   ImGuiWindowFlags_NoSavedSettings |
                                   ImGuiWindowFlags_NoBringToFrontOnFocus;
    // No window background: the backend's clear colour is the background. llvmpipe (Mesa's
    // software rasterizer, what CI and headless runs use) pays for every blended full-screen quad.
    ImGui::PushStyleColor(ImGuiCol_WindowBg, IM_COL32(0, 0, 0, 0));
    ImGui::Begin("napkin view", nullptr, flags);
    ImGui::PopStyleColor();
    if (runs_.empty()) {
        ImGui::TextDisabled(
            "No run opened: napkin view RUN_DIR... or trace.json (the Estimate tab works without "
            "one)");
    }
    draw_header();
    draw_views();
    if (pending_ == current_) pending_.reset();
    ImGui::End();
    draw_help();
}

}  // namespace napkin::viewer
