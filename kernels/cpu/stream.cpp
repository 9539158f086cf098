#include "kernels/stream.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

namespace napkin::cpu {

void stream_copy(float* out, const float* inp, std::int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = inp[i];
}

namespace {

// A buffer of 2 MiB-aligned whole huge pages, asked for as transparent huge pages: the probe runs
// at the start of every CPU `napkin train`, where faulting 128 MiB in 4 KiB pages took 0.43 s on
// the 2-core dev VM (a VM's page faults are dear) against 0.02 s in 2 MiB pages; the timed
// copies measured the same (17.1-17.5 against 17.0-17.7 GB/s, three runs each). Where THP is
// off the advice is ignored and the pages are 4 KiB, as before.
struct HugeBuffer {
    static constexpr std::size_t kHuge = std::size_t{2} << 20;
    float* data = nullptr;
    explicit HugeBuffer(std::size_t bytes) {
        const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
        data = static_cast<float*>(std::aligned_alloc(kHuge, rounded));
        if (data == nullptr) throw std::bad_alloc();
        madvise(data, rounded, MADV_HUGEPAGE);  // advice: its failure changes only the speed
    }
    ~HugeBuffer() { std::free(data); }
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;
};

}  // namespace

double stream_copy_bandwidth(std::size_t bytes, int reps) {
    const auto n = static_cast<std::int64_t>(bytes / sizeof(float));
    const HugeBuffer a(bytes), b(bytes);
    std::fill(a.data, a.data + n, 1.0f);
    std::fill(b.data, b.data + n, 0.0f);
    stream_copy(b.data, a.data, n);  // fault the pages in before timing
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        stream_copy(b.data, a.data, n);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(stream_copy_cost(n).bytes()) / s);
    }
    return best;
}

}  // namespace napkin::cpu
