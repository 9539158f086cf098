// Number formats shared by the panels and the compare table (no ImGui: the data model's
// compare_table uses them too). Decimal units, as napkin prints everywhere; never in exponent form
// (tests/viewer/format_test.cpp).
#pragma once

#include <string>

namespace napkin::viewer {

std::string fmt_duration_ns(double ns);                // "850 ns", "12.3 us", "4.56 ms", "1.234 s"
std::string fmt_bytes_short(double bytes);             // "1.78 MB", "12.4 GB"
std::string fmt_flops(double flops);                   // "1.36 GFLOP"
std::string fmt_rate(double per_s, const char* unit);  // "16.9 GFLOP/s"

}  // namespace napkin::viewer
