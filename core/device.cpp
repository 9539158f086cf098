#include "core/device.h"

#include <cstdio>

namespace napkin {

const DeviceInfo& probe_devices() {
    static const DeviceInfo info = [] {
#if defined(NAPKIN_HAVE_CUDA)
        return cuda::probe();
#else
        DeviceInfo d;
        d.reason = "napkin was built without CUDA (NAPKIN_CUDA=OFF or no nvcc at configure time)";
        return d;
#endif
    }();
    return info;
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
