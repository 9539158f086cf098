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

// Whether the CUDA device is the CPU emulator (tests/cuda_emu, docs/CUDA.md): the same code
// runs, at the CPU's speed (a tiny-model step takes seconds).
inline bool cuda_engine_emulated() {
    return probe_devices().name.rfind("napkin cuda-emu", 0) == 0;
}

}  // namespace napkin::test

// For tests too long for the emulator (many steps): they run on a GPU only.
#define NAPKIN_SKIP_ON_EMULATOR(why)                                                     \
    do {                                                                                 \
        if (::napkin::test::cuda_engine_emulated())                                      \
            GTEST_SKIP() << "on the CUDA emulator: " << why << "; runs on a GPU";        \
    } while (0)

#define NAPKIN_SKIP_WITHOUT_CUDA_ENGINE()                                             \
    do {                                                                              \
        const std::string napkin_reason_ = ::napkin::test::cuda_engine_unavailable(); \
        if (!napkin_reason_.empty()) {                                                \
            GTEST_SKIP() << "no CUDA device (" << napkin_reason_                      \
                         << "): the CUDA engine is compiled but not run";             \
        }                                                                             \
    } while (0)
