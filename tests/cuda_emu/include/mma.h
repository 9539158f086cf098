// The emulator's <mma.h>: the emulated kernels' include path puts this directory before the CUDA
// toolkit's (tests/cuda_emu/CMakeLists.txt), so `#include <mma.h>` in a kernels/cuda/*.cu file
// compiled for the emulator gets nvcuda::wmma on the CPU (tests/cuda_emu/emu_wmma.h). The
// toolkit's mma.h declares nothing outside nvcc; nvcc builds never see this file.
#pragma once

#include "tests/cuda_emu/emu_wmma.h"
