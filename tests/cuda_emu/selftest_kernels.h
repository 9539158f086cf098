// Small kernels that exercise the emulator itself (tests/cuda_emu/emu_test.cpp): what it must
// compute like a GPU, and what it must refuse. Each launcher returns cudaGetLastError() after its
// launch; `out` and `in` are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace napkin::emu::selftest {

// out[b] = sum of in[b * threads .. (b + 1) * threads) by a shared-memory tree with
// __syncthreads; the block is (x, y) = (threads / 4, 4), so threadIdx.y counts too.
cudaError_t block_sum(const int* in, int* out, int blocks, int threads);

// The same tree with the barriers left out: racy, so an emulator that shuffles its threads
// gets it wrong (a GPU usually does too).
cudaError_t block_sum_without_barriers(const int* in, int* out, int blocks, int threads);

// One warp of 32, lane l holding l + 1; out[0..32) then holds per lane, in order:
// xor-butterfly sum, shfl_down by 1 (width 32), shfl_up by 2, lane 3's value in each group of 8
// (width 8), and out[128..] ballot of odd lanes, any(lane == 31), all(lane < 31),
// __syncthreads_count(lane even).
cudaError_t warp_ops(int* out);

// Per element i of n (one thread each): out[2 i] = __fmul_rn(a[i], b[i]) + c[i] (the product
// rounded on its own, never fused with the add) and out[2 i + 1] = __fdiv_rn(a[i], b[i]).
cudaError_t rounded_arithmetic(const float* a, const float* b, const float* c, float* out, int n);

// Threads with x >= 16 return; the others then wait in __syncthreads, which they never leave.
cudaError_t barrier_after_return();

// Lane 31 waits in __syncthreads while the rest of the warp wait in a shuffle naming it.
cudaError_t deadlock();

// Lanes 0..15 (mask 0xffff) read lane 20's value.
cudaError_t shuffle_outside_mask(int* out);

// A block of `threads` threads, `smem` bytes of dynamic shared memory; with `optin`, the
// kernel first asks cudaFuncSetAttribute for that much. out[0] = the last byte of it, written.
cudaError_t dynamic_shared(int* out, int threads, int smem, bool optin);

// out[0] = in[n]: one element past the end of an n-element allocation.
cudaError_t read_past_end(const int* in, int n, int* out);

// Per element i of n, on `stream`: data[i] = 2 data[i] + k. Order matters (2 (2x + a) + b is
// not 2 (2x + b) + a), so a test sees whether queued launches ran, and in which order.
cudaError_t double_add(int* data, int n, int k, cudaStream_t stream);

// ---- WMMA (tests/cuda_emu/emu_wmma.h); 16-bit matrices are passed as their bits ----

// One warp: d (16, 16) = 2 (a b + c) through wmma: a, b and c loaded (a, b as __half or
// __nv_bfloat16), mma_sync in place into c's fragment, every element doubled through x[] (the
// uniform element-wise access CUDA allows), stored to d. Each matrix is row- or column-major
// with its own leading dimension (elements).
struct WmmaProduct {
    bool half = false;  // else bf16
    bool a_col = false, b_col = false, c_col = false, d_col = false;
    unsigned lda = 16, ldb = 16, ldc = 16, ldd = 16;
};
cudaError_t wmma_product(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d,
                         const WmmaProduct& p);

// One warp loads m (16, 16) into a row-major __half matrix_a fragment and a float accumulator
// (from mf, the same values as floats) and writes what each lane holds: out[lane * 16 + i] =
// a.x[i] (16 per lane), out[512 + lane * 8 + i] = acc.x[i] (8 per lane).
cudaError_t wmma_fragment_contents(const std::uint16_t* m, const float* mf, float* out);

// d (16, 16) = a b (bf16, row-major, ld 16) computed with wmma, but written from x[] as if the
// accumulator's elements sat where sm_80's mma.m16n8k16 puts them: a kernel relying on a
// mapping CUDA leaves unspecified.
cudaError_t wmma_fixed_mapping(const std::uint16_t* a, const std::uint16_t* b, float* d);

// Invalid WMMA calls, each loading from m (16, 16 __half, ld 16) in one block.
enum class WmmaMisuse {
    kHalfWarp,        // lanes 16..31 return instead of calling
    kOddLdm,          // ldm 17
    kMisaligned,      // m + 8: 16-byte aligned only
    kLanesDisagree,   // odd lanes pass m + 16 * 16
    kSmallBlock,      // a block of 16 threads
    kDifferentCalls,  // odd lanes load matrix_b, even lanes matrix_a
};
cudaError_t wmma_misuse(const std::uint16_t* m, WmmaMisuse how);

}  // namespace napkin::emu::selftest
