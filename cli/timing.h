// Small timing helpers the subcommands share (calibrate's probes, report's step tables,
// generate's decode timings).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace napkin::cli {

// The median of v (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of the steady clock since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace napkin::cli
