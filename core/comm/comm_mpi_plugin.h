// The C boundary of libnapkin_comm_mpi.so, the MPI backend of core/comm/comm.h. napkin loads it
// with dlopen only when an MPI launcher started the process (OMPI_COMM_WORLD_SIZE or PMI_SIZE
// set), so `napkin estimate` and a plain `napkin train` never map libmpi and its dependencies.
// Every call returns 0 on success, else writes a one-line reason into err (kNapkinMpiErrBytes)
// and returns the MPI error code, or kNapkinMpiTimedOut when a collective did not complete
// within the timeout (set_timeout; its request is left pending: the caller ends the job).
#pragma once

#include <cstdint>

extern "C" {

inline constexpr int kNapkinMpiAbi = 4;
inline constexpr int kNapkinMpiErrBytes = 512;
inline constexpr int kNapkinMpiTimedOut = -1;  // MPI's error codes are positive

enum NapkinMpiCollective : int {
    napkin_mpi_all_reduce = 0,
    napkin_mpi_reduce_scatter = 1,
    napkin_mpi_all_gather = 2
};

enum NapkinMpiType : int {
    napkin_mpi_f32 = 0,
    napkin_mpi_f16 = 1,
    napkin_mpi_bf16 = 2,
    napkin_mpi_f64 = 3,
    napkin_mpi_f32_max = 4  // fp32 reduced by maximum (all_reduce only), not summed
};

struct NapkinMpiApi {
    int abi;
    int (*init)(int* rank, int* size, char* err);
    int (*finalize)(char* err);
    void (*abort)(int code);
    // Each collective below is started nonblocking and polled until done or `seconds` have
    // passed (then kNapkinMpiTimedOut); 0, the default: wait forever.
    void (*set_timeout)(double seconds);
    // In place, sum over ranks (maximum for napkin_mpi_f32_max).
    int (*all_reduce)(void* buf, std::uint64_t count, int type, char* err);
    // buf holds size * shard elements; afterwards chunk `rank` holds the sum over ranks.
    int (*reduce_scatter)(void* buf, std::uint64_t shard, int type, char* err);
    // buf holds size * shard elements with this rank's chunk in place; afterwards all chunks.
    int (*all_gather)(void* buf, std::uint64_t shard, int type, char* err);
    int (*broadcast)(void* buf, std::uint64_t bytes, int root, char* err);
    int (*barrier)(char* err);
    const char* (*library_version)();

    // Nonblocking, for overlap: start() begins one of the collectives above (n: count for the
    // all-reduce, shard for the others) and writes a handle (> 0) into *handle; test() sets
    // *done to 1 once it completed (the handle is then gone) and drives its progress (Open MPI
    // advances nonblocking collectives only inside MPI calls); wait() completes it, polling up
    // to the timeout counted from the wait (then kNapkinMpiTimedOut, handle still pending).
    int (*start)(int collective, void* buf, std::uint64_t n, int type, std::uint64_t* handle,
                 char* err);
    int (*test)(std::uint64_t handle, int* done, char* err);
    int (*wait)(std::uint64_t handle, char* err);
};

// Fills *out; returns kNapkinMpiAbi.
int napkin_mpi_api(NapkinMpiApi* out);
inline constexpr const char* kNapkinMpiApiSymbol = "napkin_mpi_api";

}  // extern "C"
