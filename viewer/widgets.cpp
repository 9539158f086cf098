#include "viewer/widgets.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include <GL/gl.h>

namespace napkin::viewer {

namespace {

std::uint32_t fnv1a(std::string_view s) {
    std::uint32_t h = 2166136261u;
    for (char c : s) {
        h ^= static_cast<std::uint8_t>(c);
        h *= 16777619u;
    }
    return h;
}

// A pleasant colour from a hash: fixed saturation and value, hue from the hash.
Rgb hashed_rgb(std::string_view s, float sat, float val) {
    const float hue = static_cast<float>(fnv1a(s) % 360u) / 360.0f;
    float r = 0, g = 0, b = 0;
    ImGui::ColorConvertHSVtoRGB(hue, sat, val, r, g, b);
    return {static_cast<std::uint8_t>(r * 255), static_cast<std::uint8_t>(g * 255),
            static_cast<std::uint8_t>(b * 255)};
}

ImU32 to_u32(Rgb c, float alpha) {
    return IM_COL32(c.r, c.g, c.b, static_cast<int>(alpha * 255.0f + 0.5f));
}

}  // namespace

Rgb memory_category_rgb(std::string_view category) {
    struct Entry {
        std::string_view name;
        Rgb rgb;
    };
    static constexpr Entry kTable[] = {
        {"parameters", {66, 133, 244}},   {"master_weights", {124, 77, 255}},
        {"gradients", {234, 67, 53}},     {"optimizer_state", {251, 188, 5}},
        {"activations", {52, 168, 83}},   {"temporaries", {255, 112, 67}},
        {"communication", {0, 172, 193}}, {"data", {158, 158, 158}},
        {"kv_cache", {171, 71, 188}},
    };
    for (const Entry& e : kTable) {
        if (e.name == category) return e.rgb;
    }
    return hashed_rgb(category, 0.55f, 0.85f);
}

ImU32 memory_category_color(std::string_view category, float alpha) {
    return to_u32(memory_category_rgb(category), alpha);
}

ImU32 event_color(std::string_view category, std::string_view name) {
    struct Entry {
        std::string_view cat;
        Rgb rgb;
    };
    static constexpr Entry kTable[] = {
        {"step", {96, 110, 140}},      {"forward", {70, 130, 180}}, {"backward", {178, 102, 80}},
        {"optimizer", {150, 120, 60}}, {"layer", {110, 120, 150}},  {"launch", {120, 120, 120}},
        {"marker", {200, 200, 80}},
    };
    for (const Entry& e : kTable) {
        if (e.cat == category) return to_u32(e.rgb, 1.0f);
    }
    // Ops and kernels: by name, so the same op has the same colour on every lane and run.
    const bool op_like = category == "op" || category == "kernel";
    return to_u32(hashed_rgb(name, op_like ? 0.45f : 0.35f, op_like ? 0.80f : 0.70f), 1.0f);
}

ImU32 with_alpha(ImU32 color, float alpha) {
    const ImU32 a = static_cast<ImU32>(alpha * 255.0f + 0.5f);
    return (color & ~IM_COL32_A_MASK) | (a << IM_COL32_A_SHIFT);
}

namespace {

// The callbacks run inside ImGui_ImplOpenGL3_RenderDrawData; the command's texture is the atlas.
void set_atlas_filter(const ImDrawCmd* cmd, GLint filter) {
    glBindTexture(GL_TEXTURE_2D,
                  static_cast<GLuint>(reinterpret_cast<std::intptr_t>(cmd->TextureId)));
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, filter);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, filter);
}

}  // namespace

void begin_opaque_fills(ImDrawList* dl) {
    dl->AddCallback(
        [](const ImDrawList*, const ImDrawCmd* cmd) {
            glDisable(GL_BLEND);
            set_atlas_filter(cmd, GL_NEAREST);
        },
        nullptr);
}

void end_opaque_fills(ImDrawList* dl) {
    dl->AddCallback(
        [](const ImDrawList*, const ImDrawCmd* cmd) { set_atlas_filter(cmd, GL_LINEAR); }, nullptr);
    dl->AddCallback(ImDrawCallback_ResetRenderState, nullptr);  // blending back on
}

void empty_state(const char* message) {
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float wrap = std::fmin(avail.x, 520.0f);
    const ImVec2 size = ImGui::CalcTextSize(message, nullptr, false, wrap);
    const ImVec2 cur = ImGui::GetCursorPos();
    ImGui::SetCursorPos(ImVec2(cur.x + std::fmax(0.0f, (avail.x - size.x) * 0.5f),
                               cur.y + std::fmax(0.0f, (avail.y - size.y) * 0.4f)));
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + wrap);
    ImGui::TextUnformatted(message);
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
}

void error_text(const std::string& message) {
    ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 110, 100, 255));
    ImGui::TextWrapped("%s", message.c_str());
    ImGui::PopStyleColor();
}

void tooltip_text(const std::string& text) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40.0f);
    ImGui::TextUnformatted(text.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
}

bool text_fitted(ImDrawList* dl, ImVec2 pos, float max_w, ImU32 color, const std::string& text,
                 float font_size) {
    ImFont* font = ImGui::GetFont();
    const float size = font_size > 0.0f ? font_size : ImGui::GetFontSize();
    auto width = [&](const char* begin, const char* end) {
        return font->CalcTextSizeA(size, FLT_MAX, 0.0f, begin, end).x;
    };
    const char* begin = text.c_str();
    const char* end = begin + text.size();
    if (width(begin, end) <= max_w) {
        dl->AddText(font, size, pos, color, begin, end);
        return false;
    }
    // The longest prefix that fits with "..." after it (binary search on its length).
    const float dots = width("...", nullptr);
    std::size_t lo = 0, hi = text.size();
    while (lo < hi) {
        const std::size_t mid = (lo + hi + 1) / 2;
        if (width(begin, begin + mid) + dots <= max_w) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    while (lo > 0 && (static_cast<unsigned char>(text[lo]) & 0xC0) == 0x80)
        --lo;  // not inside a UTF-8 character
    const std::string cut = text.substr(0, lo) + "...";
    dl->AddText(font, size, pos, color, cut.c_str(), cut.c_str() + cut.size());
    return true;
}

TimeTicks draw_time_ticks(ImDrawList* dl, const TimeAxis& axis, double origin_ns, float y0,
                          float y1, float label_y, ImU32 color) {
    TimeTicks ticks = time_ticks(axis.t0, axis.t1, origin_ns, axis.x1 - axis.x0, 100.0);
    for (const TimeTick& t : ticks.ticks) {
        const float x = std::round(axis.x(t.t_ns));
        dl->AddLine(ImVec2(x, y0), ImVec2(x, y1), color);
        // A label that would run past the axis's end is left out rather than cut.
        if (x + 3 + ImGui::CalcTextSize(t.label.c_str()).x <= axis.x1 + 8)
            dl->AddText(ImVec2(x + 3, label_y), color, t.label.c_str());
    }
    return ticks;
}

void number_or_dash(bool known, const char* format, double value) {
    if (known) {
        ImGui::Text(format, value);
    } else {
        ImGui::TextUnformatted("-");
    }
}

bool navigate_time(TimeView& time, bool& dragging, const TimeAxis& axis, bool hovered,
                   bool wheel_zooms) {
    const ImGuiIO& io = ImGui::GetIO();
    TimeWindow& w = time.window;
    const double span = w.span();
    if (hovered && wheel_zooms && io.MouseWheel != 0.0f) {
        const float mx = io.MousePos.x;
        const double t = mx >= axis.x0 && mx <= axis.x1 ? axis.t(mx) : 0.5 * (w.t0_ns + w.t1_ns);
        zoom_around(w, t, wheel_zoom_factor(static_cast<double>(io.MouseWheel)));
    }
    if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) dragging = true;
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Left)) dragging = false;
    if (dragging && io.MouseDelta.x != 0.0f) {
        pan(w, -static_cast<double>(io.MouseDelta.x) * axis.ns_per_px());
    }
    const bool click = hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
                       std::fabs(ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0.0f).x) < 3.0f;
    if (!io.WantTextInput) {
        const double mid = 0.5 * (w.t0_ns + w.t1_ns);
        if (ImGui::IsKeyDown('W')) zoom_around(w, mid, 0.9);
        if (ImGui::IsKeyDown('S')) zoom_around(w, mid, 1.1);
        if (ImGui::IsKeyDown('A')) pan(w, -0.02 * span);
        if (ImGui::IsKeyDown('D')) pan(w, 0.02 * span);
        if (ImGui::IsKeyPressed('F', false)) w = time.profiled;
    }
    keep_sane(w, time.profiled);
    return click;
}

std::string window_text(const TimeView& time) {
    return "window " + fmt_duration_ns(time.window.span()) + " from " +
           fmt_time_at(time.window.t0_ns - time.origin_ns, time.window.span() / 1000.0);
}

}  // namespace napkin::viewer
