// Hopper's warpgroup tensor-core instructions in PTX (sm_90a), for kernels that feed the tensor
// cores from shared memory at the rate sm_90 can take (docs/CUDA.md "wgmma"): wgmma.mma_async
// m64nNk16 (N 32, 64 or 128) with bf16 or fp16 inputs and fp32 accumulators, A from shared memory
// or from registers, B from shared memory, each shared operand described by a 64-bit matrix
// descriptor; wgmma.fence, commit_group and wait_group; fence.proxy.async. Under nvcc the
// instructions exist only in code compiled for sm_90a (CMake architecture "90a",
// __CUDA_ARCH_FEAT_SM90_ALL): elsewhere they trap, and a launcher checks available() first.
// Under the emulator (tests/cuda_emu, no __CUDACC__) they are warpgroup collectives following the
// PTX ISA to the element (tests/cuda_emu/emu_wgmma.h). Not a public header.
//
// A warpgroup is four consecutive warps (threads 128 w .. 128 w + 127) that issue each
// instruction together; it computes D (64 x N) = A (64 x 16) B (16 x N) (+ D).
// Registers (PTX ISA, "Register Fragments", warp v of the warpgroup, lane 4 g + t):
//   D, float d[N / 2]:  d[4 j + 2 h + e] = D(16 v + g + 8 h, 8 j + 2 t + e)
//   A, uint32_t a[4]:   a[h + 2 q] = A(16 v + g + 8 h, 2 t + 8 q .. + 1), the lower column in the
//                       low half: each warp's mma.sync m16n8k16 A fragment (mma.cuh), so a
//                       product's accumulators pack into the next product's A as on sm_80.
// Shared operands (PTX ISA, "Shared Memory Matrix Layout"), 16-bit elements, 128-byte swizzle,
// each tile starting at a multiple of 1024 bytes of the shared window:
//   K-major (A always; B unless trans): row r (of M or N) is 128 bytes of K (64 elements) at
//     r * 128; one product's 16 k are 32 bytes of it: step the descriptor's address by 32 bytes
//     a k-step. SBO 1024 (8 rows), LBO unused (16).
//   MN-major (B with kTransB: B stored k by n, n contiguous, as V is): row k is 128 bytes of N
//     (64 elements) at k * 128; N past 64 in further 64-column blocks LBO bytes apart; a k-step
//     is 16 rows: step the address by 2048. SBO 1024 (8 rows of k).
// Each 16-byte chunk c of a 128-byte row r sits at chunk c ^ (r % 8): swizzle128() maps a
// tile's byte offset to where it lies. Data stored by threads (not by TMA) must be fenced with
// fence_proxy_async() and a barrier before a wgmma reads it. Accumulators and A registers are
// the hardware's until the wgmma's group is waited for (wait<N>); before the first product of a
// batch, fence().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

#if defined(__CUDACC__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NAPKIN_WGMMA_PTX 1
#endif

namespace napkin::cuda::wgmma {

// Whether this device code has the instructions (sm_90a; always under the emulator).
__host__ __device__ constexpr bool compiled_in() {
#if defined(NAPKIN_WGMMA_PTX) || !defined(__CUDACC__)
    return true;
#else
    return false;
#endif
}

// Host side: empty when sm_90a code can run here, else why not. It needs a device, of compute
// capability 9.0 (the only one that runs sm_90a code) when `need_sm90`, and sm_90a code in this
// build, which `launch_flag(int* flag)` tells: it launches a one-thread kernel of the caller's
// that stores compiled_in() at flag (the launch written in the caller's .cu, which the emulator
// rewrites).
template <class LaunchFlag>
std::string unavailable(LaunchFlag launch_flag, bool need_sm90 = true) {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return "no CUDA device";
    }
    if (need_sm90 && (prop.major != 9 || prop.minor != 0))
        return "wgmma needs an sm_90 device; this one is sm_" + std::to_string(prop.major) +
               std::to_string(prop.minor);
    int* flag = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)) != cudaSuccess) {
        cudaGetLastError();
        return "cudaMalloc failed";
    }
    int compiled = 0;
    launch_flag(flag);
    const bool ok = cudaMemcpy(&compiled, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
    if (!ok) {
        cudaGetLastError();
        return "the sm_90a flag kernel failed";
    }
    return compiled == 1 ? std::string() : std::string("this build has no sm_90a code");
}

// A matrix descriptor's swizzle field.
enum class Swizzle : std::uint64_t { kNone = 0, k128 = 1, k64 = 2, k32 = 3 };

// The descriptor of a shared operand at shared address `address` (16-byte aligned, below
// 256 KiB), leading and stride byte offsets as the header describes, matrix base offset 0.
__host__ __device__ constexpr std::uint64_t descriptor(std::uint32_t address, std::uint32_t lbo,
                                                       std::uint32_t sbo, Swizzle swizzle) {
    return std::uint64_t{address >> 4 & 0x3fffu} | std::uint64_t{lbo >> 4 & 0x3fffu} << 16 |
           std::uint64_t{sbo >> 4 & 0x3fffu} << 32 | static_cast<std::uint64_t>(swizzle) << 62;
}

// Where byte `offset` of a 128-byte-swizzled tile lies (the tile at a multiple of 1024 bytes):
// the 16-byte chunk index XOR the row's index mod 8.
__host__ __device__ constexpr std::uint32_t swizzle128(std::uint32_t offset) {
    return offset ^ (offset >> 7 & 7u) << 4;
}

__device__ __forceinline__ void fence() {
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::wgmma_fence();
#endif
}

// Closes the warp's products issued since the last commit into one group.
__device__ __forceinline__ void commit() {
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::wgmma_commit();
#endif
}

// Waits until at most kPending of the warp's newest groups are in flight; the others' results
// are in their accumulators.
template <int kPending>
__device__ __forceinline__ void wait() {
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::wgmma_wait(kPending);
#endif
}

// Makes this thread's stores to shared memory visible to the async proxy (wgmma's reads).
__device__ __forceinline__ void fence_proxy_async() {
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::fence_proxy_async();
#endif
}

// setmaxnreg (sm_90a): the calling warpgroup's threads give registers back to the block's pool
// (release) or take them from it (claim), kRegs a thread from then on, a multiple of 8 in [24,
// 256]; every thread of the warpgroup executes it. A block of a producer and consumer
// warpgroups launched at R registers a thread may shift them so long as the total stays
// within the block's: FlashAttention-3's producer keeps few, its consumers many. ptxas allocates
// the code after it within kRegs. Nothing to model on the emulator.
template <int kRegs>
__device__ __forceinline__ void release_registers() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#elif defined(__CUDACC__)
    __trap();
#endif
}
template <int kRegs>
__device__ __forceinline__ void claim_registers() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
#if defined(NAPKIN_WGMMA_PTX)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#elif defined(__CUDACC__)
    __trap();
#endif
}

// The instructions' text, one macro per (A's source, N); TYPE is "bf16" or "f16".
// The 16 accumulators of an m64n32k16 product: %0 to %15.
#define NAPKIN_WGMMA_D32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define NAPKIN_WGMMA_OUT32(d)                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),         \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
        "+f"(d[14]), "+f"(d[15])
// A and B in shared memory: %16 desc-a, %17 desc-b, %18 scale-d, %19 imm-trans-b.
#define NAPKIN_WGMMA_SS32(TYPE)                                                          \
    asm volatile(                                                                        \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                     \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D32 \
        ", %16, %17, p, 1, 1, 0, %19;\n}\n"                                              \
        : NAPKIN_WGMMA_OUT32(d)                                                          \
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
// A in registers: %16 to %19 A, %20 desc-b, %21 scale-d, %22 imm-trans-b.
#define NAPKIN_WGMMA_RS32(TYPE)                                                                  \
    asm volatile(                                                                                \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                             \
        "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D32         \
        ", {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"                                        \
        : NAPKIN_WGMMA_OUT32(d)                                                                  \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), \
          "n"(kTransB ? 1 : 0))
// The 32 accumulators of an m64n64k16 product: %0 to %31.
#define NAPKIN_WGMMA_D64                                           \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "          \
    "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31}"
#define NAPKIN_WGMMA_OUT64(d)                                                                      \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
// A and B in shared memory: %32 desc-a, %33 desc-b, %34 scale-d, %35 imm-trans-b.
#define NAPKIN_WGMMA_SS64(TYPE)                                                          \
    asm volatile(                                                                        \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                     \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D64 \
        ", %32, %33, p, 1, 1, 0, %35;\n}\n"                                              \
        : NAPKIN_WGMMA_OUT64(d)                                                          \
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
// A in registers: %32 to %35 A, %36 desc-b, %37 scale-d, %38 imm-trans-b.
#define NAPKIN_WGMMA_RS64(TYPE)                                                                  \
    asm volatile(                                                                                \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                             \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D64         \
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                        \
        : NAPKIN_WGMMA_OUT64(d)                                                                  \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), \
          "n"(kTransB ? 1 : 0))
// The 64 accumulators of an m64n128k16 product: %0 to %63.
#define NAPKIN_WGMMA_D128                                          \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "          \
    "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, " \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63}"
#define NAPKIN_WGMMA_OUT128(d)                                                                     \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])
// A and B in shared memory: %64 desc-a, %65 desc-b, %66 scale-d, %67 imm-trans-b.
#define NAPKIN_WGMMA_SS128(TYPE)                                                           \
    asm volatile(                                                                          \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                       \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D128 \
        ", %64, %65, p, 1, 1, 0, %67;\n}\n"                                                \
        : NAPKIN_WGMMA_OUT128(d)                                                           \
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
// A in registers: %64 to %67 A, %68 desc-b, %69 scale-d, %70 imm-trans-b.
#define NAPKIN_WGMMA_RS128(TYPE)                                                                 \
    asm volatile(                                                                                \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                             \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " NAPKIN_WGMMA_D128       \
        ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                        \
        : NAPKIN_WGMMA_OUT128(d)                                                                 \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)), \
          "n"(kTransB ? 1 : 0))

// The N a product may have: 64 or 128, or 32 with a K-major B (an N-major B of 32 columns
// would fill half of a 128-byte swizzled row, a layout nothing here needs).
template <int N, bool kTransB>
constexpr bool valid_n() {
    return N == 64 || N == 128 || (N == 32 && !kTransB);
}

// d (64 x N) = A B (+ d with accumulate), A at descriptor a (K-major), B at descriptor b
// (N-major with kTransB, else K-major); D = __nv_bfloat16 or __half; N as valid_n.
template <class D, int N, bool kTransB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b,
                                       bool accumulate) {
    static_assert(std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, __half>);
    static_assert(valid_n<N, kTransB>());
#if defined(NAPKIN_WGMMA_PTX)
    constexpr bool kBf16 = std::is_same_v<D, __nv_bfloat16>;
    if constexpr (N == 32 && kBf16)
        NAPKIN_WGMMA_SS32("bf16");
    else if constexpr (N == 32)
        NAPKIN_WGMMA_SS32("f16");
    else if constexpr (N == 64 && kBf16)
        NAPKIN_WGMMA_SS64("bf16");
    else if constexpr (N == 64)
        NAPKIN_WGMMA_SS64("f16");
    else if constexpr (kBf16)
        NAPKIN_WGMMA_SS128("bf16");
    else
        NAPKIN_WGMMA_SS128("f16");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::wgmma_mma(std::is_same_v<D, __nv_bfloat16>, N, d, nullptr, a, b, kTransB,
                             accumulate);
#endif
}

// The same with A in registers (the layout in the header).
template <class D, int N, bool kTransB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const std::uint32_t (&a)[4],
                                       std::uint64_t b, bool accumulate) {
    static_assert(std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, __half>);
    static_assert(valid_n<N, kTransB>());
#if defined(NAPKIN_WGMMA_PTX)
    constexpr bool kBf16 = std::is_same_v<D, __nv_bfloat16>;
    if constexpr (N == 32 && kBf16)
        NAPKIN_WGMMA_RS32("bf16");
    else if constexpr (N == 32)
        NAPKIN_WGMMA_RS32("f16");
    else if constexpr (N == 64 && kBf16)
        NAPKIN_WGMMA_RS64("bf16");
    else if constexpr (N == 64)
        NAPKIN_WGMMA_RS64("f16");
    else if constexpr (kBf16)
        NAPKIN_WGMMA_RS128("bf16");
    else
        NAPKIN_WGMMA_RS128("f16");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::wgmma_mma(std::is_same_v<D, __nv_bfloat16>, N, d, a, 0, b, kTransB, accumulate);
#endif
}

}  // namespace napkin::cuda::wgmma
