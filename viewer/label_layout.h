// Labels that never overprint: the memory chart's peak, predicted peak, device and process totals
// and its legend each want a spot (beside the line they name); placed in order of importance,
// each keeps its spot if it is free, else moves up or down by the least distance that clears the
// labels already placed, staying inside the plot; one with no room left is hidden. No ImGui:
// tests/viewer/label_layout_test.cpp checks that no two placed labels overlap.
#pragma once

#include <vector>

namespace napkin::viewer {

struct LabelBox {
    float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    bool overlaps(const LabelBox& o, float gap) const {
        return x0 < o.x1 + gap && o.x0 < x1 + gap && y0 < o.y1 + gap && o.y0 < y1 + gap;
    }
};

struct PlacedLabel {
    LabelBox box;       // in: the wanted spot; out: where it goes (moved vertically only)
    bool shown = true;  // out: false when no spot inside the bounds was free
};

// Places `labels` in order (earlier ones keep their spot first) inside `bounds`, `gap` pixels
// apart. The first label is placed where it wants to be, clamped into the bounds.
void place_labels(std::vector<PlacedLabel>& labels, const LabelBox& bounds, float gap = 2.0f);

}  // namespace napkin::viewer
