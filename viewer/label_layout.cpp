#include "viewer/label_layout.h"

#include <algorithm>
#include <cmath>

namespace napkin::viewer {

namespace {

LabelBox at_y(const LabelBox& b, float y0) {
    return {b.x0, y0, b.x1, y0 + (b.y1 - b.y0)};
}

}  // namespace

void place_labels(std::vector<PlacedLabel>& labels, const LabelBox& bounds, float gap) {
    std::vector<const LabelBox*> placed;
    for (PlacedLabel& l : labels) {
        const float h = l.box.y1 - l.box.y0;
        const float lo = bounds.y0, hi = bounds.y1 - h;  // the range of y0 inside the bounds
        l.shown = false;
        if (hi < lo) continue;
        // Candidates: the wanted spot (clamped), and just above or below each label placed.
        std::vector<float> ys = {std::clamp(l.box.y0, lo, hi)};
        for (const LabelBox* p : placed) {
            ys.push_back(p->y0 - gap - h);
            ys.push_back(p->y1 + gap);
        }
        float best = 0, best_d = INFINITY;
        for (float y : ys) {
            if (y < lo || y > hi) continue;
            const LabelBox c = at_y(l.box, y);
            const bool free = std::none_of(placed.begin(), placed.end(), [&](const LabelBox* p) {
                return c.overlaps(*p, gap - 0.01f);
            });
            const float d = std::fabs(y - l.box.y0);
            if (free && d < best_d) {
                best = y;
                best_d = d;
            }
        }
        if (best_d == INFINITY) continue;
        l.box = at_y(l.box, best);
        l.shown = true;
        placed.push_back(&l.box);
    }
}

}  // namespace napkin::viewer
