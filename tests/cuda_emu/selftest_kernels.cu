// The emulator's own test kernels (tests/cuda_emu/selftest_kernels.h says what each does).
// Compiled only for the emulator: rewrite_cu.cmake turns the launches into emulated ones.
#include "tests/cuda_emu/selftest_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

namespace napkin::emu::selftest {

namespace {

constexpr int kMaxThreads = 1024;

__device__ int flat_thread() {
    return static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
}

__global__ void block_sum_kernel(const int* in, int* out, bool barriers) {
    __shared__ int shared[kMaxThreads];
    const int t = flat_thread();
    const int n = static_cast<int>(blockDim.x * blockDim.y);
    shared[t] = in[blockIdx.x * n + t];
    if (barriers) __syncthreads();
    for (int stride = n / 2; stride > 0; stride /= 2) {
        if (t < stride) shared[t] += shared[t + stride];
        if (barriers) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = shared[0];
}

__global__ void double_add_kernel(int* data, int n, int k) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) data[i] = 2 * data[i] + k;
}

__global__ void warp_ops_kernel(int* out) {
    const int lane = static_cast<int>(threadIdx.x);
    const int v = lane + 1;
    int sum = v;
    for (int m = 16; m > 0; m /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
    out[lane] = sum;
    out[32 + lane] = __shfl_down_sync(0xffffffffu, v, 1);
    out[64 + lane] = __shfl_up_sync(0xffffffffu, v, 2);
    out[96 + lane] = __shfl_sync(0xffffffffu, v, 3, 8);
    const unsigned odd = __ballot_sync(0xffffffffu, lane % 2 == 1);
    const int any = __any_sync(0xffffffffu, lane == 31);
    const int all = __all_sync(0xffffffffu, lane < 31);
    const int count = __syncthreads_count(lane % 2 == 0);
    if (lane == 0) {
        out[128] = static_cast<int>(odd);
        out[129] = any;
        out[130] = all;
        out[131] = count;
    }
}

__global__ void rounded_arithmetic_kernel(const float* a, const float* b, const float* c,
                                          float* out, int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    out[2 * i] = __fmul_rn(a[i], b[i]) + c[i];
    out[2 * i + 1] = __fdiv_rn(a[i], b[i]);
}

__global__ void barrier_after_return_kernel() {
    if (threadIdx.x >= 16) return;
    __syncthreads();
}

__global__ void deadlock_kernel() {
    if (threadIdx.x == 31) {
        __syncthreads();
        return;
    }
    (void)__shfl_sync(0xffffffffu, 1, 31);
}

__global__ void shuffle_outside_mask_kernel(int* out) {
    if (threadIdx.x < 16)
        out[threadIdx.x] = __shfl_sync(0xffffu, static_cast<int>(threadIdx.x), 20);
}

__global__ void dynamic_shared_kernel(int* out, int smem) {
    extern __shared__ unsigned char bytes[];
    if (threadIdx.x == 0) {
        bytes[smem - 1] = 42;
        out[0] = bytes[smem - 1];
    }
}

__global__ void read_past_end_kernel(const int* in, int n, int* out) {
    out[0] = in[n];
}

namespace wmma = nvcuda::wmma;

template <class T, class LayoutA, class LayoutB>
__global__ void wmma_product_kernel(const T* a, const T* b, const float* c, float* d,
                                    WmmaProduct p) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, p.lda);
    wmma::load_matrix_sync(fb, b, p.ldb);
    wmma::load_matrix_sync(acc, c, p.ldc, p.c_col ? wmma::mem_col_major : wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; ++i)
        acc.x[i] *= 2.0f;
    wmma::store_matrix_sync(d, acc, p.ldd, p.d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

template <class T>
cudaError_t launch_wmma_product(const T* a, const T* b, const float* c, float* d,
                                const WmmaProduct& p) {
    auto kernel = wmma_product_kernel<T, wmma::row_major, wmma::row_major>;
    if (p.a_col && p.b_col)
        kernel = wmma_product_kernel<T, wmma::col_major, wmma::col_major>;
    else if (p.a_col)
        kernel = wmma_product_kernel<T, wmma::col_major, wmma::row_major>;
    else if (p.b_col)
        kernel = wmma_product_kernel<T, wmma::row_major, wmma::col_major>;
    kernel<<<1, 32>>>(a, b, c, d, p);
    return cudaGetLastError();
}

__global__ void wmma_fragment_contents_kernel(const __half* m, const float* mf, float* out) {
    const int lane = static_cast<int>(threadIdx.x);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, m, 16);
    wmma::load_matrix_sync(acc, mf, 16, wmma::mem_row_major);
    for (int i = 0; i < fa.num_elements; ++i)
        out[lane * fa.num_elements + i] = __half2float(fa.x[i]);
    for (int i = 0; i < acc.num_elements; ++i)
        out[512 + lane * acc.num_elements + i] = acc.x[i];
}

__global__ void wmma_fixed_mapping_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                          float* d) {
    const int lane = static_cast<int>(threadIdx.x);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; ++i) {
        const int row = lane / 4 + 8 * (i / 2 % 2);
        const int col = lane % 4 * 2 + i % 2 + 8 * (i / 4);
        d[row * 16 + col] = acc.x[i];
    }
}

__global__ void wmma_misuse_kernel(const __half* m, WmmaMisuse how) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    switch (how) {
        case WmmaMisuse::kHalfWarp:
            if (lane < 16) wmma::load_matrix_sync(fa, m, 16);
            break;
        case WmmaMisuse::kOddLdm:
            wmma::load_matrix_sync(fa, m, 17);
            break;
        case WmmaMisuse::kMisaligned:
            wmma::load_matrix_sync(fa, m + 8, 16);
            break;
        case WmmaMisuse::kLanesDisagree:
            wmma::load_matrix_sync(fa, m + (lane % 2) * 16 * 16, 16);
            break;
        case WmmaMisuse::kSmallBlock:
            wmma::load_matrix_sync(fa, m, 16);
            break;
        case WmmaMisuse::kDifferentCalls:
            if (lane % 2 == 1)
                wmma::load_matrix_sync(fb, m, 16);
            else
                wmma::load_matrix_sync(fa, m, 16);
            break;
    }
}

}  // namespace

cudaError_t wmma_product(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d,
                         const WmmaProduct& p) {
    if (p.half)
        return launch_wmma_product(reinterpret_cast<const __half*>(a),
                                   reinterpret_cast<const __half*>(b), c, d, p);
    return launch_wmma_product(reinterpret_cast<const __nv_bfloat16*>(a),
                               reinterpret_cast<const __nv_bfloat16*>(b), c, d, p);
}

cudaError_t wmma_fragment_contents(const std::uint16_t* m, const float* mf, float* out) {
    wmma_fragment_contents_kernel<<<1, 32>>>(reinterpret_cast<const __half*>(m), mf, out);
    return cudaGetLastError();
}

cudaError_t wmma_fixed_mapping(const std::uint16_t* a, const std::uint16_t* b, float* d) {
    wmma_fixed_mapping_kernel<<<1, 32>>>(reinterpret_cast<const __nv_bfloat16*>(a),
                                         reinterpret_cast<const __nv_bfloat16*>(b), d);
    return cudaGetLastError();
}

cudaError_t wmma_misuse(const std::uint16_t* m, WmmaMisuse how) {
    const int threads = how == WmmaMisuse::kSmallBlock ? 16 : 32;
    wmma_misuse_kernel<<<1, threads>>>(reinterpret_cast<const __half*>(m), how);
    return cudaGetLastError();
}

cudaError_t read_past_end(const int* in, int n, int* out) {
    read_past_end_kernel<<<1, 1>>>(in, n, out);
    return cudaGetLastError();
}

cudaError_t block_sum(const int* in, int* out, int blocks, int threads) {
    block_sum_kernel<<<blocks, dim3(threads / 4, 4)>>>(in, out, true);
    return cudaGetLastError();
}

cudaError_t block_sum_without_barriers(const int* in, int* out, int blocks, int threads) {
    block_sum_kernel<<<blocks, dim3(threads / 4, 4)>>>(in, out, false);
    return cudaGetLastError();
}

cudaError_t warp_ops(int* out) {
    warp_ops_kernel<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t rounded_arithmetic(const float* a, const float* b, const float* c, float* out, int n) {
    rounded_arithmetic_kernel<<<(n + 127) / 128, 128>>>(a, b, c, out, n);
    return cudaGetLastError();
}

cudaError_t barrier_after_return() {
    barrier_after_return_kernel<<<1, 32>>>();
    return cudaGetLastError();
}

cudaError_t deadlock() {
    deadlock_kernel<<<1, 32>>>();
    return cudaGetLastError();
}

cudaError_t shuffle_outside_mask(int* out) {
    shuffle_outside_mask_kernel<<<1, 32>>>(out);
    return cudaGetLastError();
}

cudaError_t dynamic_shared(int* out, int threads, int smem, bool optin) {
    if (optin) {
        const cudaError_t e = cudaFuncSetAttribute(
            dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
    }
    dynamic_shared_kernel<<<1, threads, static_cast<std::size_t>(smem)>>>(out, smem);
    return cudaGetLastError();
}

cudaError_t double_add(int* data, int n, int k, cudaStream_t stream) {
    double_add_kernel<<<(n + 127) / 128, 128, 0, stream>>>(data, n, k);
    return cudaGetLastError();
}

}  // namespace napkin::emu::selftest
