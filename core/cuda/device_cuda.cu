// Probes the CUDA runtime. Every call is checked and turned into a reason string: on a
// machine without a driver cudaGetDeviceCount fails, and that is a normal outcome.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "core/cuda/cuda_plugin.h"

namespace {

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string library_versions() {
    std::string out;
    const auto add = [&out](const std::string& item) { out += (out.empty() ? "" : ", ") + item; };
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
        add("cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch));
    }
    add("cuBLASLt " + std::to_string(cublasLtGetVersion()));
    uint32_t cupti = 0;
    if (cuptiGetVersion(&cupti) == CUPTI_SUCCESS) add("CUPTI API " + std::to_string(cupti));
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess) {
        add("NCCL " + std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
            std::to_string(nccl % 100));
    }
    add("NVTX3");
    return out;
}

void copy(char* dst, std::size_t n, const std::string& src) { std::snprintf(dst, n, "%s", src.c_str()); }

}  // namespace

extern "C" int napkin_cuda_probe(NapkinCudaProbe* d) {
    std::memset(d, 0, sizeof *d);
    nvtxRangePushA("napkin::cuda::probe");  // a no-op unless a tool (nsys) is attached
    copy(d->libraries, sizeof d->libraries, library_versions());
    nvtxRangePop();
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) copy(d->runtime_version, sizeof d->runtime_version, version_text(runtime));
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
        copy(d->driver_version, sizeof d->driver_version, version_text(driver));
    }
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        copy(d->reason, sizeof d->reason, cudaGetErrorString(err));
        cudaGetLastError();  // clear the sticky error so later calls start clean
        return 1;
    }
    if (count == 0) {
        copy(d->reason, sizeof d->reason, "no CUDA device");
        return 1;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        copy(d->reason, sizeof d->reason, "cudaGetDeviceProperties failed");
        cudaGetLastError();
        return 1;
    }
    d->cuda_devices = count;
    copy(d->name, sizeof d->name, prop.name);
    d->sm_major = prop.major;
    d->sm_minor = prop.minor;
    d->memory_bytes = prop.totalGlobalMem;
    d->multiprocessors = prop.multiProcessorCount;
    return 1;
}
