// Shared by the CUDA engine's tests (tests/engine_cuda/): whether the CUDA engine can run here,
// and the skip every gpu-labelled test starts with. Includes no CUDA header.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/device.h"

namespace napkin::test {

// Empty when the CUDA engine can run here, else why not.
inline std::string cuda_engine_unavailable() {
    std::string reason;
    return cuda_engine_api(&reason) != nullptr ? std::string() : reason;
}

}  // namespace napkin::test

#define NAPKIN_SKIP_WITHOUT_CUDA_ENGINE()                                             \
    do {                                                                              \
        const std::string napkin_reason_ = ::napkin::test::cuda_engine_unavailable(); \
        if (!napkin_reason_.empty()) {                                                \
            GTEST_SKIP() << "no CUDA device (" << napkin_reason_                      \
                         << "): the CUDA engine is compiled but not run";             \
        }                                                                             \
    } while (0)
