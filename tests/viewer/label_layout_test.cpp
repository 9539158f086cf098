// Label placement (viewer/label_layout.h): labels keep their spot when free, move the least
// distance when not, never overlap, stay inside the bounds, and are hidden when there is no room.
#include "viewer/label_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace napkin::viewer {
namespace {

PlacedLabel label(float x0, float y0, float w, float h) {
    return PlacedLabel{LabelBox{x0, y0, x0 + w, y0 + h}, true};
}

void expect_apart(const std::vector<PlacedLabel>& labels, const LabelBox& bounds, float gap) {
    for (std::size_t i = 0; i < labels.size(); ++i) {
        if (!labels[i].shown) continue;
        const LabelBox& a = labels[i].box;
        EXPECT_GE(a.y0, bounds.y0) << i;
        EXPECT_LE(a.y1, bounds.y1 + 1e-3f) << i;
        for (std::size_t j = i + 1; j < labels.size(); ++j) {
            if (!labels[j].shown) continue;
            EXPECT_FALSE(a.overlaps(labels[j].box, gap - 0.02f)) << i << " and " << j;
        }
    }
}

TEST(PlaceLabels, FreeSpotsAreKept) {
    std::vector<PlacedLabel> l = {label(0, 10, 100, 15), label(200, 10, 100, 15),
                                  label(0, 40, 100, 15)};
    place_labels(l, {0, 0, 400, 200});
    EXPECT_FLOAT_EQ(l[0].box.y0, 10);
    EXPECT_FLOAT_EQ(l[1].box.y0, 10);  // same height, apart in x
    EXPECT_FLOAT_EQ(l[2].box.y0, 40);
}

// The memory chart's case: the peak label and the predicted-peak label want nearly the same y.
TEST(PlaceLabels, AClashMovesTheLaterLabelTheLeastDistance) {
    std::vector<PlacedLabel> l = {label(300, 50, 200, 15), label(350, 55, 150, 15)};
    place_labels(l, {0, 0, 600, 200}, 2.0f);
    EXPECT_FLOAT_EQ(l[0].box.y0, 50);
    ASSERT_TRUE(l[1].shown);
    EXPECT_FLOAT_EQ(l[1].box.y0, 67);   // below the first (+12) rather than above it (-22)
    EXPECT_FLOAT_EQ(l[1].box.x0, 350);  // moved vertically only
    expect_apart(l, {0, 0, 600, 200}, 2.0f);
}

TEST(PlaceLabels, StaysInsideTheBounds) {
    std::vector<PlacedLabel> l = {label(0, -10, 100, 15), label(0, 195, 100, 15)};
    place_labels(l, {0, 0, 400, 200});
    EXPECT_FLOAT_EQ(l[0].box.y0, 0);
    EXPECT_FLOAT_EQ(l[1].box.y0, 185);
}

TEST(PlaceLabels, NoRoomHidesTheLabel) {
    std::vector<PlacedLabel> l = {label(0, 0, 100, 15), label(0, 0, 100, 15)};
    place_labels(l, {0, 0, 400, 16});
    EXPECT_TRUE(l[0].shown);
    EXPECT_FALSE(l[1].shown);
}

TEST(PlaceLabels, RandomClustersNeverOverlap) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> x(0, 500), y(0, 300), w(20, 250);
    const LabelBox bounds{0, 0, 800, 320};
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<PlacedLabel> l;
        for (int i = 0; i < 8; ++i)
            l.push_back(label(x(rng), y(rng), w(rng), 15));
        place_labels(l, bounds, 2.0f);
        expect_apart(l, bounds, 2.0f);
        EXPECT_TRUE(l[0].shown);
    }
}

}  // namespace
}  // namespace napkin::viewer
