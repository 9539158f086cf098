// The fused, chunked head + cross-entropy on the GPU (declared in kernels/cross_entropy.h; the
// CPU twin, the spec, is kernels/cpu/cross_entropy.cpp): only `chunk` rows of fp32 logits exist
// at a time, and the head's gradients are taken chunk by chunk.
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm.cuh"

namespace napkin::cuda {

namespace {

constexpr int kRowBlock = 512;

// One block per row of the chunk: logits (R, Vp) fp32 in, losses out, and dlogits
// (softmax - onehot) * dloss over the V real columns, 0 on the padding: in place into logits when
// dlogits is null (fp32 storage), else rounded into dlogits (R, Vp).
template <class D>
__global__ void head_cross_entropy_kernel(float* losses, float* logits, D* dlogits,
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
template <class D>
__global__ void head_cross_entropy_accumulate_kernel(D* dw, const float* dw32, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        dw[i] = from_f32<D>(to_f32(dw[i]) + dw32[i]);
}

}  // namespace

template <class T>
void head_cross_entropy(const HeadCrossEntropyArgs<T>& args, const Launch& launch) {
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
        if (dw != nullptr) {
            dw32 = reinterpret_cast<float*>(base);
            NAPKIN_CUDA_CHECK(
                cudaMemsetAsync(dw32, 0, static_cast<std::size_t>(Vp * C) * sizeof(float), stream));
        }
    }
    for (std::int64_t r0 = 0; r0 < M; r0 += chunk) {
        const std::int64_t R = std::min(chunk, M - r0);
        const D* xr = dev(x) + r0 * C;  // (R, C)
        // logits (R, Vp) = x (R, C) @ w (Vp, C)^T, fp32 out
        gemm(ctx, gemm_nt(logits, xr, w, R, Vp, C, type, CUDA_R_32F, 0.0f), stream);
        head_cross_entropy_kernel<<<static_cast<unsigned>(R), kRowBlock, 0, stream>>>(
            losses + r0, logits, dlogits, targets + r0, V, Vp, dloss);
        NAPKIN_CUDA_CHECK_LAUNCH();
        const void* g =
            kFloat ? static_cast<const void*>(logits) : static_cast<const void*>(dlogits);
        // dx (R, C) = dlogits (R, Vp) @ w (Vp, C), overwritten
        gemm(ctx, gemm_nn(dev(dx) + r0 * C, g, w, R, Vp, C, type, type, 0.0f), stream);
        // dw (Vp, C) += dlogits^T (Vp, R) @ x (R, C): into dw itself (fp32) or dw32
        if (dw != nullptr) {
            if (kFloat) {
                gemm(ctx, gemm_tn(dw, g, xr, R, Vp, C, type, type, 1.0f), stream);
            } else {
                gemm(ctx, gemm_tn(dw32, g, xr, R, Vp, C, type, CUDA_R_32F, 1.0f), stream);
            }
        }
    }
    if (dw32 != nullptr) {
        constexpr int kBlock = 256;
        head_cross_entropy_accumulate_kernel<<<grid_for(Vp * C, kBlock), kBlock, 0, stream>>>(
            dev(dw), dw32, Vp * C);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
}

#define NAPKIN_CUDA_CE_INSTANTIATE(T) \
    template void head_cross_entropy<T>(const HeadCrossEntropyArgs<T>&, const Launch&);
NAPKIN_CUDA_CE_INSTANTIATE(float)
NAPKIN_CUDA_CE_INSTANTIATE(bf16_t)
NAPKIN_CUDA_CE_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_CE_INSTANTIATE

}  // namespace napkin::cuda
