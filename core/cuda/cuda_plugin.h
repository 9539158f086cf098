// The C boundary of libnapkin_cuda.so, the CUDA backend's shared library. The napkin program
// loads it with dlopen on first use (core/device.cpp), so commands that never touch a GPU
// (napkin estimate) do not pay for mapping cuBLAS, cuBLASLt, CUPTI and NCCL at startup, and a
// machine without a driver still runs every CPU path.
#pragma once

#include <cstdint>

namespace napkin {
struct CudaEngineApi;  // core/cuda/cuda_engine_api.h
}

extern "C" {

struct NapkinCudaProbe {
    int cuda_devices;
    int sm_major, sm_minor;
    int multiprocessors;
    std::uint64_t memory_bytes;
    char name[256];
    char reason[256];           // why there is no device, when cuda_devices == 0
    char runtime_version[32];
    char driver_version[32];
    char libraries[256];        // versions the linked CUDA libraries report
};

// Fills *out; never fails (a machine without a driver is a normal answer). Returns 1.
int napkin_cuda_probe(NapkinCudaProbe* out);
inline constexpr const char* kNapkinCudaProbeSymbol = "napkin_cuda_probe";

// The training engine's table of kernels and runtime calls (core/cuda/cuda_engine_api.h), a
// C++ struct behind a C symbol: napkin and the plugin come from one build (same compiler, same
// headers and STL), which the table's version and size fields check. Never null.
const napkin::CudaEngineApi* napkin_cuda_engine_api();
inline constexpr const char* kNapkinCudaEngineApiSymbol = "napkin_cuda_engine_api";

}  // extern "C"
