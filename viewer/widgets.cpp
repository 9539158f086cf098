#include "viewer/widgets.h"

#include <cmath>
#include <cstdio>

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

std::string format(const char* fmt, double v, const char* unit) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v, unit);
    return buf;
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

std::string fmt_duration_ns(double ns) {
    if (std::fabs(ns) < 0.5) ns = 0;  // no "-0 ns"
    const double a = std::fabs(ns);
    if (a < 1e3) return format("%.0f %s", ns, "ns");
    if (a < 1e6) return format("%.3g %s", ns / 1e3, "us");
    if (a < 1e9) return format("%.3g %s", ns / 1e6, "ms");
    return format("%.4g %s", ns / 1e9, "s");
}

std::string fmt_bytes_short(double bytes) {
    const double a = std::fabs(bytes);
    if (a < 1e3) return format("%.0f %s", bytes, "B");
    if (a < 1e6) return format("%.3g %s", bytes / 1e3, "kB");
    if (a < 1e9) return format("%.3g %s", bytes / 1e6, "MB");
    if (a < 1e12) return format("%.3g %s", bytes / 1e9, "GB");
    return format("%.3g %s", bytes / 1e12, "TB");
}

std::string fmt_flops(double flops) {
    const double a = std::fabs(flops);
    if (a < 1e6) return format("%.4g %s", flops / 1e3, "kFLOP");
    if (a < 1e9) return format("%.4g %s", flops / 1e6, "MFLOP");
    if (a < 1e12) return format("%.4g %s", flops / 1e9, "GFLOP");
    return format("%.4g %s", flops / 1e12, "TFLOP");
}

std::string fmt_rate(double per_s, const char* unit) {
    const double a = std::fabs(per_s);
    char buf[64];
    if (a < 1e9) {
        std::snprintf(buf, sizeof buf, "%.3g M%s/s", per_s / 1e6, unit);
    } else if (a < 1e12) {
        std::snprintf(buf, sizeof buf, "%.3g G%s/s", per_s / 1e9, unit);
    } else {
        std::snprintf(buf, sizeof buf, "%.3g T%s/s", per_s / 1e12, unit);
    }
    return buf;
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

}  // namespace napkin::viewer
