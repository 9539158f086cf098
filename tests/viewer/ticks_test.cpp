// The axes' ticks and labels (viewer/ticks.h): round steps, labels that differ from their
// neighbours at every zoom, no exponent form on traces far from their origin, and the base +
// offset form when a label would need too many digits.
#include "viewer/ticks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

namespace napkin::viewer {
namespace {

bool is_round(double step) {
    const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-12));
    return std::fabs(m - 1) < 1e-9 || std::fabs(m - 2) < 1e-9 || std::fabs(m - 5) < 1e-9;
}

// Every label distinct, none in exponent form, ticks inside the window and at least min_px apart.
void expect_readable(const TimeTicks& t, double t0, double t1, double width, double min_px) {
    ASSERT_GE(t.ticks.size(), 2u) << t0 << " .. " << t1;
    std::set<std::string> labels;
    for (const TimeTick& k : t.ticks) {
        EXPECT_GE(k.t_ns, t0);
        EXPECT_LE(k.t_ns, t1);
        EXPECT_TRUE(labels.insert(k.label).second) << "repeated label " << k.label;
        EXPECT_EQ(k.label.find('e'), std::string::npos) << k.label;
        EXPECT_LE(k.label.size(), 12u) << k.label;
    }
    EXPECT_GE(t.step_ns / (t1 - t0) * width, min_px * (1 - 1e-9));
    EXPECT_TRUE(is_round(t.step_ns)) << t.step_ns;
    EXPECT_EQ(t.base.find('e'), std::string::npos) << t.base;
}

TEST(NiceStep, IsTheSmallestRoundStepAtLeastTheTarget) {
    EXPECT_DOUBLE_EQ(nice_step(1000, 1000, 100), 100);  // target 100
    EXPECT_DOUBLE_EQ(nice_step(1100, 1000, 100), 200);  // target 110
    EXPECT_DOUBLE_EQ(nice_step(3000, 1000, 100), 500);  // target 300
    EXPECT_DOUBLE_EQ(nice_step(6000, 1000, 100), 1000);
    EXPECT_DOUBLE_EQ(nice_step(0.0021, 1, 1), 0.005);
    EXPECT_DOUBLE_EQ(nice_step(0, 1000, 100), 1);
    EXPECT_DOUBLE_EQ(nice_step(NAN, 1000, 100), 1);
}

TEST(TimeTicks, ZoomedOutReadsFromTheOrigin) {
    // The tiny runs: 0.73 s .. 1.11 s of process time, 1060 px.
    const TimeTicks t = time_ticks(0.73e9, 1.11e9, 0.0, 1060, 100);
    expect_readable(t, 0.73e9, 1.11e9, 1060, 100);
    EXPECT_TRUE(t.base.empty());
    EXPECT_DOUBLE_EQ(t.step_ns, 50e6);
    EXPECT_EQ(t.ticks.front().label, "0.75 s");
    EXPECT_EQ(t.ticks[1].label, "0.80 s");
    EXPECT_EQ(t.ticks.back().label, "1.10 s");
}

TEST(TimeTicks, ZoomedInNeverRepeatsALabel) {
    // The "3.799 s" x11: a 20 us window 3.799 s into the run.
    const double t0 = 3.799e9 + 1234, t1 = t0 + 20e3;
    const TimeTicks t = time_ticks(t0, t1, 0.0, 1000, 100);
    expect_readable(t, t0, t1, 1000, 100);
    EXPECT_DOUBLE_EQ(t.step_ns, 2000);
    // 3.799002 s would need 7 digits: a base and offsets instead.
    EXPECT_EQ(t.base, "3.7990 s");
    EXPECT_DOUBLE_EQ(t.base_ns, 3.799e9);
    EXPECT_EQ(t.ticks.front().label, "+2 us");
    EXPECT_EQ(t.ticks[1].label, "+4 us");
}

TEST(TimeTicks, ModerateZoomKeepsFullLabels) {
    const double t0 = 3.799e9, t1 = t0 + 2e6;  // 2 ms at 3.8 s: 3.7992 s, 3.7994 s, ...
    const TimeTicks t = time_ticks(t0, t1, 0.0, 1000, 100);
    expect_readable(t, t0, t1, 1000, 100);
    EXPECT_TRUE(t.base.empty());
    EXPECT_EQ(t.ticks[1].label, "3.7992 s");
}

TEST(TimeTicks, OffsetTracesReadFromTheirStart) {
    // A trace stamped 4.204e6 s from its clock's zero (Unix-epoch style), 5 ms long: labels are
    // relative to the origin, not "4.204e+06 s".
    const double origin = 4.204e15, t0 = origin, t1 = origin + 5e6;
    const TimeTicks t = time_ticks(t0, t1, origin, 1200, 100);
    expect_readable(t, t0, t1, 1200, 100);
    EXPECT_EQ(t.ticks.front().label, "0.0 ms");
    EXPECT_EQ(t.ticks[1].label, "0.5 ms");
}

TEST(TimeTicks, EveryZoomFromNanosecondsToHours) {
    for (double origin : {0.0, 1.7e18 / 1e3}) {
        for (double at : {0.0, 1e6, 3.799e9, 7200e9}) {
            for (double span = 12; span < 1e13; span *= 3.7) {
                const double t0 = origin + at, t1 = t0 + span;
                SCOPED_TRACE(std::to_string(at) + " + " + std::to_string(span));
                const TimeTicks t = time_ticks(t0, t1, origin, 1000, 100);
                if (t.ticks.size() < 2) continue;  // a window narrower than double's resolution
                expect_readable(t, t0, t1, 1000, 100);
            }
        }
    }
}

TEST(TimeTicks, NegativeTimesBeforeTheOrigin) {
    const TimeTicks t = time_ticks(-2e6, 8e6, 0.0, 1000, 100);
    expect_readable(t, -2e6, 8e6, 1000, 100);
    EXPECT_EQ(t.ticks.front().label, "-2 ms");
    EXPECT_EQ(t.ticks[2].label, "0 ms");  // no "-0"
}

TEST(TimeTicks, EmptyOrInvalidWindowsHaveNoTicks) {
    EXPECT_TRUE(time_ticks(5, 5, 0, 1000).ticks.empty());
    EXPECT_TRUE(time_ticks(5, 1, 0, 1000).ticks.empty());
    EXPECT_TRUE(time_ticks(0, INFINITY, 0, 1000).ticks.empty());
}

TEST(FmtTimeAt, DecimalsFollowTheResolution) {
    EXPECT_EQ(fmt_time_at(3799002531, 1000), "3.799003 s");
    EXPECT_EQ(fmt_time_at(3799002531, 1e6), "3.799 s");
    EXPECT_EQ(fmt_time_at(1.5e6, 1e5), "1.5 ms");
    EXPECT_EQ(fmt_time_at(850, 1), "850 ns");
    EXPECT_EQ(fmt_time_at(0, 1e6), "0 ms");
    EXPECT_EQ(fmt_time_at(4.204e15, 1e3), "4204000.000000 s");  // long, never 4.204e+06
}

TEST(ValueTicks, RoundBytesFromZero) {
    const auto t = value_ticks(56.2e6, 180, 40, true);
    ASSERT_EQ(t.size(), 3u);  // 0, 20, 40 MB (step 20 MB: 56.2 MB over 180 px, >= 40 px apart)
    EXPECT_EQ(t[0].label, "0 MB");
    EXPECT_EQ(t[1].label, "20 MB");
    EXPECT_DOUBLE_EQ(t[2].value, 40e6);
    EXPECT_TRUE(value_ticks(0, 180, 40, true).empty());
    const auto plain = value_ticks(0.7, 100, 20, false);  // 0, 0.2, 0.4, 0.6
    ASSERT_FALSE(plain.empty());
    EXPECT_EQ(plain[1].label, "0.2");
}

TEST(ScaleLabel, ThreeDigitsOfTheLargerEnd) {
    EXPECT_EQ(scale_label(0, 9.2134e6, true), "0 .. 9.21 MB");
    EXPECT_EQ(scale_label(0, 56.2e6, true), "0 .. 56.2 MB");
    EXPECT_EQ(scale_label(-1.5, 3, false), "-1.50 .. 3.00");
    EXPECT_EQ(scale_label(0, 1234, false), "0 .. 1.23 k");
}

}  // namespace
}  // namespace napkin::viewer
