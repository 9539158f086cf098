// The anomaly check's reduction on the CPU (declared in kernels/nonfinite.h): one pass, OpenMP
// reductions of the two counts and the maximum once the tensor pays for threads.
#include "kernels/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/half.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin = 1 << 16;  // elements below which threads cost more
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

template <class T>
void nonfinite_check(const NonfiniteCheckArgs<T>& args) {
    const auto& [slot, x, n] = args;
    unsigned long long nan = 0, inf = 0;
    float max_finite = 0.0f;
#pragma omp parallel for if (n > kParallelMin) reduction(+ : nan, inf) reduction(max : max_finite)
    for (std::int64_t i = 0; i < n; ++i) {
        // Branch-free, so the loop vectorizes and runs at the speed of the read: a NaN compares
        // false everywhere, so it counts as NaN only and adds 0 to the maximum.
        const float a = std::fabs(to_float(x[i]));
        nan += static_cast<unsigned long long>(!(a == a));
        inf += static_cast<unsigned long long>(a == kInf);
        max_finite = std::max(max_finite, a < kInf ? a : 0.0f);
    }
    slot->nan += nan;
    slot->inf += inf;
    slot->max_finite = std::max(slot->max_finite, max_finite);
}

// The spec of the batch: the checks one after the other.
template <class T>
void nonfinite_check_many(const NonfiniteCheckManyArgs<T>& args) {
    for (int i = 0; i < args.count; ++i)
        nonfinite_check(args.checks[i]);
}

template void nonfinite_check_many<float>(const NonfiniteCheckManyArgs<float>&);
template void nonfinite_check_many<bf16_t>(const NonfiniteCheckManyArgs<bf16_t>&);
template void nonfinite_check_many<f16_t>(const NonfiniteCheckManyArgs<f16_t>&);
template void nonfinite_check<float>(const NonfiniteCheckArgs<float>&);
template void nonfinite_check<bf16_t>(const NonfiniteCheckArgs<bf16_t>&);
template void nonfinite_check<f16_t>(const NonfiniteCheckArgs<f16_t>&);

}  // namespace napkin::cpu
