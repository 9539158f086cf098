// Small kernels that exercise the emulator itself (tests/cuda_emu/emu_test.cpp): what it must
// compute like a GPU, and what it must refuse. Each launcher returns cudaGetLastError() after its
// launch; `out` and `in` are device pointers.
#pragma once

#include <cuda_runtime_api.h>

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

}  // namespace napkin::emu::selftest
