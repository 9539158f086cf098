#include "core/device.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(NAPKIN_HAVE_CUDA)
#include "core/cuda/cuda_engine_api.h"
#include "core/cuda/cuda_plugin.h"
#endif

namespace napkin {

namespace {

#if defined(NAPKIN_HAVE_CUDA)
// The CUDA backend's path: the one this build made, unless NAPKIN_CUDA_PLUGIN names another
// (the emulated backend of tests/cuda_emu runs the CUDA engine on the CPU through it).
const std::string& plugin_path() {
    static const std::string path = [] {
        const char* env = std::getenv("NAPKIN_CUDA_PLUGIN");
        return std::string(env != nullptr && *env != '\0' ? env : NAPKIN_CUDA_PLUGIN);
    }();
    return path;
}

// The plugin, loaded once for the process's lifetime; null with *err set when it does not load.
void* plugin(std::string* err) {
    static std::string load_error;
    static void* const lib = [] {
        void* h = dlopen(plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* e = dlerror();
            load_error =
                "cannot load the CUDA backend: " + (e != nullptr ? std::string(e) : plugin_path());
        }
        return h;
    }();
    if (lib == nullptr && err != nullptr) *err = load_error;
    return lib;
}
#endif

}  // namespace

namespace {

#if defined(NAPKIN_HAVE_CUDA)
// Why the driver alone says there is no device, or "" when it finds one. Asked before the backend
// loads: loading it (cudart, cuBLAS, cuBLASLt, CUPTI, NCCL) costs 0.4 s and 150 MB of mappings
// (the 2-core dev VM: 0.27 user + 0.25 sys CPU-s), spent by every `napkin train` on a machine
// without a GPU only to be told the same. An emulated backend (NAPKIN_CUDA_PLUGIN) has no driver
// to ask: "" too.
std::string driver_says_no_device() {
    const char* env = std::getenv("NAPKIN_CUDA_PLUGIN");
    if (env != nullptr && *env != '\0') return "";
    // Loaded for the process's lifetime, as the backend would load it again.
    void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv == nullptr) {
        const char* e = dlerror();
        return std::string("no CUDA driver: ") + (e != nullptr ? e : "libcuda.so.1 does not load");
    }
    using Init = int (*)(unsigned);
    using Count = int (*)(int*);
    using ErrorString = int (*)(int, const char**);
    auto init = reinterpret_cast<Init>(dlsym(drv, "cuInit"));
    auto count = reinterpret_cast<Count>(dlsym(drv, "cuDeviceGetCount"));
    auto error_string = reinterpret_cast<ErrorString>(dlsym(drv, "cuGetErrorString"));
    if (init == nullptr || count == nullptr) return "";  // an odd driver: let the runtime judge
    const auto why = [&](int rc) {
        const char* text = nullptr;
        if (error_string == nullptr || error_string(rc, &text) != 0 || text == nullptr)
            return "the CUDA driver fails with error " + std::to_string(rc);
        return std::string(text);
    };
    if (const int rc = init(0); rc != 0) return why(rc);
    int n = 0;
    if (const int rc = count(&n); rc != 0) return why(rc);
    return n > 0 ? "" : "no CUDA-capable device is detected";
}
#endif

DeviceInfo probe(bool load_backend) {
    DeviceInfo d;
#if defined(NAPKIN_HAVE_CUDA)
    d.cuda_built = true;
    if (!load_backend) {
        d.reason = driver_says_no_device();
        if (!d.reason.empty()) return d;
    }
    void* lib = plugin(&d.reason);
    if (lib == nullptr) return d;
    auto probe = reinterpret_cast<int (*)(NapkinCudaProbe*)>(dlsym(lib, kNapkinCudaProbeSymbol));
    if (probe == nullptr) {
        d.reason = "the CUDA backend " + plugin_path() + " lacks " + kNapkinCudaProbeSymbol;
        return d;
    }
    NapkinCudaProbe p{};
    probe(&p);  // the library stays loaded for the process's lifetime
    d.cuda_devices = p.cuda_devices;
    d.reason = p.reason;
    d.name = p.name;
    d.sm_major = p.sm_major;
    d.sm_minor = p.sm_minor;
    d.memory_bytes = p.memory_bytes;
    d.multiprocessors = p.multiprocessors;
    d.runtime_version = p.runtime_version;
    d.driver_version = p.driver_version;
    d.libraries = p.libraries;
#else
    (void)load_backend;
    d.reason = "napkin was built without CUDA (NAPKIN_CUDA=OFF or no nvcc at configure time)";
#endif
    return d;
}

}  // namespace

const DeviceInfo& probe_devices() {
    static const DeviceInfo info = probe(/*load_backend=*/false);
    return info;
}

const DeviceInfo& probe_devices_and_backend() {
    static const DeviceInfo info = probe(/*load_backend=*/true);
    return info;
}

const CudaEngineApi* cuda_engine_api(std::string* reason) {
    const DeviceInfo& d = probe_devices();
    if (!d.has_cuda()) {
        *reason = d.reason;
        return nullptr;
    }
#if defined(NAPKIN_HAVE_CUDA)
    auto entry = reinterpret_cast<const CudaEngineApi* (*)()>(
        dlsym(plugin(reason), kNapkinCudaEngineApiSymbol));
    if (entry == nullptr) {
        *reason = "the CUDA backend " + plugin_path() + " lacks " + kNapkinCudaEngineApiSymbol;
        return nullptr;
    }
    const CudaEngineApi* api = entry();
    if (api->version != kNapkinCudaEngineApiVersion || api->size != sizeof(CudaEngineApi)) {
        *reason =
            "the CUDA backend " + plugin_path() + " comes from another build (rebuild napkin_cuda)";
        return nullptr;
    }
    return api;
#else
    return nullptr;  // unreachable: has_cuda() is false without CUDA
#endif
}

std::string device_summary(const DeviceInfo& d) {
    if (!d.has_cuda()) return "cuda: none (" + d.reason + "); using the CPU";
    char buf[256];
    std::snprintf(buf, sizeof buf, "cuda: %s (sm_%d%d, %.1f GiB), %d device%s", d.name.c_str(),
                  d.sm_major, d.sm_minor, static_cast<double>(d.memory_bytes) / (1ull << 30),
                  d.cuda_devices, d.cuda_devices == 1 ? "" : "s");
    return buf;
}

}  // namespace napkin
