// The emulated PTX's test kernels (tests/cuda_emu/ptx_selftest_kernels.h says what each does),
// written with kernels/cuda/mma.cuh as the flash attention uses it. Compiled only for the
// emulator: rewrite_cu.cmake turns the launches into emulated ones.
#include "tests/cuda_emu/ptx_selftest_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/named_barrier.cuh"

namespace napkin::emu::selftest {

namespace {

using cuda::cp_async_16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::ldmatrix_x4;
using cuda::ldmatrix_x4_trans;
using cuda::shared_address;

__device__ int lane_id() {
    return static_cast<int>(threadIdx.x) % 32;
}

__global__ void ldmatrix_fragments_kernel(std::uint32_t* out) {
    extern __shared__ __align__(128) unsigned char smem[];
    auto* m = reinterpret_cast<std::uint16_t*>(smem);
    const int l = lane_id();
    for (int e = l; e < 256; e += 32)
        m[e] = static_cast<std::uint16_t>(e);  // matrix e / 64, row e / 8 % 8, column e % 8
    __syncwarp();
    const std::uint32_t row = shared_address(smem) + (l / 8 * 8 + l % 8) * 16;
    std::uint32_t r[4], rt[4];
    ldmatrix_x4(r, row);
    ldmatrix_x4_trans(rt, row);
    for (int i = 0; i < 4; ++i) {
        out[4 * l + i] = r[i];
        out[128 + 4 * l + i] = rt[i];
    }
}

// Rows of 16 16-bit elements (32 bytes) in shared memory at `at`, unswizzled.
__device__ std::uint32_t row16(std::uint32_t at, int row, int col8) {
    return at + row * 32 + col8 * 16;
}

// The lane's C fragment of rows g, g + 8, columns 2 t, 2 t + 1 of a row-major (16, ld) matrix.
__device__ void load_c(float (&c)[4], const float* m, int ld) {
    const int g = lane_id() / 4, t = lane_id() % 4;
    for (int i = 0; i < 4; ++i)
        c[i] = m[(g + 8 * (i / 2)) * ld + 2 * t + i % 2];
}
__device__ void store_c(float* m, int ld, const float (&c)[4]) {
    const int g = lane_id() / 4, t = lane_id() % 4;
    for (int i = 0; i < 4; ++i)
        m[(g + 8 * (i / 2)) * ld + 2 * t + i % 2] = c[i];
}

template <class D>
__global__ void mma_product_kernel(const std::uint16_t* a, const std::uint16_t* bt, const float* c,
                                   float* d) {
    extern __shared__ __align__(128) unsigned char smem[];
    auto* s = reinterpret_cast<std::uint16_t*>(smem);
    const int l = lane_id();
    for (int e = l; e < 256; e += 32)
        s[e] = a[e];
    for (int e = l; e < 128; e += 32)
        s[256 + e] = bt[e];
    __syncwarp();
    const std::uint32_t at = shared_address(smem);
    std::uint32_t af[4], bf[4];
    ldmatrix_x4(af, row16(at, l % 16, l / 16));  // A: row l % 16, columns 8 (l / 16) ..
    // b^T's 8 rows (n) twice over: r[0..1] are n-tile 0's B fragment (r[2..3] the same again).
    ldmatrix_x4(bf, row16(at + 512, l % 8, l / 8 % 2));
    float acc[4];
    load_c(acc, c, 8);
    const std::uint32_t b[2] = {bf[0], bf[1]};
    cuda::mma_m16n8k16<D>(acc, af, b);
    store_c(d, 8, acc);
}

__global__ void mma_chain_kernel(const std::uint16_t* a, const std::uint16_t* x,
                                 const std::uint16_t* y, float* e) {
    extern __shared__ __align__(128) unsigned char smem[];
    auto* s = reinterpret_cast<std::uint16_t*>(smem);
    const int l = lane_id();
    for (int i = l; i < 256; i += 32) {
        s[i] = a[i];
        s[256 + i] = x[i];
        s[512 + i] = y[i];
    }
    __syncwarp();
    const std::uint32_t at = shared_address(smem);
    std::uint32_t af[4], xf[4], yf[4];
    ldmatrix_x4(af, row16(at, l % 16, l / 16));
    // X (k by n) transposed: lane l gives row l % 8 + 8 (l / 8 % 2), column 8 (l / 16).
    ldmatrix_x4_trans(xf, row16(at + 512, l % 8 + 8 * (l / 8 % 2), l / 16));
    ldmatrix_x4_trans(yf, row16(at + 1024, l % 8 + 8 * (l / 8 % 2), l / 16));
    float s0[4] = {}, s1[4] = {};
    const std::uint32_t x0[2] = {xf[0], xf[1]}, x1[2] = {xf[2], xf[3]};
    cuda::mma_m16n8k16<__nv_bfloat16>(s0, af, x0);
    cuda::mma_m16n8k16<__nv_bfloat16>(s1, af, x1);
    const std::uint32_t p[4] = {
        cuda::pack2<__nv_bfloat16>(s0[0], s0[1]), cuda::pack2<__nv_bfloat16>(s0[2], s0[3]),
        cuda::pack2<__nv_bfloat16>(s1[0], s1[1]), cuda::pack2<__nv_bfloat16>(s1[2], s1[3])};
    float e0[4] = {}, e1[4] = {};
    const std::uint32_t y0[2] = {yf[0], yf[1]}, y1[2] = {yf[2], yf[3]};
    cuda::mma_m16n8k16<__nv_bfloat16>(e0, p, y0);
    cuda::mma_m16n8k16<__nv_bfloat16>(e1, p, y1);
    store_c(e, 16, e0);
    store_c(e + 8, 16, e1);
}

__global__ void cp_async_lands_at_wait_kernel(const std::uint32_t* in, std::uint32_t* out) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int i = static_cast<int>(threadIdx.x);
    auto* chunk = reinterpret_cast<std::uint32_t*>(smem + 16 * i);
    *chunk = 0x12345678u;  // what the chunk held before the copy: gone at the issue
    cp_async_16(shared_address(smem) + 16 * i, in + 4 * i, i != 31);
    cp_async_commit();
    out[i] = *chunk;
    cp_async_wait<0>();
    out[32 + i] = *chunk;
}

__global__ void cp_async_groups_kernel(const std::uint32_t* in, std::uint32_t* out) {
    extern __shared__ __align__(128) unsigned char smem[];
    const auto* words = reinterpret_cast<const std::uint32_t*>(smem);
    cp_async_16(shared_address(smem), in, true);
    cp_async_commit();
    cp_async_16(shared_address(smem) + 16, in + 4, true);
    cp_async_commit();
    cp_async_wait<1>();
    out[0] = words[0];
    out[1] = words[4];
    cp_async_wait<0>();
    out[2] = words[0];
    out[3] = words[4];
}

__global__ void cp_async_without_barrier_kernel(const std::uint32_t* in, std::uint32_t* out) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int i = static_cast<int>(threadIdx.x);
    cp_async_16(shared_address(smem) + 16 * i, in + 4 * i, true);
    cp_async_commit();
    cp_async_wait<0>();
    out[i] = *reinterpret_cast<const std::uint32_t*>(smem + 16 * ((i + 1) % 64));
}

__global__ void ldmatrix_rows_kernel(bool swizzled) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int l = lane_id(), row = l % 8 + 8 * (l / 16), c = l / 8 % 2;
    std::uint32_t r[4];
    ldmatrix_x4(r, shared_address(smem) + row * 128 + (swizzled ? c ^ (row % 8) : c) * 16);
}

// A host pointer inside a struct: the launch checks only its direct pointer arguments.
struct Hidden {
    const std::uint32_t* host;
};

__global__ void ptx_misuse_kernel(const std::uint32_t* in, Hidden hidden, PtxMisuse how) {
    extern __shared__ __align__(128) unsigned char smem[];
    const std::uint32_t at = shared_address(smem);
    const int l = lane_id();
    std::uint32_t r[4];
    switch (how) {
        case PtxMisuse::kCpAsyncMisalignedDestination:
            cp_async_16(at + 8, in, true);
            break;
        case PtxMisuse::kCpAsyncHostSource:
            cp_async_16(at, hidden.host, true);
            break;
        case PtxMisuse::kLdmatrixPastTheEnd:
            ldmatrix_x4(r, at + (l == 5 ? 256 : 16 * l % 256));
            break;
        case PtxMisuse::kMmaInHalfAWarp: {
            if (l >= 16) return;
            float c[4] = {};
            const std::uint32_t a[4] = {}, b[2] = {};
            cuda::mma_m16n8k16<__half>(c, a, b);
            break;
        }
        case PtxMisuse::kLanesInDifferentCalls:
            if (l % 2 == 0)
                ldmatrix_x4(r, at);
            else
                ldmatrix_x4_trans(r, at);
            break;
    }
}

__global__ void named_handoff_kernel(const int* in, int* out, int rounds, Handoff how) {
    __shared__ int buffer[64];
    const int t = static_cast<int>(threadIdx.x);
    constexpr int kFull = 1, kEmpty = 2;
    const bool barriers = how != Handoff::kNone;
    if (t >= 64) {  // the producer warp: two elements a lane
        for (int r = 0; r < rounds; ++r) {
            if (barriers && r > 0) cuda::bar_sync(kEmpty, 96);
            if (how == Handoff::kArriveBeforeWrites) cuda::bar_arrive(kFull, 96);
            for (int i = t - 64; i < 64; i += 32)
                buffer[i] = in[64 * r + i] + r;
            if (how == Handoff::kBarriers) cuda::bar_arrive(kFull, 96);
        }
        return;
    }
    for (int r = 0; r < rounds; ++r) {
        if (barriers) cuda::bar_sync(kFull, 96);
        out[64 * r + t] = buffer[t];
        if (barriers && r + 1 < rounds) cuda::bar_arrive(kEmpty, 96);
    }
}

__global__ void named_misuse_kernel(NamedMisuse how) {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    switch (how) {
        case NamedMisuse::kLeftOver:
            if (warp == 0) cuda::bar_arrive(3, 64);
            break;
        case NamedMisuse::kNeverComplete:
            if (warp == 0) cuda::bar_sync(3, 64);
            break;
        case NamedMisuse::kCountsDisagree:
            cuda::bar_sync(3, warp == 0 ? 64 : 32);
            break;
        case NamedMisuse::kBarrierZero:
            cuda::bar_sync(0, 64);
            break;
        case NamedMisuse::kOddCount:
            cuda::bar_sync(3, 48);
            break;
        case NamedMisuse::kTwiceInARound:
            if (warp == 0) {
                cuda::bar_arrive(3, 64);
                cuda::bar_arrive(3, 64);
            }
            break;
        case NamedMisuse::kPartOfAWarp:
            if (threadIdx.x % 32 < 16) cuda::bar_arrive(3, 32);
            break;
    }
}

}  // namespace

cudaError_t named_handoff(const int* in, int* out, int rounds, Handoff how) {
    named_handoff_kernel<<<1, 96>>>(in, out, rounds, how);
    return cudaGetLastError();
}

cudaError_t named_misuse(NamedMisuse how) {
    named_misuse_kernel<<<1, 64>>>(how);
    return cudaGetLastError();
}

cudaError_t ldmatrix_fragments(std::uint32_t* out) {
    ldmatrix_fragments_kernel<<<1, 32, 512>>>(out);
    return cudaGetLastError();
}

cudaError_t mma_product(const std::uint16_t* a, const std::uint16_t* bt, const float* c, float* d,
                        bool bf16) {
    auto kernel = bf16 ? mma_product_kernel<__nv_bfloat16> : mma_product_kernel<__half>;
    kernel<<<1, 32, 1024>>>(a, bt, c, d);
    return cudaGetLastError();
}

cudaError_t mma_chain(const std::uint16_t* a, const std::uint16_t* x, const std::uint16_t* y,
                      float* e) {
    mma_chain_kernel<<<1, 32, 1536>>>(a, x, y, e);
    return cudaGetLastError();
}

cudaError_t cp_async_lands_at_wait(const std::uint32_t* in, std::uint32_t* out) {
    cp_async_lands_at_wait_kernel<<<1, 32, 512>>>(in, out);
    return cudaGetLastError();
}

cudaError_t cp_async_groups(const std::uint32_t* in, std::uint32_t* out) {
    cp_async_groups_kernel<<<1, 1, 32>>>(in, out);
    return cudaGetLastError();
}

cudaError_t cp_async_without_barrier(const std::uint32_t* in, std::uint32_t* out) {
    cp_async_without_barrier_kernel<<<1, 64, 1024>>>(in, out);
    return cudaGetLastError();
}

cudaError_t ldmatrix_rows(bool swizzled) {
    ldmatrix_rows_kernel<<<1, 32, 2048>>>(swizzled);
    return cudaGetLastError();
}

cudaError_t ptx_misuse(const std::uint32_t* in, PtxMisuse how) {
    static const std::uint32_t host[8] = {};
    ptx_misuse_kernel<<<1, 32, 256>>>(in, Hidden{host}, how);
    return cudaGetLastError();
}

}  // namespace napkin::emu::selftest
