// The viewer's number formats (viewer/format.h): %g's digits, but never an exponent, and a value
// that rounds up to 1000 of its unit moves to the next one.
#include "viewer/format.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace napkin::viewer {
namespace {

struct FormatTestCase {
    std::function<std::string(double)> format;
    double value;
    const char* expected;
};

std::string rate(double v) {
    return fmt_rate(v, "FLOP");
}

TEST(Format, AsPrintfGDidWhereItWroteNoExponent) {
    const std::vector<FormatTestCase> cases = {
        {fmt_duration_ns, 850, "850 ns"},     {fmt_duration_ns, 12345, "12.3 us"},
        {fmt_duration_ns, 4.56e6, "4.56 ms"}, {fmt_duration_ns, 1.2344e9, "1.234 s"},
        {fmt_duration_ns, 1.5e9, "1.5 s"},    {fmt_duration_ns, 12e6, "12 ms"},
        {fmt_duration_ns, 0.3, "0 ns"},       {fmt_duration_ns, -0.3, "0 ns"},
        {fmt_duration_ns, -2500, "-2.5 us"},  {fmt_bytes_short, 512, "512 B"},
        {fmt_bytes_short, 1.78e6, "1.78 MB"}, {fmt_bytes_short, 12.4e9, "12.4 GB"},
        {fmt_flops, 1.36e9, "1.36 GFLOP"},    {fmt_flops, 67.37e6, "67.37 MFLOP"},
        {fmt_flops, 500, "0.5 kFLOP"},        {rate, 16.9e9, "16.9 GFLOP/s"},
        {rate, 108e9, "108 GFLOP/s"},
    };
    for (const FormatTestCase& c : cases)
        EXPECT_EQ(c.format(c.value), c.expected) << c.value;
}

TEST(Format, NeverAnExponent) {
    const std::vector<FormatTestCase> cases = {
        {fmt_duration_ns, 999.7, "1 us"},          // "%.0f": "1000 ns"
        {fmt_duration_ns, 999.6e3, "1 ms"},        // "%.3g": "1e+03 us"
        {fmt_duration_ns, 999.7e6, "0.9997 s"},    // "%.3g": "1e+03 ms"
        {fmt_duration_ns, 4.204e15, "4204000 s"},  // "%.4g": "4.204e+06 s"
        {fmt_bytes_short, 999.7e6, "1 GB"},       {fmt_bytes_short, 3.2e15, "3200 TB"},
        {fmt_flops, 5.17e17, "517000 TFLOP"},     {rate, 9.996e11, "1 TFLOP/s"},
    };
    for (const FormatTestCase& c : cases)
        EXPECT_EQ(c.format(c.value), c.expected) << c.value;
    for (double v = 1e-3; v < 1e20; v *= 1.37) {
        for (const std::string& s :
             {fmt_duration_ns(v), fmt_bytes_short(v), fmt_flops(v), rate(v)}) {
            EXPECT_EQ(s.find('e'), std::string::npos) << v << ": " << s;
        }
    }
}

}  // namespace
}  // namespace napkin::viewer
