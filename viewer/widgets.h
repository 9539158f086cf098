// Reusable drawing helpers shared by the panels: colours, number formats, empty states, bars.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <imgui.h>

namespace napkin::viewer {

// The fixed colour of a memory category (napkin's eight; others from a hash), as RGB. The GUI
// tests look for these exact colours in the memory view's screenshot.
struct Rgb {
    std::uint8_t r, g, b;
};
Rgb memory_category_rgb(std::string_view category);
ImU32 memory_category_color(std::string_view category, float alpha = 1.0f);
// Timeline boxes: by category (step, op, kernel, ...), by name hash for other tools' traces.
ImU32 event_color(std::string_view category, std::string_view name);
ImU32 with_alpha(ImU32 color, float alpha);

std::string fmt_duration_ns(double ns);     // "850 ns", "12.3 us", "4.56 ms", "1.234 s"
std::string fmt_bytes_short(double bytes);  // "1.78 MB", "12.4 GB" (decimal, as napkin prints)
std::string fmt_flops(double flops);        // "1.36 GFLOP"
std::string fmt_rate(double per_s, const char* unit);  // "16.9 GFLOP/s"

// A centred grey message filling the panel: what is missing and how to get it.
void empty_state(const char* message);
// An error line in the error colour.
void error_text(const std::string& message);
// Tooltip text wrapped at a readable width.
void tooltip_text(const std::string& text);

}  // namespace napkin::viewer
