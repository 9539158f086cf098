// Reusable drawing helpers shared by the panels: colours, empty states, opaque fills; the number
// formats (viewer/format.h) come with them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <imgui.h>

#include "viewer/format.h"

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

// Large opaque fills (chart bands, counter steps) between these two: blending off and ImGui's
// atlas sampled nearest. Under a software rasterizer (llvmpipe under Xvfb) a frame's cost is its
// pixels, and each pixel of an ImGui rect pays a bilinear fetch of the atlas's white texel and a
// read-modify-write of the framebuffer; neither changes an opaque colour. Only opaque rects and
// lines between them: no text (glyphs need the blend). Draw-list callbacks: the OpenGL3 backend
// runs them in order, and the end resets its render state.
void begin_opaque_fills(ImDrawList* dl);
void end_opaque_fills(ImDrawList* dl);

// A centred grey message filling the panel: what is missing and how to get it.
void empty_state(const char* message);
// An error line in the error colour.
void error_text(const std::string& message);
// Tooltip text wrapped at a readable width.
void tooltip_text(const std::string& text);

}  // namespace napkin::viewer
