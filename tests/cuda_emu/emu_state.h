// State the emulated runtime (emu_cudart.cpp) and the kernel scheduler (emu_kernels.cpp) share:
// the error a launch leaves for cudaGetLastError and the synchronizing calls, and the device's
// limits as an H100 reports them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace napkin::emu {

// The H100 SXM's limits (cudaDeviceGetAttribute on sm_90), which the scheduler enforces.
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kSharedMemoryPerBlock = 48 * 1024;        // without opting in
inline constexpr int kSharedMemoryPerBlockOptin = 227 * 1024;  // cudaFuncSetAttribute's ceiling
inline constexpr int kMultiprocessors = 132;
inline constexpr std::size_t kGlobalMemoryBytes = 85'899'345'920;  // 80 GiB, as cudaMemGetInfo says
inline constexpr const char* kDeviceName = "napkin cuda-emu (CPU; H100 limits)";

// Whether [p, p + bytes) lies inside one cudaMalloc allocation (the emulated NCCL checks its
// buffers with it).
bool is_device_memory(const void* p, std::size_t bytes);

// A launch's error. `sticky` ones (a fault inside a kernel) stay for every later call, as a
// real context's do; the others (a bad configuration) are cleared by cudaGetLastError.
void set_error(cudaError_t error, bool sticky, const std::string& message);

// The dynamic shared memory `kernel` may launch with: 48 KiB, or more where
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize) allowed it.
int dynamic_shared_limit(const void* kernel);

// For the emulator's own tests (tests/cuda_emu/emu_test.cpp): the last failure's message, and
// a fresh device (errors cleared, no kernel opted in), which a real context cannot give.
std::string last_error_message();
void reset_for_test();

}  // namespace napkin::emu
