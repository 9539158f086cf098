// The step's scalars on the GPU (declared in kernels/step_scalars.h; the CPU twin, the spec, is
// kernels/cpu/step_scalars.cpp). One thread block each, queued on the engine's stream.
// loss_mean: the block stages the per-row losses in shared memory, coalesced, a tile at a time,
// and thread 0 adds them in row order in fp64: the host's sum, bit for bit, at the cost of M
// dependent fp64 adds (GPT-2 at B 64, T 1024: 65536 of them, a few hundred microseconds on an
// H100; what it replaces was a copy of M floats to the host and a wait for the whole queue).
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/step_scalars.h"
#include "kernels/step_scalars_rule.h"

namespace napkin::cuda {

namespace {

constexpr int kLossBlock = 256;
constexpr int kLossTile = 16 * kLossBlock;  // 16 KiB of fp32 per tile

__global__ void loss_mean_kernel(StepScalars* s, const float* losses, std::int64_t M) {
    __shared__ float tile[kLossTile];
    double total = 0.0;  // thread 0's
    for (std::int64_t base = 0; base < M; base += kLossTile) {
        const int n = static_cast<int>(M - base < kLossTile ? M - base : kLossTile);
        for (int i = static_cast<int>(threadIdx.x); i < n; i += kLossBlock)
            tile[i] = losses[base + i];
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int i = 0; i < n; ++i)
                total += tile[i];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) loss_mean_rule(*s, total, M);
}

__global__ void optimizer_gate_kernel(StepScalars* s, const double* sumsq, float grad_scale,
                                      float grad_clip) {
    optimizer_gate_rule(*s, *sumsq, grad_scale, grad_clip);
}

__global__ void step_schedule_kernel(StepScalars* s, StepSchedule schedule) {
    s->schedule = schedule;
}

}  // namespace

void loss_mean(StepScalars* s, const float* losses, std::int64_t M, CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(s != nullptr && losses != nullptr && M > 0, "loss_mean: " << M << " rows");
    loss_mean_kernel<<<1, kLossBlock, 0, stream>>>(s, losses, M);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void optimizer_gate(StepScalars* s, const double* sumsq, float grad_scale, float grad_clip,
                    CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(s != nullptr && sumsq != nullptr, "optimizer_gate: null scalars");
    optimizer_gate_kernel<<<1, 1, 0, stream>>>(s, sumsq, grad_scale, grad_clip);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

void step_schedule(StepScalars* s, StepSchedule schedule, CUstream_st* stream) {
    NAPKIN_CUDA_REQUIRE(s != nullptr, "step_schedule: null scalars");
    step_schedule_kernel<<<1, 1, 0, stream>>>(s, schedule);
    NAPKIN_CUDA_CHECK_LAUNCH();
}

}  // namespace napkin::cuda
