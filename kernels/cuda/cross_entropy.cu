// The fused, chunked head + cross-entropy on the GPU (declared in kernels/cross_entropy.h; the
// CPU twin, the spec, is kernels/cpu/cross_entropy.cpp): only `chunk` rows of fp32 logits exist
// at a time, and the head's gradients are taken chunk by chunk. Where each launch's bytes and
// time go: docs/CUDA.md, "The LM head and the loss".
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace napkin::cuda {

namespace {

constexpr int kRowBlock = 512;

// A running softmax denominator: the largest logit seen and the sum of exp(logit - max) over
// the logits seen (online softmax: a larger max rescales the sum).
struct RowSum {
    float max = -INFINITY;
    float sum = 0.0f;
};

__device__ __forceinline__ RowSum row_sum_merge(RowSum a, RowSum b) {
    const float m = fmaxf(a.max, b.max);
    if (m == -INFINITY) return a;  // neither has seen a logit
    return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// W logits into the running sum: one rescale, W exponentials.
template <int W>
__device__ __forceinline__ RowSum row_sum_add(RowSum r, const float (&x)[W]) {
    float m = r.max;
#pragma unroll
    for (int j = 0; j < W; ++j)
        m = fmaxf(m, x[j]);
    float s = r.max == -INFINITY ? 0.0f : r.sum * expf(r.max - m);
#pragma unroll
    for (int j = 0; j < W; ++j)
        s += expf(x[j] - m);
    return {m, s};
}

// The block's merged RowSum, in every thread (blockDim.x a multiple of 32). `shared` holds 32.
__device__ __forceinline__ RowSum block_row_sum(RowSum r, RowSum* shared) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    const int warps = blockDim.x / kWarpSize;
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2)
        r = row_sum_merge(
            r, {__shfl_xor_sync(0xffffffffu, r.max, o), __shfl_xor_sync(0xffffffffu, r.sum, o)});
    if (lane == 0) shared[warp] = r;
    __syncthreads();
    r = lane < warps ? shared[lane] : RowSum{};
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o /= 2)
        r = row_sum_merge(
            r, {__shfl_xor_sync(0xffffffffu, r.max, o), __shfl_xor_sync(0xffffffffu, r.sum, o)});
    return r;
}

// One block per row of the chunk: logits (R, Vp) fp32 in, losses out, and dlogits
// (softmax - onehot) * dloss over the V real columns, 0 on the padding: in place into logits when
// dlogits is null (fp32 storage), else rounded into dlogits (R, Vp). Two passes over the row:
// max and sum of exponentials together (RowSum), then the gradient. W: 4 (16-byte loads of the
// logits, 8- or 16-byte stores; the host takes it when Vp % 4 == 0, so every row starts
// aligned) or 1.
template <int W, class D>
__global__ void head_cross_entropy_kernel(float* losses, float* logits, D* dlogits,
                                          const std::int32_t* targets, std::int64_t V,
                                          std::int64_t Vp, float dloss) {
    __shared__ RowSum shared[kWarpSize];
    const std::int64_t row = blockIdx.x;
    float* l = logits + row * Vp;  // (Vp)
    const std::int32_t target = targets[row];
    const bool valid = target >= 0 && target < V;
    const std::int64_t whole = V / W * W;  // columns read as whole packs
    RowSum r;
    // Unrolled: the loads do not wait for the running sum, so several are in flight.
#pragma unroll 4
    for (std::int64_t v = threadIdx.x * static_cast<std::int64_t>(W); v < whole;
         v += static_cast<std::int64_t>(blockDim.x) * W) {
        const Pack<float, W> p = load_pack<W>(l + v);
        r = row_sum_add<W>(r, p.v);
    }
    for (std::int64_t v = whole + threadIdx.x; v < V; v += blockDim.x)
        r = row_sum_add<1>(r, {l[v]});
    // Thread 0 reads the target's logit before the merge's barrier: no thread writes the row
    // before every thread is past it.
    const float target_logit = threadIdx.x == 0 && valid ? l[target] : 0.0f;
    r = block_row_sum(r, shared);
    const float lse = r.max + logf(r.sum);
    if (threadIdx.x == 0) losses[row] = valid ? lse - target_logit : NAN;
#pragma unroll 4
    for (std::int64_t v = threadIdx.x * static_cast<std::int64_t>(W); v < Vp;
         v += static_cast<std::int64_t>(blockDim.x) * W) {
        Pack<float, W> p = load_pack<W>(l + v);
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const std::int64_t col = v + j;
            float g = 0.0f;
            if (valid && col < V) g = expf(p.v[j] - lse) * dloss - (col == target ? dloss : 0.0f);
            p.v[j] = g;
        }
        if (dlogits == nullptr) {
            store_pack<W>(l + v, p);
        } else {
            Pack<D, W> d;
#pragma unroll
            for (int j = 0; j < W; ++j)
                d.v[j] = from_f32<D>(p.v[j]);
            store_pack<W>(dlogits + row * Vp + v, d);
        }
    }
}

// The row kernel before the two-pass one, for bench/head_ce_bench's before/after only (the
// op takes it through detail::head_cross_entropy): three scalar passes over the row (max, sum of
// exponentials, gradient), the same results.
template <class D>
__global__ void head_cross_entropy_three_pass_kernel(float* losses, float* logits, D* dlogits,
                                                     const std::int32_t* targets, std::int64_t V,
                                                     std::int64_t Vp, float dloss) {
    __shared__ float shared[kWarpSize];
    const std::int64_t row = blockIdx.x;
    float* l = logits + row * Vp;  // (Vp)
    const std::int32_t target = targets[row];
    const bool valid = target >= 0 && target < V;
    float mx = -INFINITY;
    for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, l[v]);
    mx = block_max(mx, shared);
    float sum = 0.0f;
    for (std::int64_t v = threadIdx.x; v < V; v += blockDim.x)
        sum += expf(l[v] - mx);
    const float lse = mx + logf(block_sum(sum, shared));
    const float target_logit = valid ? l[target] : 0.0f;
    __syncthreads();  // every thread has read l[target] before any overwrites it
    if (threadIdx.x == 0) losses[row] = valid ? lse - target_logit : NAN;
    for (std::int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = 0.0f;
        if (valid && v < V) g = expf(l[v] - lse) * dloss - (v == target ? dloss : 0.0f);
        if (dlogits == nullptr) {
            l[v] = g;
        } else {
            dlogits[row * Vp + v] = from_f32<D>(g);
        }
    }
}

// dw (n) += dw32 (n), rounded once.
template <class D_>
struct HeadAccumulate {
    using D = D_;
    D* dw;              // (n)
    const float* dw32;  // (n)
    template <int W>
    __device__ void apply(std::int64_t i) const {
        const Pack<float, W> y = load_pack<W>(dw32 + i);
        Pack<D, W> x = load_pack<W>(dw + i);
#pragma unroll
        for (int j = 0; j < W; ++j)
            x.v[j] = from_f32<D>(to_f32(x.v[j]) + y.v[j]);
        store_pack<W>(dw + i, x);
    }
};

}  // namespace

namespace detail {

template <class T>
void head_cross_entropy(const HeadCrossEntropyArgs<T>& args, const Launch& launch,
                        HeadCrossEntropyRows rows) {
    const auto& [losses, dx, dw, x, w, targets, M, C, V, Vp, chunk, dloss, scratch, gemm_scratch] =
        args;
    const MatmulContext ctx = matmul_context(launch, gemm_scratch);
    cudaStream_t stream = launch.stream;
    NAPKIN_CUDA_REQUIRE(chunk > 0 && V > 0 && V <= Vp && M >= 0 && C > 0,
                        "head_cross_entropy: chunk " << chunk << ", V " << V << ", Vp " << Vp
                                                     << ", M " << M << ", C " << C);
    NAPKIN_CUDA_REQUIRE(scratch != nullptr, "head_cross_entropy: scratch is required");
    using D = device_t<T>;
    constexpr bool kFloat = cuda_data_type<T>() == CUDA_R_32F;
    constexpr cudaDataType_t type = cuda_data_type<T>();
    auto* base = reinterpret_cast<unsigned char*>(scratch);
    float* logits = reinterpret_cast<float*>(base);  // (chunk, Vp)
    base += head_cross_entropy_scratch_align(static_cast<std::size_t>(chunk * Vp) * sizeof(float));
    D* dlogits = nullptr;   // (chunk, Vp), 16-bit storage only
    float* dw32 = nullptr;  // (Vp, C), 16-bit storage with dw only
    if (!kFloat) {
        dlogits = reinterpret_cast<D*>(base);
        base += head_cross_entropy_scratch_align(static_cast<std::size_t>(chunk * Vp) * sizeof(D));
        if (dw != nullptr) dw32 = reinterpret_cast<float*>(base);
    }
    // Rows of whole 16-byte packs: every row of logits (and of dlogits) starts aligned.
    const bool vec = Vp % 4 == 0 && rows == HeadCrossEntropyRows::two_pass;
    for (std::int64_t r0 = 0; r0 < M; r0 += chunk) {
        const std::int64_t R = std::min(chunk, M - r0);
        const D* xr = dev(x) + r0 * C;  // (R, C)
        // logits (R, Vp) = x (R, C) @ w (Vp, C)^T, fp32 out
        gemm(ctx, gemm_nt(logits, xr, w, R, Vp, C, type, CUDA_R_32F, 0.0f), stream);
        auto kernel = vec ? head_cross_entropy_kernel<4, D> : head_cross_entropy_kernel<1, D>;
        if (rows == HeadCrossEntropyRows::three_pass)
            kernel = head_cross_entropy_three_pass_kernel<D>;
        if (rows != HeadCrossEntropyRows::none) {
            kernel<<<static_cast<unsigned>(R), kRowBlock, 0, stream>>>(losses + r0, logits, dlogits,
                                                                       targets + r0, V, Vp, dloss);
            NAPKIN_CUDA_CHECK_LAUNCH();
        }
        const void* g =
            kFloat ? static_cast<const void*>(logits) : static_cast<const void*>(dlogits);
        // dx (R, C) = dlogits (R, Vp) @ w (Vp, C), overwritten
        gemm(ctx, gemm_nn(dev(dx) + r0 * C, g, w, R, Vp, C, type, type, 0.0f), stream);
        // dw (Vp, C) += dlogits^T (Vp, R) @ x (R, C): into dw itself (fp32), or into dw32, which
        // the first chunk overwrites (beta 0: no zeroing pass, no read of it)
        if (dw != nullptr) {
            if (kFloat) {
                gemm(ctx, gemm_tn(dw, g, xr, R, Vp, C, type, type, 1.0f), stream);
            } else {
                const float beta = r0 == 0 ? 0.0f : 1.0f;
                gemm(ctx, gemm_tn(dw32, g, xr, R, Vp, C, type, CUDA_R_32F, beta), stream);
            }
        }
    }
    if (dw32 != nullptr && M > 0) {
        const HeadAccumulate<D> op{dev(dw), dw32};
        const bool vec_dw = aligned16(dw);  // dw32 starts on a 256-byte boundary
        elementwise_kernel<<<elementwise_grid(op, Vp * C, vec_dw), kElementwiseBlock, 0, stream>>>(
            op, Vp * C, vec_dw);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace detail

template <class T>
void head_cross_entropy(const HeadCrossEntropyArgs<T>& args, const Launch& launch) {
    detail::head_cross_entropy(args, launch, detail::HeadCrossEntropyRows::two_pass);
}

#define NAPKIN_CUDA_CE_INSTANTIATE(T)                                                          \
    template void head_cross_entropy<T>(const HeadCrossEntropyArgs<T>&, const Launch&);        \
    template void detail::head_cross_entropy<T>(const HeadCrossEntropyArgs<T>&, const Launch&, \
                                                detail::HeadCrossEntropyRows);
NAPKIN_CUDA_CE_INSTANTIATE(float)
NAPKIN_CUDA_CE_INSTANTIATE(bf16_t)
NAPKIN_CUDA_CE_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_CE_INSTANTIATE

}  // namespace napkin::cuda
