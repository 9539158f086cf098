// LayerNorm and RMSNorm on the GPU (declared in kernels/norm.h; the CPU twin, the spec, is
// kernels/cpu/norm.cpp). One block per row for the forward and the input gradient (statistics by
// block reductions in fp32, two passes over the row as on the CPU); the parameter gradients by
// blocks that own 32 columns and walk every row, adding their fixed-order fp32 sums into the
// gradient once (one writer per element: deterministic, no atomics).
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/norm.h"

namespace napkin::cuda {

namespace {

constexpr int kMaxRowThreads = 512;
constexpr int kParamCols = 32;
constexpr int kParamRows = 16;

// mean null: RMSNorm (no centring).
template <class D>
__global__ void norm_forward_kernel(D* out, float* mean, float* rstd, const D* inp, const D* weight,
                                    const D* bias, std::int64_t C, float eps) {
    __shared__ float shared[kWarpSize];
    const std::int64_t row = blockIdx.x;
    const D* x = inp + row * C;  // (C)
    D* y = out + row * C;        // (C)
    const float inv_c = 1.0f / static_cast<float>(C);
    float m = 0.0f;
    if (mean != nullptr) {
        float sum = 0.0f;
        for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x)
            sum += to_f32(x[c]);
        m = block_sum(sum, shared) * inv_c;
    }
    float var = 0.0f;  // two passes: no cancellation when |mean| >> std
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = to_f32(x[c]) - m;
        var += d * d;
    }
    const float s = 1.0f / sqrtf(block_sum(var, shared) * inv_c + eps);
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = (to_f32(x[c]) - m) * s * to_f32(weight[c]);
        if (bias != nullptr) v += to_f32(bias[c]);
        y[c] = from_f32<D>(v);
    }
    if (threadIdx.x == 0) {
        if (mean != nullptr) mean[row] = m;
        rstd[row] = s;
    }
}

// dinp (row) += s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight;
// RMSNorm (mean null) drops the mean(dnorm) term.
template <class D>
__global__ void norm_backward_kernel(D* dinp, const D* dout, const D* inp, const D* weight,
                                     const float* mean, const float* rstd, std::int64_t C) {
    __shared__ float shared[kWarpSize];
    const std::int64_t row = blockIdx.x;
    const D* x = inp + row * C;    // (C)
    const D* dy = dout + row * C;  // (C)
    D* dx = dinp + row * C;        // (C)
    const float m = mean != nullptr ? mean[row] : 0.0f;
    const float s = rstd[row];
    const float inv_c = 1.0f / static_cast<float>(C);
    float dn = 0.0f, dn_xhat = 0.0f;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (to_f32(x[c]) - m) * s;
        const float dnorm = to_f32(dy[c]) * to_f32(weight[c]);
        dn += dnorm;
        dn_xhat += dnorm * xhat;
    }
    const float dnorm_mean = mean != nullptr ? block_sum(dn, shared) * inv_c : 0.0f;
    const float dnorm_xhat_mean = block_sum(dn_xhat, shared) * inv_c;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (to_f32(x[c]) - m) * s;
        const float dnorm = to_f32(dy[c]) * to_f32(weight[c]);
        const float g = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
        dx[c] = from_f32<D>(to_f32(dx[c]) + g);
    }
}

// dweight (C) += sum over rows of dout * xhat; dbias (C) += sum over rows of dout (either null).
// Block (32, 16): threadIdx.x one of the block's 32 columns, threadIdx.y a stride of rows.
template <class D>
__global__ void norm_backward_params_kernel(D* dweight, D* dbias, const D* dout, const D* inp,
                                            const float* mean, const float* rstd, std::int64_t N,
                                            std::int64_t C) {
    __shared__ float dw_part[kParamRows][kParamCols];
    __shared__ float db_part[kParamRows][kParamCols];
    const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(kParamCols) + threadIdx.x;
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (std::int64_t n = threadIdx.y; n < N; n += kParamRows) {
            const float g = to_f32(dout[n * C + col]);
            const float m = mean != nullptr ? mean[n] : 0.0f;
            dw += g * (to_f32(inp[n * C + col]) - m) * rstd[n];
            db += g;
        }
    }
    dw_part[threadIdx.y][threadIdx.x] = dw;
    db_part[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y != 0 || col >= C) return;
    float dw_sum = 0.0f, db_sum = 0.0f;
    for (int r = 0; r < kParamRows; ++r) {
        dw_sum += dw_part[r][threadIdx.x];
        db_sum += db_part[r][threadIdx.x];
    }
    if (dweight != nullptr) dweight[col] = from_f32<D>(to_f32(dweight[col]) + dw_sum);
    if (dbias != nullptr) dbias[col] = from_f32<D>(to_f32(dbias[col]) + db_sum);
}

void check_shape(const char* op, std::int64_t N, std::int64_t C) {
    NAPKIN_CUDA_REQUIRE(N >= 0 && C > 0, op << ": N " << N << ", C " << C);
    NAPKIN_CUDA_REQUIRE(N <= kMaxGridX, op << ": N " << N << " rows exceed one grid");
}

template <class D>
void launch_forward(D* out, float* mean, float* rstd, const D* inp, const D* weight, const D* bias,
                    std::int64_t N, std::int64_t C, float eps, cudaStream_t stream) {
    if (N == 0) return;
    norm_forward_kernel<<<static_cast<unsigned>(N), block_for_row(C, kMaxRowThreads), 0, stream>>>(
        out, mean, rstd, inp, weight, bias, C, eps);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

template <class D>
void launch_backward(D* dinp, D* dweight, D* dbias, const D* dout, const D* inp, const D* weight,
                     const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                     cudaStream_t stream) {
    if (N > 0) {
        norm_backward_kernel<<<static_cast<unsigned>(N), block_for_row(C, kMaxRowThreads), 0,
                               stream>>>(dinp, dout, inp, weight, mean, rstd, C);
        NAPKIN_CUDA_CHECK_LAUNCH();
    }
    if (dweight == nullptr && dbias == nullptr) return;
    const dim3 block(kParamCols, kParamRows);
    const auto grid = static_cast<unsigned>((C + kParamCols - 1) / kParamCols);
    norm_backward_params_kernel<<<grid, block, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd,
                                                            N, C);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, std::int64_t N, std::int64_t C, CUstream_st* stream,
                       float eps) {
    check_shape("layernorm_forward", N, C);
    NAPKIN_CUDA_REQUIRE(mean != nullptr, "layernorm_forward: mean is required");
    launch_forward(dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps, stream);
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, std::int64_t N, std::int64_t C,
                        CUstream_st* stream) {
    check_shape("layernorm_backward", N, C);
    NAPKIN_CUDA_REQUIRE(mean != nullptr, "layernorm_backward: mean is required");
    launch_backward(dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp), dev(weight), mean,
                    rstd, N, C, stream);
}

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, std::int64_t N,
                     std::int64_t C, CUstream_st* stream, float eps) {
    check_shape("rmsnorm_forward", N, C);
    launch_forward(dev(out), static_cast<float*>(nullptr), rstd, dev(inp), dev(weight),
                   static_cast<const device_t<T>*>(nullptr), N, C, eps, stream);
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, std::int64_t N, std::int64_t C, CUstream_st* stream) {
    check_shape("rmsnorm_backward", N, C);
    launch_backward(dev(dinp), dev(dweight), static_cast<device_t<T>*>(nullptr), dev(dout),
                    dev(inp), dev(weight), static_cast<const float*>(nullptr), rstd, N, C, stream);
}

#define NAPKIN_CUDA_NORM_INSTANTIATE(T)                                                          \
    template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*,         \
                                       std::int64_t, std::int64_t, CUstream_st*, float);         \
    template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*,  \
                                        const float*, std::int64_t, std::int64_t, CUstream_st*); \
    template void rmsnorm_forward<T>(T*, float*, const T*, const T*, std::int64_t, std::int64_t, \
                                     CUstream_st*, float);                                       \
    template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*,        \
                                      std::int64_t, std::int64_t, CUstream_st*);
NAPKIN_CUDA_NORM_INSTANTIATE(float)
NAPKIN_CUDA_NORM_INSTANTIATE(bf16_t)
NAPKIN_CUDA_NORM_INSTANTIATE(f16_t)
#undef NAPKIN_CUDA_NORM_INSTANTIATE

}  // namespace napkin::cuda
