#include "viewer/format.h"

#include <cmath>
#include <cstdio>

namespace napkin::viewer {

namespace {

std::string format(const char* fmt, double v, const char* unit) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v, unit);
    return buf;
}

}  // namespace

std::string fmt_duration_ns(double ns) {
    if (std::fabs(ns) < 0.5) ns = 0;  // no "-0 ns"
    const double a = std::fabs(ns);
    if (a < 1e3) return format("%.0f %s", ns, "ns");
    if (a < 1e6) return format("%.3g %s", ns / 1e3, "us");
    if (a < 1e9) return format("%.3g %s", ns / 1e6, "ms");
    return format("%.4g %s", ns / 1e9, "s");
}

std::string fmt_bytes_short(double bytes) {
    const double a = std::fabs(bytes);
    if (a < 1e3) return format("%.0f %s", bytes, "B");
    if (a < 1e6) return format("%.3g %s", bytes / 1e3, "kB");
    if (a < 1e9) return format("%.3g %s", bytes / 1e6, "MB");
    if (a < 1e12) return format("%.3g %s", bytes / 1e9, "GB");
    return format("%.3g %s", bytes / 1e12, "TB");
}

std::string fmt_flops(double flops) {
    const double a = std::fabs(flops);
    if (a < 1e6) return format("%.4g %s", flops / 1e3, "kFLOP");
    if (a < 1e9) return format("%.4g %s", flops / 1e6, "MFLOP");
    if (a < 1e12) return format("%.4g %s", flops / 1e9, "GFLOP");
    return format("%.4g %s", flops / 1e12, "TFLOP");
}

std::string fmt_rate(double per_s, const char* unit) {
    const double a = std::fabs(per_s);
    char buf[64];
    if (a < 1e9) {
        std::snprintf(buf, sizeof buf, "%.3g M%s/s", per_s / 1e6, unit);
    } else if (a < 1e12) {
        std::snprintf(buf, sizeof buf, "%.3g G%s/s", per_s / 1e9, unit);
    } else {
        std::snprintf(buf, sizeof buf, "%.3g T%s/s", per_s / 1e12, unit);
    }
    return buf;
}

}  // namespace napkin::viewer
