// The PTX instructions of kernels/cuda/mma.cuh on the emulator: mma.sync m16n8k16 (bf16 or fp16 in,
// fp32 accumulate), ldmatrix.m8n8.x4 (with .trans) and cp.async 16-byte copies with
// commit_group and wait_group. mma.cuh calls these where the host compiler builds it (no
// __CUDACC__); cuda_emu.h, force-included into every emulated kernel, includes this header.
//
// What they hold a kernel to, beyond computing what the hardware computes:
// - mma and ldmatrix are warp collectives (napkin::emu::warp_collective): all 32 lanes of a full
//   warp in the same call (the same instruction and type), else the launch fails. Each lane's
//   registers are read and written exactly where the PTX ISA's fragment layouts put them
//   (mma.cuh's header lists them), so a kernel that assumes another layout gets wrong answers.
//   mma: D = A B + C with every product exact and the sum over k in fp32, in order.
// - Shared addresses are offsets into the launch's dynamic shared memory (the one shared memory
//   the emulator can tell from host memory); shared_address refuses a pointer outside it.
// - ldmatrix: every lane's row address 16-byte aligned and inside the dynamic shared memory, else
//   the launch fails. Each of the four 8-row phases whose 8 distinct rows do not fall in 8
//   different 16-byte groups of banks is a bank conflict, counted (ldmatrix_bank_conflicts) for the
//   tests that hold a kernel's swizzle to being conflict-free; the hardware serializes such a
//   phase.
// - cp.async: the destination is poisoned (0xff bytes: NaN in any float type) at the issue and
//   receives the source's 16 bytes (read at the issue; zeros past src_bytes) only when the
//   issuing thread's cp.async.wait_group retires its group. So a thread that reads the
//   destination before the wait, or before the barrier after the other threads' waits (the
//   emulator's shuffled schedule runs those readers before and after the writers), or a copy
//   issued into a buffer that other threads still read, sees NaN. Uncommitted copies are never
//   waited for (as in PTX); a block's copies still pending at its end are dropped. dst must lie
//   16-byte aligned in the dynamic shared memory, src (when read) in device memory, 16-byte
//   aligned, else the launch fails with a message.
#pragma once

#include <cstddef>
#include <cstdint>

namespace napkin::emu {

// c += a b for one warp (all 32 lanes call), fragments as mma.cuh describes them; bf16 or fp16.
void mma_m16n8k16(bool bf16, float (&c)[4], const std::uint32_t (&a)[4],
                  const std::uint32_t (&b)[2]);

// A shared-memory address: here, the offset of `p` into the launch's dynamic shared memory (the
// launch fails when p lies outside it).
std::uint32_t shared_address(const void* p);

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for one warp; `row` is this lane's address.
void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row, bool trans);

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (0 to 16) for the calling thread.
void cp_async_16(std::uint32_t dst, const void* src, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);

// fence.proxy.async.shared::cta by the calling thread: the cp.async data that landed at its waits
// is ordered before the async proxy's reads (wgmma's). cp.async writes through the generic
// proxy, so until its issuing thread fences, a wgmma that reads those bytes fails the launch
// (emu_wgmma.h); a TMA copy landing there writes through the async proxy and clears that.
void fence_proxy_async();
// The thread (linear rank + 1) whose cp.async landed the 16 bytes at shared offset `at` and has
// not fenced since, or 0.
std::uint32_t unfenced_cp_async_writer(std::uint32_t at);
// [at, at + bytes) written by the async proxy (a TMA copy landing).
void async_proxy_wrote(std::uint32_t at, std::size_t bytes);

// ldmatrix phases (8 rows of one matrix) that hit some bank twice, since the process started.
std::uint64_t ldmatrix_bank_conflicts();

}  // namespace napkin::emu
