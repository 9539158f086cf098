// The wgmma probe (wgmma_probe.h): one block, each warpgroup its own 64 rows of A and D, A and B
// staged into 128-byte-swizzled shared tiles by plain 16-byte stores, four k-steps of 16 in one
// group, as a flash attention's S = Q K^T (K-major B) and O += P V (N-major B, A from registers)
// will use them.
#include "tests/kernels_cuda/wgmma_probe.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"
#if !defined(__CUDACC__)
#include "tests/cuda_emu/emu_state.h"
#endif

namespace napkin::cuda::probe {

namespace {

constexpr int kK = 64;          // A's columns, B's k: one 128-byte row of 16-bit elements
constexpr int kRowBytes = 128;  // a swizzled row
constexpr std::uint32_t kAtom = 1024;

__global__ void wgmma_compiled_kernel(int* out) {
    *out = wgmma::compiled_in() ? 1 : 0;
}

// Copies a rows x 64 row-major 16-bit matrix into a K-major swizzled tile at `tile`: by plain
// 16-byte stores, or by cp.async (waited for, not fenced: the caller fences).
__device__ void stage_k_major(unsigned char* tile, const std::uint16_t* src, int rows,
                              bool cp_async = false) {
    for (int i = static_cast<int>(threadIdx.x); i < rows * 8; i += static_cast<int>(blockDim.x)) {
        const int r = i / 8, c = i % 8;
        unsigned char* dst = tile + wgmma::swizzle128(r * kRowBytes + c * 16);
        if (cp_async) {
            cp_async_16(shared_address(dst), src + r * kK + c * 8, true);
            continue;
        }
        const uint4 v = *reinterpret_cast<const uint4*>(src + r * kK + c * 8);
        *reinterpret_cast<uint4*>(dst) = v;
    }
    if (cp_async) {
        cp_async_commit();
        cp_async_wait<0>();
    }
}

// Copies a 64 x n row-major matrix (k by n) into N-major swizzled 64-column blocks.
__device__ void stage_n_major(unsigned char* tile, const std::uint16_t* src, int n) {
    const int chunks = n / 8;  // 16-byte chunks a row
    for (int i = static_cast<int>(threadIdx.x); i < kK * chunks;
         i += static_cast<int>(blockDim.x)) {
        const int k = i / chunks, cn = i % chunks;
        const uint4 v = *reinterpret_cast<const uint4*>(src + k * n + cn * 8);
        const int block = cn / 8, c = cn % 8;
        *reinterpret_cast<uint4*>(tile + block * kK * kRowBytes +
                                  wgmma::swizzle128(k * kRowBytes + c * 16)) = v;
    }
}

template <class T, int N, bool kTransB, bool kRegisters>
__global__ void wgmma_product_kernel(const std::uint16_t* a, const std::uint16_t* b,
                                     const float* c_in, float* d, bool accumulate, bool cp_async,
                                     WgmmaMisuse misuse) {
    extern __shared__ __align__(128) unsigned char smem[];
    // The tiles at a multiple of 1024 bytes of the shared window, which the swizzle assumes.
    const std::uint32_t window = shared_address(smem);
    const std::uint32_t a_at = (window + kAtom - 1) / kAtom * kAtom;
    unsigned char* a_tile = smem + (a_at - window);
    const int rows = static_cast<int>(blockDim.x) / 128 * 64;
    const std::uint32_t b_at = a_at + static_cast<std::uint32_t>(rows * kRowBytes);
    unsigned char* b_tile = a_tile + rows * kRowBytes;
    stage_k_major(a_tile, a, rows, cp_async || misuse == WgmmaMisuse::kNoProxyFence);
    if constexpr (kTransB)
        stage_n_major(b_tile, b, N);
    else
        stage_k_major(b_tile, b, N);
    if (misuse != WgmmaMisuse::kNoProxyFence) wgmma::fence_proxy_async();
    __syncthreads();

    const int group = static_cast<int>(threadIdx.x) / 128,
              warp = static_cast<int>(threadIdx.x) / 32 % 4;
    const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
    const int row0 = 64 * group + 16 * warp + g;  // this lane's first row of A and D
    float acc[N / 2];
    for (int i = 0; i < N / 2; ++i) {
        const int j = i / 4, h = i % 4 / 2, e = i % 2;
        acc[i] = accumulate ? c_in[(row0 + 8 * h) * N + 8 * j + 2 * t + e] : 0.0f;
    }
    if (misuse != WgmmaMisuse::kNoFence) wgmma::fence();
    const bool issue = misuse != WgmmaMisuse::kOneWarpIssues || warp == 0;
    const std::uint32_t b_off = misuse == WgmmaMisuse::kPastTheEnd ? 65536u : 0u;
    for (int ks = 0; ks < kK / 16 && issue; ++ks) {
        const std::uint64_t bd =
            kTransB ? wgmma::descriptor(b_at + b_off + ks * 16 * kRowBytes, kK * kRowBytes, kAtom,
                                        wgmma::Swizzle::k128)
                    : wgmma::descriptor(b_at + b_off + ks * 32, 16, kAtom, wgmma::Swizzle::k128);
        const bool acc_in = accumulate || ks > 0;
        if constexpr (kRegisters) {
            std::uint32_t ar[4];
            for (int r = 0; r < 4; ++r) {
                const int row = row0 + 8 * (r % 2), col = 16 * ks + 2 * t + 8 * (r / 2);
                ar[r] = a[row * kK + col] | std::uint32_t{a[row * kK + col + 1]} << 16;
            }
            wgmma::mma_rs<T, N, kTransB>(acc, ar, bd, acc_in);
        } else {
            const std::uint64_t ad = wgmma::descriptor(
                a_at + static_cast<std::uint32_t>(64 * group * kRowBytes + ks * 32), 16, kAtom,
                wgmma::Swizzle::k128);
            wgmma::mma_ss<T, N, kTransB>(acc, ad, bd, acc_in);
        }
    }
    wgmma::commit();
    if (misuse == WgmmaMisuse::kOverwriteInFlight && threadIdx.x == 0)
        a_tile[0] = static_cast<unsigned char>(~a_tile[0]);
    if (misuse != WgmmaMisuse::kNoWait) wgmma::wait<0>();
    for (int i = 0; i < N / 2; ++i) {
        const int j = i / 4, h = i % 4 / 2, e = i % 2;
        d[(row0 + 8 * h) * N + 8 * j + 2 * t + e] = acc[i];
    }
}

template <class T, int N, bool kTransB, bool kRegisters>
cudaError_t launch(const WgmmaCase& c, const std::uint16_t* a, const std::uint16_t* b,
                   const float* c_in, float* d) {
    const int threads = c.threads > 0 ? c.threads : 128 * c.warpgroups;
    const std::size_t smem = kAtom + static_cast<std::size_t>(64 * c.warpgroups + N) * kRowBytes;
    auto* kernel = &wgmma_product_kernel<T, N, kTransB, kRegisters>;
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess)
        return e;
    kernel<<<1, threads, smem>>>(a, b, c_in, d, c.accumulate, c.cp_async, c.misuse);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return cudaDeviceSynchronize();
}

template <class T, int N>
cudaError_t launch_n(const WgmmaCase& c, const std::uint16_t* a, const std::uint16_t* b,
                     const float* c_in, float* d) {
    if constexpr (N != 32) {  // N 32: K-major B only (wgmma::valid_n; wgmma_product checks)
        if (c.b_n_major)
            return c.a_registers ? launch<T, N, true, true>(c, a, b, c_in, d)
                                 : launch<T, N, true, false>(c, a, b, c_in, d);
    }
    return c.a_registers ? launch<T, N, false, true>(c, a, b, c_in, d)
                         : launch<T, N, false, false>(c, a, b, c_in, d);
}

template <class T>
cudaError_t launch_t(const WgmmaCase& c, const std::uint16_t* a, const std::uint16_t* b,
                     const float* c_in, float* d) {
    switch (c.n) {
        case 32:
            return launch_n<T, 32>(c, a, b, c_in, d);
        case 64:
            return launch_n<T, 64>(c, a, b, c_in, d);
        case 128:
            return launch_n<T, 128>(c, a, b, c_in, d);
        default:
            return cudaErrorInvalidValue;
    }
}

// A probe's launch error `e` with its message into *failure: on the emulator the emulator's, and
// a fresh device for the next case (a GPU's launch failure sticks to its context; the misuses
// run on the emulator only).
cudaError_t finish(cudaError_t e, std::string* failure) {
    if (e == cudaSuccess) return e;
#if !defined(__CUDACC__)
    if (failure != nullptr) *failure = ::napkin::emu::last_error_message();
    ::napkin::emu::reset_for_test();
#else
    if (failure != nullptr) *failure = cudaGetErrorString(e);
#endif
    return e;
}

constexpr int kTmaThreads = 64;

// Thread 0 sets up the mbarrier, announces the box's bytes and issues the copy; every thread
// waits for it, then the block writes the shared tile out as it lies.
__global__ void tma_tile_kernel(const __grid_constant__ CUtensorMap map, int rows, int row0,
                                int col0, int batch, std::uint16_t* tile, TmaMisuse misuse) {
    extern __shared__ __align__(128) unsigned char smem[];
    const std::uint32_t window = shared_address(smem);
    const std::uint32_t at =
        (window + kAtom - 1) / kAtom * kAtom + (misuse == TmaMisuse::kUnaligned ? 512u : 0u);
    const std::uint32_t bytes = static_cast<std::uint32_t>(rows) * kRowBytes;
    const std::uint32_t bar = (window + kAtom - 1) / kAtom * kAtom + 512u + bytes;
    if (threadIdx.x == 0) {
        tma::init(bar, 1);
        tma::fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (misuse != TmaMisuse::kNoArrive)
            tma::arrive_expect_tx(bar, misuse == TmaMisuse::kShortExpect ? bytes - 16 : bytes);
        tma::load_3d(at, &map, col0, row0, batch, bar);
    }
    if (misuse == TmaMisuse::kNoWait)
        __syncthreads();
    else
        tma::wait(bar, 0);
    const unsigned char* from = smem + (at - window);
    for (int i = static_cast<int>(threadIdx.x); i < rows * 8; i += kTmaThreads)
        reinterpret_cast<uint4*>(tile)[i] = reinterpret_cast<const uint4*>(from)[i];
}

}  // namespace

cudaError_t tma_tile(const TmaCase& c, const std::uint16_t* tensor, int batches, int rows, int cols,
                     std::uint16_t* tile, std::string* failure) {
    if (c.rows < 1 || c.rows > 256 || cols % 8 != 0) return cudaErrorInvalidValue;
    CUtensorMap map;
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                                static_cast<cuuint64_t>(batches)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * 2,
                                   static_cast<cuuint64_t>(cols) * rows * 2};
    const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(c.rows), 1};
    if (std::string why = tma::encode_16bit_3d(&map, true, tensor, dims, strides, box);
        !why.empty()) {
        if (failure != nullptr) *failure = why;
        return cudaErrorInvalidValue;
    }
    // The tile (and 512 bytes for the unaligned case) from a multiple of 1024, then the barrier.
    const std::size_t smem = kAtom + 512 + static_cast<std::size_t>(c.rows) * kRowBytes + 8;
    auto* kernel = &tma_tile_kernel;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e == cudaSuccess) {
        kernel<<<1, kTmaThreads, smem>>>(map, c.rows, c.row0, c.col0, c.batch, tile, c.misuse);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    return finish(e, failure);
}

bool wgmma_emulated() {
#if defined(__CUDACC__)
    return false;
#else
    return true;
#endif
}

std::string wgmma_unavailable() {
    // The emulator runs wgmma whatever capability it reports (NAPKIN_EMU_SM).
    return wgmma::unavailable([](int* flag) { wgmma_compiled_kernel<<<1, 1>>>(flag); },
                              !wgmma_emulated());
}

cudaError_t wgmma_product(const WgmmaCase& c, const std::uint16_t* a, const std::uint16_t* b,
                          const float* c_in, float* d, std::string* failure) {
    if ((c.n != 32 && c.n != 64 && c.n != 128) || (c.n == 32 && c.b_n_major) || c.warpgroups < 1 ||
        c.warpgroups > 4)
        return cudaErrorInvalidValue;
    return finish(
        c.bf16 ? launch_t<__nv_bfloat16>(c, a, b, c_in, d) : launch_t<__half>(c, a, b, c_in, d),
        failure);
}

}  // namespace napkin::cuda::probe
