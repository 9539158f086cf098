// fp8 codes from a device against the CPU's: equal bits, or both NaN (the hardware's conversion
// may give a NaN of another sign). Shared by the current- and delayed-scaling quantize tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

namespace napkin::test {

template <class Q>
void expect_same_codes(const std::vector<Q>& gpu, const std::vector<Q>& cpu) {
    ASSERT_EQ(gpu.size(), cpu.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        const bool both_nan =
            std::isnan(static_cast<float>(gpu[i])) && std::isnan(static_cast<float>(cpu[i]));
        if (gpu[i].bits != cpu[i].bits && !both_nan && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": code " << int(gpu[i].bits) << ", the CPU's "
                          << int(cpu[i].bits);
    }
    EXPECT_EQ(bad, 0u);
}

}  // namespace napkin::test
