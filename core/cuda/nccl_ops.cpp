// NCCL calls behind core/cuda/nccl_ops.h, in libnapkin_cuda.so. Every call is checked through
// the one failure point of core/cuda/cuda_check.h.
#include "core/cuda/nccl_ops.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "core/cuda/cuda_check.h"

namespace napkin::cuda {

// NCCL's status for NAPKIN_GPU_CHECK (cuda_check.h keeps one overload per library).
inline bool status_ok(ncclResult_t s) {
    return s == ncclSuccess;
}
inline const char* status_library(ncclResult_t) {
    return "NCCL";
}
inline const char* status_text(ncclResult_t s) {
    return ncclGetErrorString(s);
}

namespace {

static_assert(kNcclIdBytes == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId changed size");

ncclComm_t handle(NcclComm* c) {
    return reinterpret_cast<ncclComm_t>(c);
}

ncclDataType_t nccl_type(NcclType t) {
    switch (t) {
        case NcclType::f32:
        case NcclType::f32_max: return ncclFloat32;
        case NcclType::f16: return ncclFloat16;
        case NcclType::bf16: return ncclBfloat16;
        case NcclType::f64: return ncclFloat64;
    }
    NAPKIN_CUDA_REQUIRE(false, "unknown NcclType " << static_cast<int>(t));
    return ncclFloat32;
}

std::size_t type_bytes(NcclType t) {
    return t == NcclType::f64 ? 8 : t == NcclType::f32 || t == NcclType::f32_max ? 4 : 2;
}

}  // namespace

std::string nccl_version() {
    int v = 0;
    NAPKIN_GPU_CHECK(ncclGetVersion(&v));
    // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void nccl_unique_id(unsigned char* id) {
    ncclUniqueId u;
    NAPKIN_GPU_CHECK(ncclGetUniqueId(&u));
    std::memcpy(id, u.internal, kNcclIdBytes);
}

void nccl_set_device(int index) {
    NAPKIN_CUDA_CHECK(cudaSetDevice(index));
}

NcclComm* nccl_init(int world, int rank, const unsigned char* id) {
    ncclUniqueId u;
    std::memcpy(u.internal, id, kNcclIdBytes);
    ncclComm_t c = nullptr;
    NAPKIN_GPU_CHECK(ncclCommInitRank(&c, world, u, rank));
    return reinterpret_cast<NcclComm*>(c);
}

void nccl_destroy(NcclComm* comm) noexcept {
    if (comm != nullptr) ncclCommDestroy(handle(comm));
}

void nccl_abort(NcclComm* comm) noexcept {
    if (comm != nullptr) ncclCommAbort(handle(comm));
}

const char* nccl_async_error(NcclComm* comm) noexcept {
    if (comm == nullptr) return nullptr;
    ncclResult_t r = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(handle(comm), &r);
    if (q != ncclSuccess) return ncclGetErrorString(q);
    return r == ncclSuccess || r == ncclInProgress ? nullptr : ncclGetErrorString(r);
}

void nccl_all_reduce(NcclComm* comm, void* buf, std::uint64_t count, NcclType type, CUstream_st* stream) {
    const ncclRedOp_t op = type == NcclType::f32_max ? ncclMax : ncclSum;
    NAPKIN_GPU_CHECK(ncclAllReduce(buf, buf, count, nccl_type(type), op, handle(comm), stream));
}

void nccl_reduce_scatter(NcclComm* comm, void* buf, std::uint64_t shard, NcclType type, int rank,
                         CUstream_st* stream) {
    void* chunk = static_cast<char*>(buf) + static_cast<std::size_t>(rank) * shard * type_bytes(type);
    NAPKIN_GPU_CHECK(ncclReduceScatter(buf, chunk, shard, nccl_type(type), ncclSum, handle(comm), stream));
}

void nccl_all_gather(NcclComm* comm, void* buf, std::uint64_t shard, NcclType type, int rank,
                     CUstream_st* stream) {
    const void* chunk = static_cast<const char*>(buf) + static_cast<std::size_t>(rank) * shard * type_bytes(type);
    NAPKIN_GPU_CHECK(ncclAllGather(chunk, buf, shard, nccl_type(type), handle(comm), stream));
}

void nccl_broadcast(NcclComm* comm, void* buf, std::uint64_t bytes, int root, CUstream_st* stream) {
    NAPKIN_GPU_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, handle(comm), stream));
}

}  // namespace napkin::cuda
