// The viewer's number formats (viewer/format.h): %g's digits, but never an exponent, and a value
// that rounds up to 1000 of its unit moves to the next one.
#include "viewer/format.h"

#include <gtest/gtest.h>

#include <string>

namespace napkin::viewer {
namespace {

TEST(Format, DurationsAsBefore) {
    EXPECT_EQ(fmt_duration_ns(850), "850 ns");
    EXPECT_EQ(fmt_duration_ns(12345), "12.3 us");
    EXPECT_EQ(fmt_duration_ns(4.56e6), "4.56 ms");
    EXPECT_EQ(fmt_duration_ns(1.2344e9), "1.234 s");
    EXPECT_EQ(fmt_duration_ns(1.5e9), "1.5 s");
    EXPECT_EQ(fmt_duration_ns(12e6), "12 ms");
    EXPECT_EQ(fmt_duration_ns(0.3), "0 ns");
    EXPECT_EQ(fmt_duration_ns(-0.3), "0 ns");
    EXPECT_EQ(fmt_duration_ns(-2500), "-2.5 us");
}

TEST(Format, NeverAnExponent) {
    EXPECT_EQ(fmt_duration_ns(999.7), "1 us");          // "%.0f" would give "1000 ns"
    EXPECT_EQ(fmt_duration_ns(999.6e3), "1 ms");        // "%.3g" would give "1e+03 us"
    EXPECT_EQ(fmt_duration_ns(999.7e6), "0.9997 s");    // "%.3g": "1e+03 ms"
    EXPECT_EQ(fmt_duration_ns(4.204e15), "4204000 s");  // "%.4g": "4.204e+06 s"
    EXPECT_EQ(fmt_bytes_short(999.7e6), "1 GB");
    EXPECT_EQ(fmt_bytes_short(3.2e15), "3200 TB");
    EXPECT_EQ(fmt_flops(5.17e17), "517000 TFLOP");
    EXPECT_EQ(fmt_rate(9.996e11, "FLOP"), "1 TFLOP/s");
    for (double v = 1e-3; v < 1e20; v *= 1.37) {
        for (const std::string& s :
             {fmt_duration_ns(v), fmt_bytes_short(v), fmt_flops(v), fmt_rate(v, "FLOP")}) {
            EXPECT_EQ(s.find('e'), std::string::npos) << v << ": " << s;
        }
    }
}

TEST(Format, BytesFlopsRatesAsBefore) {
    EXPECT_EQ(fmt_bytes_short(512), "512 B");
    EXPECT_EQ(fmt_bytes_short(1.78e6), "1.78 MB");
    EXPECT_EQ(fmt_bytes_short(12.4e9), "12.4 GB");
    EXPECT_EQ(fmt_bytes_short(2.68e6), "2.68 MB");
    EXPECT_EQ(fmt_flops(1.36e9), "1.36 GFLOP");
    EXPECT_EQ(fmt_flops(67.37e6), "67.37 MFLOP");
    EXPECT_EQ(fmt_flops(500), "0.5 kFLOP");
    EXPECT_EQ(fmt_rate(16.9e9, "FLOP"), "16.9 GFLOP/s");
    EXPECT_EQ(fmt_rate(108e9, "FLOP"), "108 GFLOP/s");
}

}  // namespace
}  // namespace napkin::viewer
