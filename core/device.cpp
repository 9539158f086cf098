#include "core/device.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

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
            load_error = "cannot load the CUDA backend: " + (e != nullptr ? std::string(e) : plugin_path());
        }
        return h;
    }();
    if (lib == nullptr && err != nullptr) *err = load_error;
    return lib;
}
#endif

}  // namespace

const DeviceInfo& probe_devices() {
    static const DeviceInfo info = [] {
        DeviceInfo d;
#if defined(NAPKIN_HAVE_CUDA)
        d.cuda_built = true;
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
        d.reason = "napkin was built without CUDA (NAPKIN_CUDA=OFF or no nvcc at configure time)";
#endif
        return d;
    }();
    return info;
}

const CudaEngineApi* cuda_engine_api(std::string* reason) {
    const DeviceInfo& d = probe_devices();
    if (!d.has_cuda()) {
        *reason = d.reason;
        return nullptr;
    }
#if defined(NAPKIN_HAVE_CUDA)
    auto entry = reinterpret_cast<const CudaEngineApi* (*)()>(dlsym(plugin(reason), kNapkinCudaEngineApiSymbol));
    if (entry == nullptr) {
        *reason = "the CUDA backend " + plugin_path() + " lacks " + kNapkinCudaEngineApiSymbol;
        return nullptr;
    }
    const CudaEngineApi* api = entry();
    if (api->version != kNapkinCudaEngineApiVersion || api->size != sizeof(CudaEngineApi)) {
        *reason = "the CUDA backend " + plugin_path() + " comes from another build (rebuild napkin_cuda)";
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
