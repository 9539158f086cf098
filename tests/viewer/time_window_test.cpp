// The shared time window (viewer/time_window.h): zoom around a point, pan, the limits, and the
// `--window START:END` flag's parser.
#include "viewer/time_window.h"

#include <gtest/gtest.h>

#include <cmath>

namespace napkin::viewer {
namespace {

TEST(TimeWindow, FittedPadsOnePercentEachSide) {
    const TimeWindow w = fitted(1000, 2000);
    EXPECT_DOUBLE_EQ(w.t0_ns, 990);
    EXPECT_DOUBLE_EQ(w.t1_ns, 2010);
    EXPECT_FALSE(w.empty());
    const TimeWindow one = fitted(5, 5);  // a single instant: 1 us wide
    EXPECT_GT(one.span(), 1000.0);
    EXPECT_TRUE(TimeWindow{}.empty());
}

TEST(TimeWindow, ZoomKeepsThePointWhereItIs) {
    TimeWindow w{0, 1000};
    const double t = 300;  // 30% from the left
    zoom_around(w, t, wheel_zoom_factor(1));
    EXPECT_DOUBLE_EQ(w.span(), 800);
    EXPECT_DOUBLE_EQ((t - w.t0_ns) / w.span(), 0.3);
    zoom_around(w, t, wheel_zoom_factor(-1));
    EXPECT_NEAR(w.t0_ns, 0, 1e-9);
    EXPECT_NEAR(w.t1_ns, 1000, 1e-9);
}

TEST(TimeWindow, PanMovesBothEdges) {
    TimeWindow w{100, 200};
    pan(w, -50);
    EXPECT_DOUBLE_EQ(w.t0_ns, 50);
    EXPECT_DOUBLE_EQ(w.t1_ns, 150);
}

TEST(TimeWindow, KeepSaneLimitsTheZoom) {
    const TimeWindow fit{0, 1e6};
    TimeWindow narrow{500, 501};
    keep_sane(narrow, fit);
    EXPECT_DOUBLE_EQ(narrow.t0_ns, 500);
    EXPECT_DOUBLE_EQ(narrow.span(), kMinWindowNs);
    TimeWindow wide{-1e9, 1e9};
    keep_sane(wide, fit);
    EXPECT_DOUBLE_EQ(wide.t0_ns, 0);
    EXPECT_DOUBLE_EQ(wide.t1_ns, 1e6);
    TimeWindow nan{NAN, 5};
    keep_sane(nan, fit);
    EXPECT_DOUBLE_EQ(nan.t1_ns, 1e6);
}

TEST(ParseTime, UnitsAndSecondsByDefault) {
    double ns = 0;
    ASSERT_TRUE(parse_time_ns("120ms", ns));
    EXPECT_DOUBLE_EQ(ns, 120e6);
    ASSERT_TRUE(parse_time_ns("3.5 us", ns));
    EXPECT_DOUBLE_EQ(ns, 3500);
    ASSERT_TRUE(parse_time_ns("0.25", ns));
    EXPECT_DOUBLE_EQ(ns, 0.25e9);
    ASSERT_TRUE(parse_time_ns("-2s", ns));
    EXPECT_DOUBLE_EQ(ns, -2e9);
    ASSERT_TRUE(parse_time_ns("40ns", ns));
    EXPECT_DOUBLE_EQ(ns, 40);
    for (const char* bad : {"", "ms", "12 parsecs", "1..2", "inf", "nan s", "3msx"})
        EXPECT_FALSE(parse_time_ns(bad, ns)) << bad;
}

TEST(ParseTimeWindow, StartColonEnd) {
    TimeWindow w;
    EXPECT_EQ(parse_time_window("0.75:0.8", w), "");
    EXPECT_DOUBLE_EQ(w.t0_ns, 0.75e9);
    EXPECT_DOUBLE_EQ(w.t1_ns, 0.8e9);
    EXPECT_EQ(parse_time_window("120ms:135ms", w), "");
    EXPECT_DOUBLE_EQ(w.span(), 15e6);
    EXPECT_EQ(parse_time_window("0:500us", w), "");
    EXPECT_DOUBLE_EQ(w.t1_ns, 5e5);
    EXPECT_NE(parse_time_window("0.8", w).find("START:END"), std::string::npos);
    EXPECT_NE(parse_time_window("a:b", w).find("START:END"), std::string::npos);
    EXPECT_NE(parse_time_window("2:1", w).find("after START"), std::string::npos);
    EXPECT_NE(parse_time_window("1s:1s", w).find("after START"), std::string::npos);
}

}  // namespace
}  // namespace napkin::viewer
