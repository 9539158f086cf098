// The CUDA kernels on the CPU, for machines without a GPU (CI): the device side of the CUDA
// programming model that kernels/cuda/*.cu use, emulated closely enough that tests/kernels_cuda
// can hold every CUDA kernel against its CPU twin where no GPU exists. docs/CUDA.md, "The
// kernels without a GPU", says what it checks and what only a GPU can.
//
// How a .cu file gets here: tests/cuda_emu/rewrite_cu.cmake copies it with each launch
// `name<<<grid, block, smem, stream>>>(args)` rewritten into a call of napkin::emu::Launch, and
// each `extern __shared__ T name[]` into the launch's dynamic shared buffer; g++ then compiles
// the copy as C++ with this header included first (-include). The real CUDA headers compile
// under a host compiler; this header supplies what they leave to nvcc: the built-in variables,
// the block and warp intrinsics, and `__shared__`.
//
// The model (tests/cuda_emu/emu_kernels.cpp): every launch runs at once on the calling thread,
// block after block; the threads of a block are fibers that run until they reach a barrier
// (__syncthreads*, a warp shuffle, a ballot, __syncwarp) and wait there until every thread the
// barrier names has arrived. That is a legal schedule of the real hardware, so a correct kernel
// computes the same values; the order in which fibers run between barriers is shuffled, so a
// kernel that leans on an order the hardware does not promise may not. Stricter than the
// hardware on purpose: a barrier that some of the block's threads can no longer reach (they
// returned, or wait at another barrier) is reported as an error, not left undefined.
#pragma once

// Before the CUDA headers: host_defines.h keeps these when they are already defined. One block
// runs at a time on one thread, so a function-local static is exactly the block's shared array.
#define __shared__ static
// A kernel parameter the device may take the address of (a TMA tensor map): a plain parameter
// here, where it is a copy in the launch's closure anyway.
#define __grid_constant__

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

// The built-in variables: set by the scheduler before it switches to a fiber.
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

namespace napkin::emu {

// What a fiber waits for at a barrier; the scheduler releases it with `result` filled in.
enum class Sync : std::uint8_t {
    kBlock,     // __syncthreads and its _or/_and/_count forms
    kShflIdx,   // __shfl_sync
    kShflXor,   // __shfl_xor_sync
    kShflDown,  // __shfl_down_sync
    kShflUp,    // __shfl_up_sync
    kBallot,    // __ballot_sync, __any_sync, __all_sync
    kSyncWarp,  // __syncwarp
    kWarpOp,    // a WarpCollective (the WMMA calls): the whole warp, each lane with its own data
    kNamed,     // bar.sync on one of the block's named barriers (named_barrier)
};

struct SyncRequest {
    Sync kind = Sync::kBlock;
    unsigned mask = 0;        // the warp lanes named (warp kinds)
    std::uint64_t value = 0;  // the shuffled bits, or the predicate
    int operand = 0;          // source lane, lane mask or delta
    int width = 32;           // shuffle segment width
};

// Blocks the calling fiber until its barrier is released; returns the barrier's result for it
// (the shuffled bits, the ballot, the block's predicate reduction).
std::uint64_t sync(const SyncRequest& request, const char* what);

// bar.sync id, threads (`wait`) or bar.arrive id, threads (PTX ISA "bar, barrier"): the calling
// thread arrives at the block's named barrier `id` (1 to 15; 0 is __syncthreads's), which
// completes when `threads` (a multiple of 32, at most the block's) have arrived, releases the
// threads that wait at it and counts from zero again. bar.arrive returns, but the thread sits out
// a few scheduler rounds first. Stricter than the hardware: threads arriving with another count
// while it counts fail the launch, and so do a thread arriving twice in one round, a round
// completed by part of a warp and arrivals left over when the block ends (an arrive that no sync
// completes).
void named_barrier(int id, int threads, bool wait, const char* what);

// A step of a spinning wait (emu_tma.cpp's mbarrier waits): the calling thread lets the block's
// other threads run, and goes on in the scheduler's next round.
void yield(const char* what);

// The launch's dynamic shared memory (extern __shared__), `bytes` as the launch asked for,
// aligned to 128 bytes.
void* dynamic_shared_memory();
// Its size in bytes (0 without).
std::size_t dynamic_shared_bytes();

// The running launch's number (1, 2, ... per process): seeds what the emulator chooses per
// launch, the schedule and the WMMA fragment mapping, so that a failure reproduces.
std::uint64_t launch_number();

// A warp-wide operation on data that each lane holds, such as wmma::mma_sync
// (tests/cuda_emu/emu_wmma.h): all 32 lanes of a full warp wait with their own op; once all have
// arrived, the scheduler calls `run` once with the 32 ops in lane order, then releases the
// lanes. Lanes that wait with a different `run` (another WMMA call, or another type) fail the
// launch, as a warp's lanes in different shuffles do. `run` returns why the call is invalid
// (the launch fails with that message), or an empty string.
struct WarpCollective {
    using Run = std::string (*)(WarpCollective* const* lanes);
    Run run = nullptr;
};

// Waits until the whole warp has called it with ops of the same `run`, which runs then.
void warp_collective(WarpCollective& op, const char* what);

// Runs `body` as the kernel named `name` (file:line of the launch) over grid x block. A failure
// (a bad configuration, a deadlock, an exception inside a thread) is printed with the block and
// thread, and becomes the error cudaGetLastError and the next synchronizing call return.
// `kernel` is the kernel's address, for the dynamic shared memory cudaFuncSetAttribute allowed it.
// On a stream that captures (emu_graph.cpp), the launch is recorded and runs at each graph launch.
void run_kernel(const char* name, const char* file, int line, const void* kernel, dim3 grid,
                dim3 block, std::size_t dynamic_smem, cudaStream_t stream,
                const std::function<void()>& body);

// Whether [p, p + bytes) lies inside one cudaMalloc allocation (emu_cudart.cpp).
bool is_device_memory(const void* p, std::size_t bytes);

// A launch refused before it ran: `argument` (0-based) of the kernel named `name` is a host
// pointer. A GPU faults when the kernel dereferences it (cudaErrorIllegalAddress, which sticks);
// here the kernel would read host memory and pass, so the launch fails that way at once.
void refuse_host_pointer(const char* name, const char* file, int line, int argument);

template <class T>
bool is_host_pointer(const T& arg) {
    if constexpr (std::is_pointer_v<T>)
        return arg != nullptr && !is_device_memory(static_cast<const void*>(arg), 0);
    else
        return false;
}

// A kernel's address, as cudaFuncSetAttribute is given it (the function, or a pointer to it).
template <class F>
const void* kernel_address(F* kernel) {
    return reinterpret_cast<const void*>(kernel);
}

// What the rewritten launch calls: launch(...)(kernel_as_lambda, args...).
class Launch {
public:
    Launch(const char* name, const char* file, int line, const void* kernel, dim3 grid, dim3 block,
           std::size_t smem = 0, cudaStream_t stream = nullptr)
        : name_(name),
          file_(file),
          line_(line),
          kernel_(kernel),
          grid_(grid),
          block_(block),
          smem_(smem),
          stream_(stream) {}

    // Arguments are evaluated and copied once, on the host, as a real launch copies them. A
    // pointer among them must be null or device memory (pointers inside a struct argument are
    // not looked at).
    template <class Kernel, class... Args>
    void operator()(Kernel kernel, Args... args) const {
        int index = 0, host = -1;
        ((host < 0 && is_host_pointer(args) ? host = index : 0, ++index), ...);
        if (host >= 0) return refuse_host_pointer(name_, file_, line_, host);
        // By value: on a capturing stream the launch runs later, at each launch of the graph.
        run_kernel(name_, file_, line_, kernel_, grid_, block_, smem_, stream_,
                   [=] { kernel(args...); });
    }

private:
    const char* name_;
    const char* file_;
    int line_;
    const void* kernel_;
    dim3 grid_, block_;
    std::size_t smem_;
    cudaStream_t stream_;
};

template <class T>
std::uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<T>,
                  "shuffles move at most 8 bytes");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    return bits;
}

template <class T>
T from_bits(std::uint64_t bits) {
    T v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

template <class T>
T shuffle(Sync kind, unsigned mask, T v, int operand, int width, const char* what) {
    return from_bits<T>(sync({kind, mask, to_bits(v), operand, width}, what));
}

}  // namespace napkin::emu

inline void __syncthreads() {
    napkin::emu::sync({napkin::emu::Sync::kBlock, 0, 0, 0, 32}, "__syncthreads");
}
// The block's reductions of a predicate: operand 0 or, 1 and, 2 count.
inline int __syncthreads_or(int p) {
    return static_cast<int>(
        napkin::emu::sync({napkin::emu::Sync::kBlock, 0, p != 0, 0, 32}, "__syncthreads_or"));
}
inline int __syncthreads_and(int p) {
    return static_cast<int>(
        napkin::emu::sync({napkin::emu::Sync::kBlock, 0, p != 0, 1, 32}, "__syncthreads_and"));
}
inline int __syncthreads_count(int p) {
    return static_cast<int>(
        napkin::emu::sync({napkin::emu::Sync::kBlock, 0, p != 0, 2, 32}, "__syncthreads_count"));
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    napkin::emu::sync({napkin::emu::Sync::kSyncWarp, mask, 0, 0, 32}, "__syncwarp");
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    return napkin::emu::shuffle(napkin::emu::Sync::kShflIdx, mask, v, src_lane, width,
                                "__shfl_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return napkin::emu::shuffle(napkin::emu::Sync::kShflXor, mask, v, lane_mask, width,
                                "__shfl_xor_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return napkin::emu::shuffle(napkin::emu::Sync::kShflDown, mask, v, static_cast<int>(delta),
                                width, "__shfl_down_sync");
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return napkin::emu::shuffle(napkin::emu::Sync::kShflUp, mask, v, static_cast<int>(delta), width,
                                "__shfl_up_sync");
}
inline unsigned __ballot_sync(unsigned mask, int p) {
    return static_cast<unsigned>(
        napkin::emu::sync({napkin::emu::Sync::kBallot, mask, p != 0, 0, 32}, "__ballot_sync"));
}
inline int __any_sync(unsigned mask, int p) {
    return __ballot_sync(mask, p) != 0;
}
inline int __all_sync(unsigned mask, int p) {
    return __ballot_sync(mask, p) == __ballot_sync(mask, 1);
}
inline int __popc(unsigned x) {
    return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
    return __builtin_popcountll(x);
}
// One thread runs at a time: an atomic is a plain read-modify-write.
template <class T>
T atomicAdd(T* address, T v) {
    const T old = *address;
    *address = old + v;
    return old;
}
template <class T>
T atomicMax(T* address, T v) {
    const T old = *address;
    *address = old < v ? v : old;
    return old;
}
// Products and quotients rounded to nearest even (crt/device_functions.h declares them for nvcc
// only). CUDA documents that __fmul_rn is never merged into a multiply-add, whatever -fmad says,
// and that __fdiv_rn is IEEE-rounded, whatever -prec-div says: `volatile` keeps the host
// compiler from fusing the product into a following add where it targets FMA.
inline float __fmul_rn(float x, float y) {
    volatile float r = x * y;
    return r;
}
inline float __fdiv_rn(float x, float y) {
    volatile float r = x / y;
    return r;
}
// A hint to nvcc's register allocation (crt/host_defines.h defines it for nvcc only).
#define __launch_bounds__(...)

// CUDA's device overloads of min and max (math_functions.hpp gives nvcc's).
#define NAPKIN_EMU_MIN_MAX(T) \
    inline T min(T a, T b) {  \
        return b < a ? b : a; \
    }                         \
    inline T max(T a, T b) {  \
        return a < b ? b : a; \
    }
NAPKIN_EMU_MIN_MAX(int)
NAPKIN_EMU_MIN_MAX(unsigned)
NAPKIN_EMU_MIN_MAX(long)
NAPKIN_EMU_MIN_MAX(unsigned long)
NAPKIN_EMU_MIN_MAX(long long)
NAPKIN_EMU_MIN_MAX(unsigned long long)
#undef NAPKIN_EMU_MIN_MAX
// cuda_runtime.h's typed overload, which it declares only for nvcc.
template <class T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

// mma.sync, ldmatrix and cp.async (kernels/cuda/mma.cuh's PTX), emulated.
#include "tests/cuda_emu/emu_ptx.h"
// wgmma (kernels/cuda/wgmma.cuh's sm_90a PTX), emulated.
#include "tests/cuda_emu/emu_wgmma.h"
// TMA copies and mbarriers (kernels/cuda/tma.cuh's sm_90 PTX), emulated.
#include "tests/cuda_emu/emu_tma.h"
