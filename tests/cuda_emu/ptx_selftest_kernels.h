// Small kernels that exercise the emulated PTX of kernels/cuda/mma.cuh (tests/cuda_emu/emu_ptx.h)
// for tests/cuda_emu/emu_ptx_test.cpp. Each launcher returns cudaGetLastError() after its
// launch; pointers are device memory; 16-bit matrices are passed as their bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace napkin::emu::selftest {

// One warp. Shared memory holds four 8 x 8 matrices of 16-bit values m * 64 + 8 i + j (matrix m,
// row i, column j), matrix after matrix; lane l gives the address of row l % 8 of matrix l / 8.
// out[4 l + m] = r[m] of lane l after ldmatrix_x4, out[128 + 4 l + m] after ldmatrix_x4_trans.
cudaError_t ldmatrix_fragments(std::uint32_t* out);

// One warp: d (16 x 8, fp32, row-major) = a (16 x 16, row-major) b + c (16 x 8, row-major), with b
// given as b^T (8 x 16, row-major: n by k), both through shared memory and ldmatrix_x4 as
// mma.cuh's header prescribes, c loaded into and d stored from the C fragments by the ISA's
// layout, bf16 or fp16.
cudaError_t mma_product(const std::uint16_t* a, const std::uint16_t* bt, const float* c, float* d,
                        bool bf16);

// One warp, bf16: e (16 x 16, fp32, row-major) = bf16(a x) y with a, x and y (16 x 16, row-major;
// x and y k by n, read with ldmatrix_x4_trans), the first product's C fragments packed straight
// into the second's A fragment (pack2), as the flash attention multiplies P by V.
cudaError_t mma_chain(const std::uint16_t* a, const std::uint16_t* x, const std::uint16_t* y,
                      float* e);

// 32 threads. Thread i writes 0x12345678 into its shared chunk i, copies in[4 i .. 4 i + 4)
// (16 bytes) over it with cp_async_16 (thread 31 with valid = false: zeros) and commits; out[i] =
// the chunk's first word read before cp_async_wait<0>, out[32 + i] after it.
cudaError_t cp_async_lands_at_wait(const std::uint32_t* in, std::uint32_t* out);

// One thread: group 1 copies in[0..4) to chunk 0, group 2 in[4..8) to chunk 1. out[0], out[1] =
// the chunks' first words after cp_async_wait<1>; out[2], out[3] after cp_async_wait<0>.
cudaError_t cp_async_groups(const std::uint32_t* in, std::uint32_t* out);

// 64 threads: thread i copies in[4 i ..] into chunk i, waits for it, and without a barrier reads
// chunk (i + 1) % 64, another thread's: out[i] = its first word.
cudaError_t cp_async_without_barrier(const std::uint32_t* in, std::uint32_t* out);

// One warp, 16 rows of 128 bytes of shared memory: lane l reads row l % 8 + 8 (l / 16), chunk
// l / 8 % 2, with the chunk swizzled (c ^ row % 8) or not.
cudaError_t ldmatrix_rows(bool swizzled);

// Named barriers (kernels/cuda/named_barrier.cuh): 96 threads, warp 2 a producer that fills a
// 64-int shared buffer `rounds` times (round r: in[64 r + i] + r), warps 0 and 1 consumers
// that copy each round to out[64 r ..]. Round r's hand-over: the producer arrives at barrier 1
// (full, 96 threads) after writing, the consumers bar.sync there; they arrive at barrier 2
// (empty, 96) when done reading, where the producer bar.syncs before the next round.
enum class Handoff {
    kBarriers,            // as above
    kNone,                // no barriers: the producer writes every round without waiting
    kArriveBeforeWrites,  // the producer arrives at full before it writes the round
};
cudaError_t named_handoff(const int* in, int* out, int rounds, Handoff how);

// Named barriers used wrongly, each in one block of 64 threads.
enum class NamedMisuse {
    kLeftOver,         // warp 0 arrives at barrier 3 (64 threads); no thread syncs there
    kNeverComplete,    // warp 0 bar.syncs barrier 3 counting 64 threads; warp 1 returns
    kCountsDisagree,   // warp 0 bar.syncs barrier 3 counting 64, warp 1 counting 32
    kBarrierZero,      // bar.sync 0, 64: __syncthreads's barrier
    kOddCount,         // bar.sync 3, 48: not whole warps
    kTwiceInARound,    // warp 0 arrives at barrier 3 (64 threads) twice: its own next round
    kPartOfAWarp,      // lanes 0-15 of both warps arrive at barrier 3 counting 32 threads
};
cudaError_t named_misuse(NamedMisuse how);

// Invalid uses, each in one block of 32 threads with 256 bytes of dynamic shared memory; `in`
// holds 8 words of device memory.
enum class PtxMisuse {
    kCpAsyncMisalignedDestination,  // shared address 8
    kCpAsyncHostSource,             // a host array as the source
    kLdmatrixPastTheEnd,            // a row at shared address 256
    kMmaInHalfAWarp,                // lanes 16..31 return first
    kLanesInDifferentCalls,         // even lanes ldmatrix, odd lanes ldmatrix .trans
};
cudaError_t ptx_misuse(const std::uint32_t* in, PtxMisuse how);

}  // namespace napkin::emu::selftest
