// The MPI backend (libnapkin_comm_mpi.so): OpenMPI or any MPI-3 library, behind the C boundary
// of comm_mpi_plugin.h. Errors return (MPI_ERRORS_RETURN) with MPI's own message; sums of fp16
// and bf16 use a user-defined MPI_Op that adds in fp32 and rounds once, as NCCL does.
// Every collective is the nonblocking variant of the blocking one (MPI_Iallreduce for
// MPI_Allreduce, same arguments), completed by polling MPI_Test, so that a rank stuck outside
// MPI cannot hold the others forever: past the timeout the call returns kNapkinMpiTimedOut.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/comm/comm_mpi_plugin.h"
#include "core/half.h"

namespace {

MPI_Op g_sum_f16 = MPI_OP_NULL;
MPI_Op g_sum_bf16 = MPI_OP_NULL;
double g_timeout_s = 0;  // 0: wait forever

template <class T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
    const T* a = static_cast<const T*>(in);
    T* b = static_cast<T*>(inout);
    for (int i = 0; i < *len; ++i)
        b[i] = T(napkin::to_float(a[i]) + napkin::to_float(b[i]));
}

int fail(int rc, const char* call, char* err) {
    char msg[MPI_MAX_ERROR_STRING] = {};
    int n = 0;
    MPI_Error_string(rc, msg, &n);
    std::snprintf(err, kNapkinMpiErrBytes, "%s failed: %s", call, msg);
    return rc;
}

// Completes a started collective. Polls MPI_Test (which also drives the progress of Open MPI's
// nonblocking collectives): back to back for the first 50 us, yielding the core until 1 ms, then
// sleeping 10 us, 20 us, ... at most 1 ms between tests, so a fast collective costs what the
// blocking call does and a long wait for another rank adds at most about 1 ms.
int complete(MPI_Request* req, const char* call, std::chrono::steady_clock::time_point start,
             char* err) {
    using clock = std::chrono::steady_clock;
    using std::chrono::microseconds;
    if (g_timeout_s <= 0) {
        const int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
        return rc == MPI_SUCCESS ? 0 : fail(rc, call, err);
    }
    const auto deadline = start + std::chrono::duration_cast<clock::duration>(
                                      std::chrono::duration<double>(g_timeout_s));
    microseconds nap{10};
    for (;;) {
        int done = 0;
        const int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, call, err);
        if (done != 0) return 0;
        const auto now = clock::now();
        if (now >= deadline) {
            std::snprintf(err, kNapkinMpiErrBytes, "%s did not complete within %g s", call,
                          g_timeout_s);
            return kNapkinMpiTimedOut;
        }
        if (now - start < microseconds(50)) continue;
        if (now - start < microseconds(1000)) {
            std::this_thread::yield();
            continue;
        }
        std::this_thread::sleep_for(nap);
        nap = nap * 2 < microseconds(1000) ? nap * 2 : microseconds(1000);
    }
}

int too_big(const char* call, char* err) {
    std::snprintf(err, kNapkinMpiErrBytes, "%s: more than INT_MAX elements in one call", call);
    return MPI_ERR_COUNT;
}

MPI_Datatype mpi_type(int type) {
    switch (type) {
        case napkin_mpi_f32:
            return MPI_FLOAT;
        case napkin_mpi_f64:
            return MPI_DOUBLE;
        default:
            return MPI_UINT16_T;  // fp16 / bf16: 2-byte elements, summed by our MPI_Op
    }
}

MPI_Op sum_op(int type) {
    if (type == napkin_mpi_f16) return g_sum_f16;
    if (type == napkin_mpi_bf16) return g_sum_bf16;
    return MPI_SUM;
}

std::size_t type_bytes(int type) {
    return type == napkin_mpi_f32 ? 4 : type == napkin_mpi_f64 ? 8 : 2;
}

int init(int* rank, int* size, char* err) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Init_thread", err);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    MPI_Op_create(&sum16<napkin::f16_t>, 1, &g_sum_f16);
    MPI_Op_create(&sum16<napkin::bf16_t>, 1, &g_sum_bf16);
    return 0;
}

int finalize(char* err) {
    if (g_sum_f16 != MPI_OP_NULL) MPI_Op_free(&g_sum_f16);
    if (g_sum_bf16 != MPI_OP_NULL) MPI_Op_free(&g_sum_bf16);
    const int rc = MPI_Finalize();
    return rc == MPI_SUCCESS ? 0 : fail(rc, "MPI_Finalize", err);
}

void abort_job(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
}

void set_timeout(double seconds) {
    g_timeout_s = seconds > 0 ? seconds : 0;
}

int all_reduce(void* buf, std::uint64_t count, int type, char* err) {
    // In pieces of at most 2^30 elements: MPI counts are int.
    const auto start = std::chrono::steady_clock::now();
    auto* p = static_cast<char*>(buf);
    constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
    for (std::uint64_t done = 0; done < count; done += kPiece) {
        const auto n = static_cast<int>(count - done < kPiece ? count - done : kPiece);
        MPI_Request req = MPI_REQUEST_NULL;
        const int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * type_bytes(type), n, mpi_type(type),
                                      sum_op(type), MPI_COMM_WORLD, &req);
        if (rc != MPI_SUCCESS) return fail(rc, "MPI_Iallreduce", err);
        if (const int c = complete(&req, "MPI_Iallreduce", start, err); c != 0) return c;
    }
    return 0;
}

int reduce_scatter(void* buf, std::uint64_t shard, int type, char* err) {
    if (shard > static_cast<std::uint64_t>(INT_MAX))
        return too_big("MPI_Ireduce_scatter_block", err);
    const auto start = std::chrono::steady_clock::now();
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, static_cast<int>(shard),
                                             mpi_type(type), sum_op(type), MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Ireduce_scatter_block", err);
    if (const int c = complete(&req, "MPI_Ireduce_scatter_block", start, err); c != 0) return c;
    // In place, MPI leaves the result at the start of the buffer; napkin keeps chunks in place.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::size_t bytes = shard * type_bytes(type);
    if (rank != 0)
        std::memmove(static_cast<char*>(buf) + static_cast<std::size_t>(rank) * bytes, buf, bytes);
    return 0;
}

int all_gather(void* buf, std::uint64_t shard, int type, char* err) {
    if (shard > static_cast<std::uint64_t>(INT_MAX)) return too_big("MPI_Iallgather", err);
    const auto start = std::chrono::steady_clock::now();
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, static_cast<int>(shard),
                                  mpi_type(type), MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Iallgather", err);
    return complete(&req, "MPI_Iallgather", start, err);
}

int broadcast(void* buf, std::uint64_t bytes, int root, char* err) {
    if (bytes > static_cast<std::uint64_t>(INT_MAX)) return too_big("MPI_Ibcast", err);
    const auto start = std::chrono::steady_clock::now();
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ibcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Ibcast", err);
    return complete(&req, "MPI_Ibcast", start, err);
}

int barrier(char* err) {
    const auto start = std::chrono::steady_clock::now();
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return fail(rc, "MPI_Ibarrier", err);
    return complete(&req, "MPI_Ibarrier", start, err);
}

const char* library_version() {
    static char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int n = 0;
    MPI_Get_library_version(version, &n);
    for (int i = 0; i < n; ++i) {
        if (version[i] == '\n' || version[i] == ',') {
            version[i] = '\0';
            break;
        }
    }
    return version;
}

}  // namespace

extern "C" int napkin_mpi_api(NapkinMpiApi* out) {
    out->abi = kNapkinMpiAbi;
    out->init = init;
    out->finalize = finalize;
    out->abort = abort_job;
    out->set_timeout = set_timeout;
    out->all_reduce = all_reduce;
    out->reduce_scatter = reduce_scatter;
    out->all_gather = all_gather;
    out->broadcast = broadcast;
    out->barrier = barrier;
    out->library_version = library_version;
    return kNapkinMpiAbi;
}
