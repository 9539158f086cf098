// NCCL on the emulator, for one rank: a communicator of world size 1, whose collectives are
// copies (the sum, gather or scatter over one rank is the rank's own data). Enough for the
// engine's ZeRO stages at world size 1 (tests/engine_cuda/zero_cuda_test.cpp); more ranks are
// refused, since the emulator has one process and one device. Buffers must be device memory.
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "tests/cuda_emu/emu_state.h"

namespace {

struct Comm {};  // one rank: nothing to hold

std::size_t type_bytes(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2:
            return 1;
        case ncclFloat16:
        case ncclBfloat16:
            return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32:
            return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64:
            return 8;
        default:
            return 0;
    }
}

ncclResult_t refuse(ncclResult_t r, const std::string& why) {
    std::fprintf(stderr, "napkin cuda-emu: NCCL: %s\n", why.c_str());
    return r;
}

// recv = send over one rank, both `count` elements of `t` in device memory.
ncclResult_t copy(const char* op, const void* send, void* recv, std::size_t count, ncclDataType_t t,
                  ncclComm_t comm) {
    if (comm == nullptr)
        return refuse(ncclInvalidArgument, std::string(op) + " on a null communicator");
    const std::size_t bytes = count * type_bytes(t);
    if (type_bytes(t) == 0)
        return refuse(ncclInvalidArgument, std::string(op) + ": unknown data type");
    if (bytes == 0) return ncclSuccess;
    if (!napkin::emu::is_device_memory(send, bytes) || !napkin::emu::is_device_memory(recv, bytes))
        return refuse(ncclInvalidArgument, std::string(op) + " of " + std::to_string(bytes) +
                                               " bytes outside device memory");
    const napkin::emu::DeviceAccess access;
    if (send != recv) std::memmove(recv, send, bytes);
    return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    *version = NCCL_VERSION_CODE;  // the header the emulator was built against
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    std::memset(id, 0, sizeof *id);
    std::snprintf(id->internal, sizeof id->internal, "napkin cuda-emu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId /*id*/, int rank) {
    if (nranks != 1 || rank != 0)
        return refuse(ncclInvalidUsage,
                      "world size " + std::to_string(nranks) +
                          ": the emulator runs one rank only (a GPU per rank needs GPUs)");
    *comm = reinterpret_cast<ncclComm_t>(new Comm);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete reinterpret_cast<Comm*>(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete reinterpret_cast<Comm*>(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t /*comm*/, ncclResult_t* error) {
    *error = ncclSuccess;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess:
            return "no error";
        case ncclInvalidArgument:
            return "invalid argument (emulated NCCL)";
        case ncclInvalidUsage:
            return "invalid usage (emulated NCCL)";
        default:
            return "NCCL error (emulated)";
    }
}

ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                           ncclRedOp_t /*op*/, ncclComm_t comm, cudaStream_t /*stream*/) {
    return copy("ncclAllReduce", send, recv, count, t, comm);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recvcount,
                               ncclDataType_t t, ncclRedOp_t /*op*/, ncclComm_t comm,
                               cudaStream_t /*stream*/) {
    return copy("ncclReduceScatter", send, recv, recvcount, t, comm);
}

ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t /*stream*/) {
    return copy("ncclAllGather", send, recv, sendcount, t, comm);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t t,
                           int root, ncclComm_t comm, cudaStream_t /*stream*/) {
    if (root != 0)
        return refuse(ncclInvalidArgument, "ncclBroadcast from root " + std::to_string(root));
    return copy("ncclBroadcast", send, recv, count, t, comm);
}

}  // extern "C"
