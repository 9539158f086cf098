// A kernel that multiplies through kernels/cuda/wgmma.cuh alone, and one that copies a tile
// through kernels/cuda/tma.cuh alone, for tests/kernels_cuda/wgmma_test.cpp: on an sm_90 GPU they
// hold the headers' descriptors, swizzle, register layouts and tensor maps to the hardware, on
// the emulator (tests/cuda_emu/emu_wgmma.h, emu_tma.h) the emulator to the same results.
// Built by nvcc for the gpu tests (sm_90a among the architectures when 90 is) and rewritten for
// the emulator; never part of the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace napkin::cuda::probe {

// Empty when wgmma_product can run here (the emulator, or an sm_90 device with sm_90a code),
// else why not.
std::string wgmma_unavailable();

// Whether this build is the emulator's.
bool wgmma_emulated();

// What the kernel does wrong on purpose, for the emulator's checks (a GPU's result is undefined).
enum class WgmmaMisuse {
    kNone,
    kNoFence,            // no wgmma.fence before the first product
    kNoWait,             // reads the accumulators without wgmma.wait_group
    kOverwriteInFlight,  // stores into A's tile between the commit and the wait
    kOneWarpIssues,      // warps 1 to 3 of the warpgroup skip the products; warp 0 waits
    kPastTheEnd,         // B's descriptor 64 KiB on, past the dynamic shared memory
    kNoProxyFence,       // A staged by cp.async, no fence.proxy.async before the products
};

struct WgmmaCase {
    bool bf16 = true;          // else fp16
    int n = 64;                // 32 (K-major B only), 64 or 128
    bool b_n_major = false;    // B stored k by n (N-major, imm-trans-b), else n by k (K-major)
    bool a_registers = false;  // A from registers, else from shared memory
    bool accumulate = false;   // d = A B + c, else A B
    int warpgroups = 1;        // blocks of 128 threads, each its own 64 rows of A and D
    int threads = 0;           // the block's threads when not 128 warpgroups (a misuse)
    bool cp_async = false;     // A staged by cp.async (then fenced), not by plain stores
    WgmmaMisuse misuse = WgmmaMisuse::kNone;
};

// d (64 W x n, fp32, row-major) = a (64 W x 64, row-major) b (+ c), K = 64 in four k-steps of
// one group, W warpgroups in one block; b as the case stores it (n x 64 or 64 x n, row-major);
// 16-bit matrices as their bits; device pointers. Returns the launch's error after a synchronize,
// its message in *failure (on the emulator, which then clears the error for the next case).
cudaError_t wgmma_product(const WgmmaCase& c, const std::uint16_t* a, const std::uint16_t* b,
                          const float* c_in, float* d, std::string* failure = nullptr);

// A TMA copy through kernels/cuda/tma.cuh (its mbarrier and its 3-d tensor map, 128-byte
// swizzle): what the kernel does wrong on purpose, for the emulator (a GPU's result is undefined
// or a hang).
enum class TmaMisuse {
    kNone,
    kNoWait,       // reads the tile after a __syncthreads instead of the mbarrier's wait
    kShortExpect,  // announces 16 bytes fewer than the copy brings
    kNoArrive,     // issues the copy but never arrives: the phase never completes
    kUnaligned,    // the destination 512 bytes past a multiple of 1024
};

struct TmaCase {
    int rows = 64;  // the box's rows (1 to 256); its columns are 64 (128 bytes)
    int row0 = 0;   // the box's first row (rows past the tensor's end arrive as zeros)
    int col0 = 0;   // its first column
    int batch = 0;  // its index in the outer dimension
    TmaMisuse misuse = TmaMisuse::kNone;
};

// One block copies the box of `tensor` (batches x rows x cols 16-bit elements, row-major, device
// memory; cols a multiple of 8) at the case's coordinates into shared memory by TMA and writes
// the shared tile's bytes as they lie (rows x 64 elements, swizzled) to `tile` (device memory).
// Returns the launch's error after a synchronize, its message in *failure.
cudaError_t tma_tile(const TmaCase& c, const std::uint16_t* tensor, int batches, int rows, int cols,
                     std::uint16_t* tile, std::string* failure = nullptr);

}  // namespace napkin::cuda::probe
