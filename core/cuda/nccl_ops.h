// NCCL collectives for the data-parallel communicator (core/comm/comm_nccl.h), compiled into
// libnapkin_cuda.so and reached through the engine's table (core/cuda/cuda_engine_api.h), so
// that napkin itself never links NCCL. One rank per GPU. Buffers are device memory. Every
// collective only queues itself on `stream`; the communicator records an event after it and
// waits for that (core/cuda/cuda_events.h), polling nccl_async_error and its --comm-timeout
// meanwhile. In-place throughout: reduce-scatter leaves the sum of chunk `rank` in that chunk,
// and all-gather reads this rank's chunk from its place in the buffer (NCCL's in-place forms).
// Failures throw cuda::CudaError("NCCL error <code> (<text>) in <call> at <file>:<line>").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;

namespace napkin::cuda {

struct NcclComm;                               // ncclComm_t's struct, opaque here
inline constexpr std::size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// f32_max: fp32 reduced by maximum (nccl_all_reduce only); the others are summed.
enum class NcclType : std::uint8_t { f32, f16, bf16, f64, f32_max };

std::string nccl_version();                  // "NCCL 2.27.7"
void nccl_unique_id(unsigned char* id);      // kNcclIdBytes, made by rank 0 and broadcast
void nccl_set_device(int index);             // the rank's GPU (its local rank), before init
NcclComm* nccl_init(int world, int rank, const unsigned char* id);
void nccl_destroy(NcclComm* comm) noexcept;  // ncclCommDestroy
void nccl_abort(NcclComm* comm) noexcept;    // ncclCommAbort: unblocks pending collectives
// ncclCommGetAsyncError: null while the communicator is healthy (or an operation is in
// progress), else NCCL's text for the error (a peer gone, a network failure, ...).
const char* nccl_async_error(NcclComm* comm) noexcept;

// buf (count) summed over ranks (its maximum for NcclType::f32_max).
void nccl_all_reduce(NcclComm* comm, void* buf, std::uint64_t count, NcclType type, CUstream_st* stream);
// buf (world * shard): chunk `rank` becomes the sum over ranks of that chunk.
void nccl_reduce_scatter(NcclComm* comm, void* buf, std::uint64_t shard, NcclType type, int rank,
                         CUstream_st* stream);
// buf (world * shard), this rank's chunk at `rank`: afterwards every chunk.
void nccl_all_gather(NcclComm* comm, void* buf, std::uint64_t shard, NcclType type, int rank,
                     CUstream_st* stream);
void nccl_broadcast(NcclComm* comm, void* buf, std::uint64_t bytes, int root, CUstream_st* stream);

}  // namespace napkin::cuda
