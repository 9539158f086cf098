// Which compute devices this process can use. napkin links the CUDA libraries when built with
// CUDA, but they load without a GPU or driver; whether a device exists is decided here, at run
// time, and every CPU path keeps working when none does.
#pragma once

#include <cstdint>
#include <string>

namespace napkin {

struct DeviceInfo {
    bool cuda_built = false;  // compiled with the CUDA backend (NAPKIN_CUDA)
    int cuda_devices = 0;     // cudaGetDeviceCount, 0 when it fails
    std::string reason;       // why there is no CUDA device, when cuda_devices == 0
    // Device 0, when there is one.
    std::string name;
    int sm_major = 0, sm_minor = 0;
    std::uint64_t memory_bytes = 0;
    int multiprocessors = 0;
    std::string runtime_version;  // "13.0"
    std::string driver_version;   // "" without a driver
    // Versions reported by the linked CUDA libraries (cuBLAS, cuBLASLt, CUPTI, NCCL); each
    // query works without a GPU, which shows the libraries load on any machine.
    std::string libraries;

    bool has_cuda() const { return cuda_devices > 0; }
};

// Never throws; the result is computed once and cached. When the CUDA driver alone says there is
// no device (no libcuda.so.1, or it finds none), the backend is not loaded and `libraries` stays
// empty: the reason is the driver's.
const DeviceInfo& probe_devices();
// The same, but loading the backend whatever the driver says (`napkin info`: the CUDA libraries'
// versions show they load on any machine, GPU or not).
const DeviceInfo& probe_devices_and_backend();

struct CudaEngineApi;  // core/cuda/cuda_engine_api.h
// The training engine's table of the CUDA backend (kernels and runtime calls) from the loaded
// plugin, or null with *reason saying why: built without CUDA, the plugin does not load, no
// device, or a plugin from another build (version or size mismatch). Never throws.
const CudaEngineApi* cuda_engine_api(std::string* reason);

// One line for logs and `napkin info`: "cuda: NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB), 1 device"
// or "cuda: none (no CUDA-capable device is detected); using the CPU".
std::string device_summary(const DeviceInfo& d);

}  // namespace napkin
