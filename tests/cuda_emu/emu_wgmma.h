// The warpgroup-level PTX of kernels/cuda/wgmma.cuh (sm_90a) on the emulator: wgmma.mma_async
// m64nNk16 (bf16 or fp16 in, fp32 accumulate; A from shared memory or registers, B from shared
// memory, each through a matrix descriptor), wgmma.fence, wgmma.commit_group and
// wgmma.wait_group. wgmma.cuh calls these where the host compiler builds it (no __CUDACC__);
// cuda_emu.h includes this header.
//
// What they hold a kernel to, beyond computing what the hardware computes:
// - A warpgroup is four consecutive warps of the block (linear thread rank / 128); the block's
//   threads must be whole warpgroups. Every call is a warp collective (all 32 lanes, the same
//   call and arguments), and an mma joins the warpgroup's other three warps' mma of the same
//   rank: the product runs once all four have issued it, with the same descriptors, shape and
//   flags (else the launch fails).
// - Asynchrony: at issue the lane's accumulators are poisoned (NaN) and receive the product only
//   when the warp's wgmma.wait_group retires its group, so a kernel that reads them before the
//   wait sees NaN. Products into the same accumulators chain without a wait, as on the hardware
//   (each takes the previous one's result as its C). A wait whose products are not yet
//   complete, because another warp of the warpgroup has not issued its part, lets the other
//   warps run; if they never do, the launch fails.
// - wgmma.fence: the first mma after the warp's start or its last wait_group needs one since
//   (the accumulator and A registers were free to change there), else the launch fails.
// - Shared memory: the descriptors are decoded as the PTX ISA's canonical layouts ("Shared Memory
//   Matrix Layout": K-major, or MN-major with imm-trans-b; no swizzle, or 32/64/128-byte
//   swizzle, which XORs address bits [4, 4 + b) with bits [7, 7 + b)), every element inside the
//   launch's dynamic shared memory; the matrix base offset must be 0. The bytes an mma read must
//   be unchanged when its group is waited for: a kernel that overwrites a tile in flight fails.
// - fence.proxy.async: bytes a cp.async landed (emu_ptx.h) may be read by an mma only after the
//   thread that issued the copy has fenced (wgmma.cuh's fence_proxy_async) since its wait, else
//   the launch fails naming the thread: cp.async writes through the generic proxy, wgmma reads
//   through the async proxy. TMA copies land through the async proxy and need none.
// Not modelled: plain stores to shared memory without the fence (the emulator does not see
// them; the same rule holds for them on the hardware), changes to the A registers of a
// register-sourced mma before its wait.
#pragma once

#include <cstdint>

namespace napkin::emu {

// One lane's part of wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<bf16|f16>: d holds n / 2
// accumulators; `a` is A's four registers, or nullptr with A in shared memory at desc_a (K-major).
// B is at desc_b, N-major when trans_b. scale_d false: d = A B, true: d = A B + d.
void wgmma_mma(bool bf16, int n, float* d, const std::uint32_t* a, std::uint64_t desc_a,
               std::uint64_t desc_b, bool trans_b, bool scale_d);
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int pending);

}  // namespace napkin::emu
