#include "viewer/app.h"

#include <cmath>
#include <string>

#include <imgui.h>

#include "viewer/widgets.h"

namespace napkin::viewer {

App::App(std::vector<RunData> runs) : runs_(std::move(runs)) {}

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
    if (ImGui::BeginTabBar("views")) {
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
                    draw_timeline(timeline_, runs_);
                    break;
                case ViewId::memory:
                    draw_memory(memory_, runs_);
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
        ImGui::EndTabBar();
    }
    if (pending_ == current_) pending_.reset();
    ImGui::End();
}

}  // namespace napkin::viewer
