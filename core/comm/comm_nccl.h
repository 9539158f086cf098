// The NCCL backend of the communication interface (core/comm/comm.h): one rank per GPU, the
// same five collectives over device buffers, counted and profiled like the MPI backend's (the
// bytes by the ring algorithm, which NCCL's rings follow). The NCCL calls live in the CUDA
// plugin (core/cuda/nccl_ops.h), so napkin never links NCCL and every build compiles this.
//
// Bootstrap: NCCL needs a unique id known to every rank. Rank 0 makes it and `bootstrap`
// (the launcher's communicator: MPI under mpirun, the single communicator at world size 1)
// broadcasts it; the NCCL communicator takes the bootstrap's rank, world size and local rank,
// and the GPU of its local rank. `bootstrap` must outlive it (abort() goes through it too).
// Buffers are device memory, except the fp64 scalars of all_reduce(double*), which are host
// values as on every backend (they pass through a device buffer of the communicator's). Every
// collective runs on the communicator's own stream; the blocking ones wait for their result
// before returning, the started ones (start_*) record an event after themselves, which
// progress() queries and wait() waits for, so they run beside the engine's kernels. Either way
// the caller makes sure its own writes to the buffer are done first (the ZeRO engine
// synchronizes the engine's stream, core/engine/zero.cpp) and leaves a started collective's
// buffer alone until wait().
// Waits honour set_timeout_s (--comm-timeout): every wait, blocking or started, polls the
// collective's completion event, and a collective still pending after the timeout, or an
// asynchronous NCCL error (ncclCommGetAsyncError), ends the job with one line naming it
// (ncclCommAbort, then the bootstrap's abort), as the MPI backend does. Checked on the CPU
// against a fake plugin table (tests/comm/comm_nccl_fake_test.cpp); not yet run on GPUs.
// Throws UsageError "NCCL: no CUDA device (<reason>)" without a device or a CUDA build.
#pragma once

#include <memory>

#include "core/comm/comm.h"

namespace napkin {

struct CudaEngineApi;  // core/cuda/cuda_engine_api.h

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap);
// The same over a given table of the plugin's calls: the seam for tests, which hand it a fake
// one (tests/comm/comm_nccl_fake_test.cpp) to check the waits without a GPU.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, const CudaEngineApi& api);

}  // namespace napkin
