// Named barriers (PTX ISA "bar, barrier": bar.sync and bar.arrive with a barrier id and a thread
// count), for blocks whose warps take different roles: a producer warp that fills shared-memory
// stages and consumer warpgroups that read them (attention_wgmma_forward.cuh's warp-specialized
// forward). Barrier 0 is __syncthreads's; ids 1 to 15 are the kernel's. A barrier completes when
// `threads` threads (a multiple of 32, whole warps) have arrived, by bar_sync (which waits for
// the completion) or bar_arrive (which does not), and then counts from zero again: a kernel must
// not let a thread arrive for the barrier's next round before its current round completes.
// Memory written before a thread's arrival is visible to the threads that wait for that round.
// Under the emulator (tests/cuda_emu) they are napkin::emu::named_barrier, which fails the launch
// on a count that changes mid-round, a thread arriving twice in a round, a round completed by
// part of a warp and arrivals left when the block ends. Not a public header.
#pragma once

namespace napkin::cuda {

__device__ __forceinline__ void bar_sync(int id, int threads) {
#if defined(__CUDACC__)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
    ::napkin::emu::named_barrier(id, threads, true, "bar.sync");
#endif
}

__device__ __forceinline__ void bar_arrive(int id, int threads) {
#if defined(__CUDACC__)
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
    ::napkin::emu::named_barrier(id, threads, false, "bar.arrive");
#endif
}

}  // namespace napkin::cuda
