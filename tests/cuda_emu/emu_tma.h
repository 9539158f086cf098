// Hopper's tensor memory accelerator (TMA) and the shared-memory barriers it signals, as
// kernels/cuda/tma.cuh uses them, on the emulator: mbarrier.init, mbarrier.arrive (with
// expect_tx), mbarrier.try_wait.parity in a loop, cp.async.bulk.tensor (tiled, 1 to 5
// dimensions, global to shared, completing on an mbarrier) and cuTensorMapEncodeTiled, which
// builds the tensor map it reads. tma.cuh calls these where the host compiler builds it (no
// __CUDACC__); cuda_emu.h includes this header.
//
// What they hold a kernel to, beyond computing what the hardware computes:
// - An mbarrier is 8 bytes of the launch's dynamic shared memory, 8-byte aligned, set up by
//   mbarrier.init (its arrival count) before anything else uses it. A phase completes when its
//   arrivals are all in and its transaction count is back at zero; the next phase then counts
//   from the init's count again. A wait on parity p returns once the phase of that parity has
//   completed (at once when the barrier is in the phase after it); the waiting thread lets the
//   others run meanwhile, and one that waits for 200000 of the scheduler's rounds fails the
//   launch (a barrier nobody completes). More arrivals than a phase's count, a use before the
//   init, and copies that bring more bytes than expect_tx announced fail it too.
// - A tensor copy poisons its box in shared memory (0xff bytes: NaN in any float type) at the
//   issue and writes the data (read at the issue; zeros where the box lies outside the tensor, as
//   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE says) only when a thread waits on its barrier and the
//   phase can complete: so a thread that reads the box without the wait, or a copy issued into a
//   stage that wgmma still reads, shows. Shared offsets: the box is laid out densely (inner
//   dimension first) from the destination, then swizzled as the map says (address bits [4, 4 +
//   b) ^= bits [7, 7 + b) for 32-, 64- and 128-byte swizzle: b = 1, 2, 3), so the destination
//   must be aligned to the swizzle's repeat (256, 512 or 1024 bytes; 128 without swizzle).
// - cuTensorMapEncodeTiled refuses (CUDA_ERROR_INVALID_VALUE) what the driver documents as
//   invalid: a rank outside 1..5, a global address not 16-byte aligned, a dimension of 0 or past
//   2^32, a stride not a multiple of 16 or past 2^40, a box dimension outside 1..256, an inner
//   box not a multiple of 16 bytes or wider than the swizzle, element strides outside 1..8. It
//   supports what napkin's kernels use (CUDA_ERROR_NOT_SUPPORTED otherwise): no interleave,
//   element strides 1.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace napkin::emu {

void mbarrier_init(std::uint32_t bar, std::uint32_t count);
// mbarrier.arrive.expect_tx (tx_bytes > 0) or mbarrier.arrive (0) by the calling thread.
void mbarrier_arrive(std::uint32_t bar, std::uint32_t tx_bytes);
// Returns once the phase of parity `parity` has completed.
void mbarrier_wait(std::uint32_t bar, std::uint32_t parity);

// cp.async.bulk.tensor.<rank>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// [dst], [map, {coords}], [bar].
void tma_load(std::uint32_t dst, const CUtensorMap* map, const int* coords, int rank,
              std::uint32_t bar);

// The driver's cuTensorMapEncodeTiled (cudaGetDriverEntryPointByVersion hands it out here).
CUresult tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                 void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                                 const cuuint32_t* box, const cuuint32_t* element_strides,
                                 CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob);

}  // namespace napkin::emu
