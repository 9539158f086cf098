// stream_copy: out (n) = inp (n), the STREAM "copy" kernel, used as this machine's memory
// bandwidth probe: the roofline that the profiler's per-op predictions (profiler/step_profile.h)
// divide bytes by. Cost: 0 FLOPs, n elements read and n written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cost.h"

namespace napkin {

inline KernelCost stream_copy_cost(std::int64_t n) {
    KernelCost c;
    c.bytes_read = static_cast<std::uint64_t>(n) * sizeof(float);
    c.bytes_written = static_cast<std::uint64_t>(n) * sizeof(float);
    return c;
}

namespace cpu {

// out (n) = inp (n), with all threads.
void stream_copy(float* out, const float* inp, std::int64_t n);

// Measures this machine's memory bandwidth in bytes/s (read + written): the best of `reps`
// copies of `bytes` (default 64 MiB, well past the last-level cache).
double stream_copy_bandwidth(std::size_t bytes = std::size_t{64} << 20, int reps = 5);

}  // namespace cpu

}  // namespace napkin
