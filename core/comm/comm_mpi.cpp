// The MPI backend (libnapkin_comm_mpi.so): OpenMPI or any MPI-3 library, behind the C boundary
// of comm_mpi_plugin.h. Errors return (MPI_ERRORS_RETURN) with MPI's own message; sums of fp16
// and bf16 use a user-defined MPI_Op that adds in fp32 and rounds once, as NCCL does.
// Every collective is the nonblocking variant of the blocking one (MPI_Iallreduce for
// MPI_Allreduce, same arguments), completed by polling MPI_Testall, so that a rank stuck outside
// MPI cannot hold the others forever: past the timeout the call returns kNapkinMpiTimedOut.
// The blocking entries start and complete at once; start/test/wait leave it to the caller.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

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

// A started collective: its requests (an all-reduce of more than 2^30 elements is several, MPI
// counts being int) and what to do once they complete.
struct Started {
    std::vector<MPI_Request> requests;
    const char* call = "";
    // Reduce-scatter in place: MPI leaves this rank's sum at the start of the buffer; napkin
    // keeps chunks in place, so it moves to chunk `rank` (move_bytes long) afterwards.
    char* buf = nullptr;
    std::size_t move_bytes = 0;
    int rank = 0;
};

std::unordered_map<std::uint64_t, Started> g_started;
std::uint64_t g_last_handle = 0;

void finish(Started& s) {
    if (s.move_bytes > 0 && s.rank != 0)
        std::memmove(s.buf + static_cast<std::size_t>(s.rank) * s.move_bytes, s.buf, s.move_bytes);
}

// Completes a started collective. Without a timeout MPI_Waitall; else polls MPI_Testall (which
// also drives the progress of Open MPI's nonblocking collectives): back to back for the first
// 50 us, yielding the core until 1 ms, then sleeping 10 us, 20 us, ... at most 1 ms between
// tests, so a fast collective costs what the blocking call does and a long wait for another
// rank adds at most about 1 ms. The deadline counts from `start`.
int complete(Started& s, std::chrono::steady_clock::time_point start, char* err) {
    using clock = std::chrono::steady_clock;
    using std::chrono::microseconds;
    const int count = static_cast<int>(s.requests.size());
    if (g_timeout_s <= 0) {
        const int rc = MPI_Waitall(count, s.requests.data(), MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, s.call, err);
        finish(s);
        return 0;
    }
    const auto deadline = start + std::chrono::duration_cast<clock::duration>(
                                      std::chrono::duration<double>(g_timeout_s));
    microseconds nap{10};
    for (;;) {
        int done = 0;
        const int rc = MPI_Testall(count, s.requests.data(), &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return fail(rc, s.call, err);
        if (done != 0) {
            finish(s);
            return 0;
        }
        const auto now = clock::now();
        if (now >= deadline) {
            std::snprintf(err, kNapkinMpiErrBytes, "%s did not complete within %g s", s.call,
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
        case napkin_mpi_f32_max:
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
    if (type == napkin_mpi_f32_max) return MPI_MAX;
    return MPI_SUM;
}

std::size_t type_bytes(int type) {
    return type == napkin_mpi_f32 || type == napkin_mpi_f32_max ? 4
           : type == napkin_mpi_f64                             ? 8
                                                                : 2;
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

// Starts one of the three data collectives into *s (the nonblocking variant of the blocking
// call, same arguments: MPI_Iallreduce for MPI_Allreduce, ...).
int start_into(int collective, void* buf, std::uint64_t n, int type, Started* s, char* err) {
    MPI_Request req = MPI_REQUEST_NULL;
    switch (collective) {
        case napkin_mpi_all_reduce: {
            s->call = "MPI_Iallreduce";
            // In pieces of at most 2^30 elements, all in flight at once.
            auto* p = static_cast<char*>(buf);
            constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
            for (std::uint64_t done = 0; done < n; done += kPiece) {
                const auto k = static_cast<int>(n - done < kPiece ? n - done : kPiece);
                const int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * type_bytes(type), k,
                                              mpi_type(type), sum_op(type), MPI_COMM_WORLD, &req);
                if (rc != MPI_SUCCESS) return fail(rc, s->call, err);
                s->requests.push_back(req);
            }
            return 0;
        }
        case napkin_mpi_reduce_scatter: {
            s->call = "MPI_Ireduce_scatter_block";
            if (n > static_cast<std::uint64_t>(INT_MAX)) return too_big(s->call, err);
            const int rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, static_cast<int>(n),
                                                     mpi_type(type), sum_op(type), MPI_COMM_WORLD,
                                                     &req);
            if (rc != MPI_SUCCESS) return fail(rc, s->call, err);
            s->requests.push_back(req);
            s->buf = static_cast<char*>(buf);
            s->move_bytes = n * type_bytes(type);
            MPI_Comm_rank(MPI_COMM_WORLD, &s->rank);
            return 0;
        }
        case napkin_mpi_all_gather: {
            s->call = "MPI_Iallgather";
            if (n > static_cast<std::uint64_t>(INT_MAX)) return too_big(s->call, err);
            const int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                                          static_cast<int>(n), mpi_type(type), MPI_COMM_WORLD,
                                          &req);
            if (rc != MPI_SUCCESS) return fail(rc, s->call, err);
            s->requests.push_back(req);
            return 0;
        }
        default:
            std::snprintf(err, kNapkinMpiErrBytes, "unknown collective %d", collective);
            return MPI_ERR_OP;
    }
}

// The blocking calls: started and completed at once.
int run_blocking(int collective, void* buf, std::uint64_t n, int type, char* err) {
    const auto start = std::chrono::steady_clock::now();
    Started s;
    if (const int rc = start_into(collective, buf, n, type, &s, err); rc != 0) return rc;
    return complete(s, start, err);
}

int all_reduce(void* buf, std::uint64_t count, int type, char* err) {
    return run_blocking(napkin_mpi_all_reduce, buf, count, type, err);
}

int reduce_scatter(void* buf, std::uint64_t shard, int type, char* err) {
    return run_blocking(napkin_mpi_reduce_scatter, buf, shard, type, err);
}

int all_gather(void* buf, std::uint64_t shard, int type, char* err) {
    return run_blocking(napkin_mpi_all_gather, buf, shard, type, err);
}

int start(int collective, void* buf, std::uint64_t n, int type, std::uint64_t* handle, char* err) {
    Started s;
    if (const int rc = start_into(collective, buf, n, type, &s, err); rc != 0) return rc;
    *handle = ++g_last_handle;
    g_started.emplace(*handle, std::move(s));
    return 0;
}

int test(std::uint64_t handle, int* done, char* err) {
    auto it = g_started.find(handle);
    if (it == g_started.end()) {
        std::snprintf(err, kNapkinMpiErrBytes, "no started collective %llu",
                      static_cast<unsigned long long>(handle));
        return MPI_ERR_REQUEST;
    }
    Started& s = it->second;
    const int rc = MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), done,
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return fail(rc, s.call, err);
    if (*done != 0) {
        finish(s);
        g_started.erase(it);
    }
    return 0;
}

int wait(std::uint64_t handle, char* err) {
    auto it = g_started.find(handle);
    if (it == g_started.end()) {
        std::snprintf(err, kNapkinMpiErrBytes, "no started collective %llu",
                      static_cast<unsigned long long>(handle));
        return MPI_ERR_REQUEST;
    }
    const int rc = complete(it->second, std::chrono::steady_clock::now(), err);
    if (rc == 0) g_started.erase(it);
    return rc;
}

int broadcast(void* buf, std::uint64_t bytes, int root, char* err) {
    if (bytes > static_cast<std::uint64_t>(INT_MAX)) return too_big("MPI_Ibcast", err);
    const auto start = std::chrono::steady_clock::now();
    Started s;
    s.call = "MPI_Ibcast";
    s.requests.push_back(MPI_REQUEST_NULL);
    const int rc = MPI_Ibcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD,
                              s.requests.data());
    if (rc != MPI_SUCCESS) return fail(rc, s.call, err);
    return complete(s, start, err);
}

int barrier(char* err) {
    const auto start = std::chrono::steady_clock::now();
    Started s;
    s.call = "MPI_Ibarrier";
    s.requests.push_back(MPI_REQUEST_NULL);
    const int rc = MPI_Ibarrier(MPI_COMM_WORLD, s.requests.data());
    if (rc != MPI_SUCCESS) return fail(rc, s.call, err);
    return complete(s, start, err);
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
    out->start = start;
    out->test = test;
    out->wait = wait;
    return kNapkinMpiAbi;
}
