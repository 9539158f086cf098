#include "kernels/stream.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace napkin::cpu {

void stream_copy(float* out, const float* inp, std::int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i) out[i] = inp[i];
}

double stream_copy_bandwidth(std::size_t bytes, int reps) {
    const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
    std::vector<float> a(static_cast<std::size_t>(n), 1.0f), b(static_cast<std::size_t>(n), 0.0f);
    stream_copy(b.data(), a.data(), n);  // fault the pages in before timing
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        stream_copy(b.data(), a.data(), n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(stream_copy_cost(n).bytes()) / s);
    }
    return best;
}

}  // namespace napkin::cpu
