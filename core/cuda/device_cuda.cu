// Probes the CUDA runtime. Every call is checked and turned into a reason string: on a
// machine without a driver cudaGetDeviceCount fails, and that is a normal outcome.
#include <cuda_runtime.h>

#include "core/device.h"

namespace napkin::cuda {

namespace {
std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
}  // namespace

DeviceInfo probe() {
    DeviceInfo d;
    d.cuda_built = true;
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) d.runtime_version = version_text(runtime);
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) d.driver_version = version_text(driver);
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        d.reason = cudaGetErrorString(err);
        cudaGetLastError();  // clear the sticky error so later calls start clean
        return d;
    }
    if (count == 0) {
        d.reason = "no CUDA device";
        return d;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        d.reason = "cudaGetDeviceProperties failed";
        cudaGetLastError();
        return d;
    }
    d.cuda_devices = count;
    d.name = prop.name;
    d.sm_major = prop.major;
    d.sm_minor = prop.minor;
    d.memory_bytes = prop.totalGlobalMem;
    d.multiprocessors = prop.multiProcessorCount;
    return d;
}

}  // namespace napkin::cuda
