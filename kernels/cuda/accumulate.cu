// Accumulate on the GPU (declared in kernels/accumulate.h; the CPU twin, the spec, is
// kernels/cpu/accumulate.cpp): an elementwise grid-stride loop, in 16-byte vectors where the
// pointers allow (cuda_common.cuh's elementwise_kernel), the sum in fp32 rounded once.
#include <cstdint>

#include "kernels/accumulate.h"
#include "kernels/cuda/cuda_common.cuh"

namespace napkin::cuda {

namespace {

// dst += src.
template <class D_>
struct Accumulate {
    using D = D_;
    D* dst;        // (n)
    const D* src;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<D, W> y = load_pack<W>(src + i);
        Pack<D, W> x = load_pack<W>(dst + i);
#pragma unroll
        for (int j = 0; j < W; ++j)
            x.v[j] = from_f32<D>(to_f32(x.v[j]) + to_f32(y.v[j]));
        store_pack<W>(dst + i, x);
    }
};

}  // namespace

template <class T>
void accumulate(const AccumulateArgs<T>& args, const Launch& launch) {
    const auto& [dst, src, n] = args;
    NAPKIN_CUDA_REQUIRE(n >= 0, "accumulate: n " << n);
    if (n == 0) return;
    const Accumulate<device_t<T>> op{dev(dst), dev(src)};
    const bool vec = aligned16(dst, src);
    elementwise_kernel<<<elementwise_grid(op, n, vec), kElementwiseBlock, 0, launch.stream>>>(op, n,
                                                                                              vec);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template void accumulate<float>(const AccumulateArgs<float>&, const Launch&);
template void accumulate<bf16_t>(const AccumulateArgs<bf16_t>&, const Launch&);
template void accumulate<f16_t>(const AccumulateArgs<f16_t>&, const Launch&);

}  // namespace napkin::cuda
