// Device detection: on a machine with a GPU, the CUDA build must see it; without one, the
// probe must say why instead of failing.
#include "core/device.h"

#include <gtest/gtest.h>

namespace napkin {
namespace {

TEST(Device, ProbeDescribesWhatItFinds) {
    const DeviceInfo& d = probe_devices();
    const std::string summary = device_summary(d);
    EXPECT_FALSE(summary.empty());
    if (!d.has_cuda()) {
        EXPECT_FALSE(d.reason.empty());
        GTEST_SKIP() << "no CUDA device: " << summary;
    }
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_bytes, 1ull << 30);
    EXPECT_GE(d.sm_major, 7);
}

}  // namespace
}  // namespace napkin
