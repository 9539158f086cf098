// Residual add on the CPU (declared in kernels/residual.h): elementwise, OpenMP once the work
// pays for threads. Each element is read before it is written, so the documented aliasing
// (out = a or b; dout = da or db) is safe.
#include "kernels/residual.h"

#include "core/half.h"

namespace napkin::cpu {

namespace {

constexpr std::int64_t kParallelMin =
    1 << 16;  // elements below which threads cost more than they save

}  // namespace

template <class T>
void residual_forward(const ResidualForwardArgs<T>& args) {
    const auto& [out, a, b, n] = args;
#pragma omp parallel for if (n > kParallelMin)
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <class T>
void residual_backward(const ResidualBackwardArgs<T>& args) {
    const auto& [da, db, dout, n] = args;
#pragma omp parallel for if (n > kParallelMin)
    for (std::int64_t i = 0; i < n; ++i) {
        const float g = to_float(dout[i]);
        da[i] = from_float<T>(to_float(da[i]) + g);
        db[i] = from_float<T>(to_float(db[i]) + g);
    }
}

#define NAPKIN_RESIDUAL_INSTANTIATE(T)                                \
    template void residual_forward<T>(const ResidualForwardArgs<T>&); \
    template void residual_backward<T>(const ResidualBackwardArgs<T>&);
NAPKIN_RESIDUAL_INSTANTIATE(float)
NAPKIN_RESIDUAL_INSTANTIATE(bf16_t)
NAPKIN_RESIDUAL_INSTANTIATE(f16_t)
#undef NAPKIN_RESIDUAL_INSTANTIATE

}  // namespace napkin::cpu
