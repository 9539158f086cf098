// Reusable drawing helpers shared by the panels: colours, empty states, opaque fills, text that
// fits, time ticks, and the time navigation of the timeline and the memory charts; the number
// formats (viewer/format.h) come with them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <imgui.h>

#include "viewer/format.h"
#include "viewer/ticks.h"
#include "viewer/view.h"

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

// A table cell's number: `value` in `format` ("%.2fx") when `known`, else "-".
void number_or_dash(bool known, const char* format, double value);

// `text` at `pos`, cut to `max_w` pixels with "..." when it is wider (font_size 0: the
// current font's). True when it was cut: the caller offers the whole text on hover.
bool text_fitted(ImDrawList* dl, ImVec2 pos, float max_w, ImU32 color, const std::string& text,
                 float font_size = 0.0f);

// The time ticks of `axis` (viewer/ticks.h, labels from origin_ns): a mark from y0 to y1 and the
// label at label_y beside each. Returns the ticks (their base, when set, is for the caller to
// show once).
TimeTicks draw_time_ticks(ImDrawList* dl, const TimeAxis& axis, double origin_ns, float y0,
                          float y1, float label_y, ImU32 color);

// The time navigation shared by the timeline and the memory charts, applied to `time.window`
// after the frame's drawing: over the time area (`hovered`) the wheel zooms around the pointer
// (unless `wheel_zooms` is false: shift+wheel scrolls the timeline's lanes) and a drag pans; W/S
// zoom and A/D pan around the centre, F fits the profiled window (not while typing in a text
// box). Returns true when the left button was released over the area without a drag: a click.
bool navigate_time(TimeView& time, bool& dragging, const TimeAxis& axis, bool hovered,
                   bool wheel_zooms);
// "window 384 ms from 0.742 s" for a toolbar.
std::string window_text(const TimeView& time);

}  // namespace napkin::viewer
