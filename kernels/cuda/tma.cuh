// Hopper's tensor memory accelerator (TMA) in PTX (sm_90), for kernels whose loads one thread
// issues a tile at a time (docs/CUDA.md "TMA"): cp.async.bulk.tensor copies a box of a tensor
// in global memory, described by a tensor map the host encodes, into shared memory, swizzled as
// the map says, and signals an mbarrier in shared memory with the bytes it brought. Whoever
// waits on the barrier (mbarrier.try_wait.parity) sees the whole box; no thread of the block
// spends registers or instructions on addresses, and rows past the tensor's end arrive as zeros.
// Under nvcc the instructions exist in code compiled for sm_90 and later (elsewhere they trap:
// their kernels' launchers check for sm_90a first, as wgmma's do); under the emulator
// (tests/cuda_emu, no __CUDACC__) they follow the PTX ISA's rules to the byte
// (tests/cuda_emu/emu_tma.h). Not a public header.
//
// An mbarrier (8 bytes of shared memory, 8-byte aligned) counts a phase's arrivals and bytes:
// init(count) once, before anything uses it (then fence_init() and a __syncthreads), then per
// phase `count` arrivals, each with the bytes it expects (arrive_expect_tx), and the copies that
// bring those bytes; the phase completes when both are in, and the next counts from `count`
// again. wait(bar, parity) returns once the phase of that parity has completed: phase x of a
// barrier reused every kStages items is waited for with parity (x / kStages) % 2.
// With a 128-byte swizzle the destination is a multiple of 1024 bytes of the shared window and the
// box's inner dimension 128 bytes: 16-byte chunk c of the box's row r lands at chunk c ^ (r % 8)
// of its 128-byte row, the layout wgmma.cuh's descriptors read (SwTile in
// attention_wgmma_forward.cuh).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define NAPKIN_TMA_PTX 1
#endif

namespace napkin::cuda::tma {

__device__ __forceinline__ void init(std::uint32_t bar, std::uint32_t count) {
#if defined(NAPKIN_TMA_PTX)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::mbarrier_init(bar, count);
#endif
}

// After the inits, before the __syncthreads that lets other threads (and the copies) use them.
__device__ __forceinline__ void fence_init() {
#if defined(NAPKIN_TMA_PTX)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival at `bar`, announcing `bytes` that copies on it will bring in this phase.
__device__ __forceinline__ void arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
#if defined(NAPKIN_TMA_PTX)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::mbarrier_arrive(bar, bytes);
#endif
}

// Returns once the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void wait(std::uint32_t bar, std::uint32_t parity) {
#if defined(NAPKIN_TMA_PTX)
    std::uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (done == 0);
#elif defined(__CUDACC__)
    __trap();
#else
    ::napkin::emu::mbarrier_wait(bar, parity);
#endif
}

// The box of `map` at coordinates (c0, c1, c2), inner dimension first, into shared memory at
// `dst`, its bytes counted on `bar`.
__device__ __forceinline__ void load_3d(std::uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                        int c2, std::uint32_t bar) {
#if defined(NAPKIN_TMA_PTX)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
#elif defined(__CUDACC__)
    __trap();
#else
    const int coords[3] = {c0, c1, c2};
    ::napkin::emu::tma_load(dst, map, coords, 3, bar);
#endif
}

// Host side: a tensor map of `type` elements, 3 dimensions (inner first, `dims` elements each,
// dimension d + 1 `strides[d]` bytes apart), boxes of `box` elements, `swizzle`, zeros outside
// the tensor. Returns why not (the driver lacks the function, or refused the shape), or an empty
// string. The driver's cuTensorMapEncodeTiled is fetched through the runtime, so no binary links
// libcuda.
inline std::string encode_3d(CUtensorMap* map, CUtensorMapDataType type, const void* base,
                             const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                             const cuuint32_t (&box)[3], CUtensorMapSwizzle swizzle) {
    static const auto encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            fn = nullptr;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }();
    if (encode == nullptr) return "the driver has no cuTensorMapEncodeTiled (CUDA 12 or later)";
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r =
        encode(map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return "cuTensorMapEncodeTiled refused the map (CUresult " + std::to_string(r) + ")";
    return {};
}

// The 16-bit, 128-byte-swizzled map wgmma's tiles take (bf16, else fp16).
inline std::string encode_16bit_3d(CUtensorMap* map, bool bf16, const void* base,
                                   const cuuint64_t (&dims)[3], const cuuint64_t (&strides)[2],
                                   const cuuint32_t (&box)[3]) {
    return encode_3d(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                     base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace napkin::cuda::tma
