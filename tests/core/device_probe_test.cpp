// The CUDA build must start and answer on a machine without a GPU or driver (CI has neither):
// the probe never throws, says why there is no device, and the linked CUDA libraries load.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/device.h"

namespace napkin {
namespace {

TEST(DeviceProbe, AnswersWithoutADevice) {
    const DeviceInfo& d = probe_devices_and_backend();
    if (!d.has_cuda()) {
        EXPECT_FALSE(d.reason.empty());
        EXPECT_NE(device_summary(d).find("using the CPU"), std::string::npos);
    }
#if defined(NAPKIN_HAVE_CUDA)
    EXPECT_TRUE(d.cuda_built);
    for (const char* lib : {"cuBLAS", "cuBLASLt", "CUPTI", "NCCL"}) {
        EXPECT_NE(d.libraries.find(lib), std::string::npos)
            << lib << " did not answer: " << d.libraries;
    }
#else
    EXPECT_FALSE(d.cuda_built);
#endif
}

// Without a driver the quick probe answers from the driver's absence and never loads the backend
// (its libraries would have filled `libraries`): every `napkin train` on such a machine is 0.4 s
// and 150 MB the lighter.
TEST(DeviceProbe, WithoutADriverTheBackendStaysUnloaded) {
#if defined(NAPKIN_HAVE_CUDA)
    const char* env = std::getenv("NAPKIN_CUDA_PLUGIN");
    if (env != nullptr && *env != '\0') GTEST_SKIP() << "NAPKIN_CUDA_PLUGIN names a backend";
    if (void* drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); drv != nullptr) {
        dlclose(drv);
        GTEST_SKIP() << "this machine has a CUDA driver";
    }
    const DeviceInfo& d = probe_devices();
    EXPECT_TRUE(d.cuda_built);
    EXPECT_FALSE(d.has_cuda());
    EXPECT_EQ(d.reason.rfind("no CUDA driver: ", 0), 0u) << d.reason;
    EXPECT_NE(d.reason.find("libcuda.so.1"), std::string::npos) << d.reason;
    EXPECT_TRUE(d.libraries.empty()) << d.libraries;
    EXPECT_TRUE(d.runtime_version.empty()) << d.runtime_version;
#else
    GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace napkin
