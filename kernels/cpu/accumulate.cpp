// Accumulate on the CPU (declared in kernels/accumulate.h): elementwise, OpenMP once the work
// pays for threads. Each element's sum is rounded once, so the result does not depend on the
// thread count.
#include "kernels/accumulate.h"

#include "core/half.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 16;  // elements below which threads cost more than they save

}  // namespace

template <class T>
void accumulate(const AccumulateArgs<T>& args) {
    const auto& [dst, src, n] = args;
#pragma omp parallel for if (n > kParallelMin)
    for (std::int64_t i = 0; i < n; ++i)
        dst[i] = from_float<T>(to_float(dst[i]) + to_float(src[i]));
}

template void accumulate<float>(const AccumulateArgs<float>&);
template void accumulate<bf16_t>(const AccumulateArgs<bf16_t>&);
template void accumulate<f16_t>(const AccumulateArgs<f16_t>&);

}  // namespace napkin::cpu
