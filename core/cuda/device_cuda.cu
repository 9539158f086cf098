// Probes the CUDA runtime. Every call is checked and turned into a reason string: on a
// machine without a driver cudaGetDeviceCount fails, and that is a normal outcome.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include "core/device.h"

namespace napkin::cuda {

namespace {
std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string library_versions() {
    std::string out;
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
        out += "cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    }
    out += ", cuBLASLt " + std::to_string(cublasLtGetVersion());
    uint32_t cupti = 0;
    if (cuptiGetVersion(&cupti) == CUPTI_SUCCESS) out += ", CUPTI API " + std::to_string(cupti);
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess) {
        out += ", NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
               std::to_string(nccl % 100);
    }
    out += ", NVTX3";
    return out;
}
}  // namespace

DeviceInfo probe() {
    DeviceInfo d;
    d.cuda_built = true;
    nvtxRangePushA("napkin::cuda::probe");  // a no-op unless a tool (nsys) is attached
    d.libraries = library_versions();
    nvtxRangePop();
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
