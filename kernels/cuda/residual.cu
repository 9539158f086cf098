// Residual add on the GPU (declared in kernels/residual.h; the CPU twin, the spec, is
// kernels/cpu/residual.cpp): elementwise grid-stride loops in 16-byte vectors where the pointers
// allow (cuda_common.cuh's elementwise_kernel). Each element is read before it is written by the
// same thread, so the documented aliasing (out = a or b; dout = da or db) holds.
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/residual.h"

namespace napkin::cuda {

namespace {

// out = a + b.
template <class D_>
struct ResidualForward {
    using D = D_;
    D* out;      // (n)
    const D* a;  // (n)
    const D* b;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> x = load_pack<W>(a + i), y = load_pack<W>(b + i);
        Pack<D, W> z;
#pragma unroll
        for (int j = 0; j < W; ++j)
            z.v[j] = from_f32<D>(to_f32(x.v[j]) + to_f32(y.v[j]));
        store_pack<W>(out + i, z);
    }
};

// da += dout, db += dout.
template <class D_>
struct ResidualBackward {
    using D = D_;
    D* da;          // (n)
    D* db;          // (n)
    const D* dout;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> g = load_pack<W>(dout + i);
        Pack<D, W> x = load_pack<W>(da + i), y = load_pack<W>(db + i);
#pragma unroll
        for (int j = 0; j < W; ++j) {
            x.v[j] = from_f32<D>(to_f32(x.v[j]) + to_f32(g.v[j]));
            y.v[j] = from_f32<D>(to_f32(y.v[j]) + to_f32(g.v[j]));
        }
        store_pack<W>(da + i, x);
        store_pack<W>(db + i, y);
    }
};

}  // namespace

template <class T>
void residual_forward(const ResidualForwardArgs<T>& args, const Launch& launch) {
    const auto& [out, a, b, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "residual_forward: n " << n);
    if (n == 0) return;
    const ResidualForward<device_t<T>> op{dev(out), dev(a), dev(b)};
    const bool vec = aligned16(out, a, b);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class T>
void residual_backward(const ResidualBackwardArgs<T>& args, const Launch& launch) {
    const auto& [da, db, dout, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "residual_backward: n " << n);
    if (n == 0) return;
    const ResidualBackward<device_t<T>> op{dev(da), dev(db), dev(dout)};
    const bool vec = aligned16(da, db, dout);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

#define NAPKIN_CUDA_RESIDUAL_INSTANTIATE(T)                                          \
    template void residual_forward<T>(const ResidualForwardArgs<T>&, const Launch&); \
    template void residual_backward<T>(const ResidualBackwardArgs<T>&, const Launch&);
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(float)
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(bf16_t)
NAPKIN_CUDA_RESIDUAL_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_RESIDUAL_INSTANTIATE

}  // namespace napkin::cuda
