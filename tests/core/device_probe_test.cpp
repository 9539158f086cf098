// The CUDA build must start and answer on a machine without a GPU or driver (CI has neither):
// the probe never throws, says why there is no device, and the linked CUDA libraries load.
#include <gtest/gtest.h>

#include "core/device.h"

namespace napkin {
namespace {

TEST(DeviceProbe, AnswersWithoutADevice) {
    const DeviceInfo& d = probe_devices();
    if (!d.has_cuda()) {
        EXPECT_FALSE(d.reason.empty());
        EXPECT_NE(device_summary(d).find("using the CPU"), std::string::npos);
    }
#if defined(NAPKIN_HAVE_CUDA)
    EXPECT_TRUE(d.cuda_built);
    for (const char* lib : {"cuBLAS", "cuBLASLt", "CUPTI", "NCCL"}) {
        EXPECT_NE(d.libraries.find(lib), std::string::npos) << lib << " did not answer: " << d.libraries;
    }
#else
    EXPECT_FALSE(d.cuda_built);
#endif
}

}  // namespace
}  // namespace napkin
