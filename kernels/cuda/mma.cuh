// The sm_80 tensor-core primitives in PTX, for kernels that keep matrix fragments in registers and
// so must know where each element sits (the flash attention of attention_fa2_*.cu): mma.sync
// m16n8k16 with bf16 or fp16 inputs and fp32 accumulators, ldmatrix (x4, and .trans), and cp.async
// 16-byte copies with their commit and wait. Under nvcc they are inline asm (sm_80 and later; the
// callers check the device's compute capability); under the emulator (tests/cuda_emu, compiled
// by the host compiler: no __CUDACC__) they are emulated warp collectives and per-thread copies
// following the PTX ISA to the element (tests/cuda_emu/emu_ptx.h, which the emulator's
// force-included cuda_emu.h brings in). Not a public header.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), for
// lane = 4 g + t (g = %laneid >> 2, t = %laneid % 4); a register holds two 16-bit elements, the
// lower column (or row, for B) in its low half:
//   A (16 x 16, row-major), uint32_t a[4]:  a[0] = A(g, 2t..2t+1)      a[1] = A(g + 8, 2t..2t+1)
//                                           a[2] = A(g, 2t+8..2t+9)    a[3] = A(g + 8, 2t+8..2t+9)
//   B (16 x 8, k by n), uint32_t b[2]:      b[0] = B(2t..2t+1, g)      b[1] = B(2t+8..2t+9, g)
//   C and D (16 x 8) fp32, float c[4]:      c[0..1] = C(g, 2t..2t+1)   c[2..3] = C(g + 8, 2t..2t+1)
// ldmatrix.m8n8.x4.b16: lanes 8 m .. 8 m + 7 give the shared-memory addresses of rows 0..7 of the
// 8 x 8 matrix m (16 bytes each, 16-byte aligned); register r[m] of lane 4 g + t receives
// M_m(g, 2t..2t+1), or with .trans (M_m(2t, g), M_m(2t + 1, g)). Consequences the kernels use:
//   - a row-major 16 x 16 tile read by ldmatrix.x4 with lane l addressing row l % 16 at column
//     8 (l / 16) is an A fragment;
//   - rows n0..n0+15 of a row-major X (n by k) read with lane l addressing row
//     n0 + l % 8 + 8 (l / 16) at column k0 + 8 (l / 8 % 2) are the B fragments of X^T for the
//     n-tiles n0 and n0 + 8 (r[0..1] and r[2..3]);
//   - rows k0..k0+15 of a row-major X (k by n) read with .trans, lane l addressing row
//     k0 + l % 8 + 8 (l / 8 % 2) at column n0 + 8 (l / 16), are the B fragments of X for n0 and
//     n0 + 8;
//   - the C fragments of n-tiles 2 k and 2 k + 1, packed to 16 bits, are the A fragment of k-step
//     k: a product's result feeds the next product without leaving the registers
//     (FlashAttention-2's P).
// cp.async.cg.shared.global [dst], [src], 16, src_size: 16 bytes from global to shared memory,
// asynchronously, the bytes past src_size zero-filled (src_size 0 reads nothing); copies join a
// group at cp.async.commit_group, and cp.async.wait_group N returns once at most the N newest of
// the thread's groups are pending. Only the issuing thread's copies are waited for: a barrier
// after the wait makes them visible to the block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace napkin::cuda {

// Two floats rounded to nearest even into one register of two 16-bit D elements, lo in the low
// half.
template <class D>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
    static_assert(std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, __half>);
    std::uint32_t l, h;
    if constexpr (std::is_same_v<D, __nv_bfloat16>) {
        l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
        h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    } else {
        l = __half_as_ushort(__float2half_rn(lo));
        h = __half_as_ushort(__float2half_rn(hi));
    }
    return l | h << 16;
}

// c (16 x 8) += a (16 x 16) b (16 x 8), fp32 accumulation, D = __nv_bfloat16 or __half.
template <class D>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2]) {
    static_assert(std::is_same_v<D, __nv_bfloat16> || std::is_same_v<D, __half>);
#if defined(__CUDACC__)
#if __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<D, __nv_bfloat16>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
#else
    __trap();  // sm_80 and later only: the launchers check the device first
#endif
#else
    ::napkin::emu::mma_m16n8k16(std::is_same_v<D, __nv_bfloat16>, c, a, b);
#endif
}

// The shared-memory address (a 32-bit offset in the shared window) of a generic pointer into the
// block's dynamic shared memory: what ldmatrix and cp.async take. Kernels keep their tiles' bases
// as such addresses, so that every row and chunk they address is 32-bit arithmetic.
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
#if defined(__CUDACC__)
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
#else
    return ::napkin::emu::shared_address(p);
#endif
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (see the header for who addresses
// which row and who receives what), each transposed with kTrans; `row` is this lane's row, a
// shared address.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row) {
#if defined(__CUDACC__)
#if __CUDA_ARCH__ >= 800
    if constexpr (kTrans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(row));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(row));
#else
    __trap();
#endif
#else
    ::napkin::emu::ldmatrix_x4(r, row, kTrans);
#endif
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row) {
    ldmatrix_x4<false>(r, row);
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t row) {
    ldmatrix_x4<true>(r, row);
}

// 16 bytes from global `src` to the shared address `dst` (both 16-byte aligned),
// asynchronously; with `valid` false, 16 zero bytes instead and src is not read (rows past the
// sequence's end).
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
#if defined(__CUDACC__)
#if __CUDA_ARCH__ >= 800
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
#else
    __trap();
#endif
#else
    ::napkin::emu::cp_async_16(dst, src, valid ? 16 : 0);
#endif
}

// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDACC__)
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
#else
    ::napkin::emu::cp_async_commit();
#endif
}

// Waits until at most kPending of the thread's newest groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDACC__)
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
#else
    ::napkin::emu::cp_async_wait(kPending);
#endif
}

}  // namespace napkin::cuda
