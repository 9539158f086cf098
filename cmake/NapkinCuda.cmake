# CUDA detection. NAPKIN_CUDA=AUTO turns the CUDA backend on when nvcc is found (by default
# under /usr/local/cuda); ON requires it; OFF never looks. With CUDA on, the program links
# cudart, cuBLAS/cuBLASLt, CUPTI, NVTX3 and NCCL, all of which load on a machine without a GPU
# or driver; whether a device exists is decided at run time (core/device.h).
set(NAPKIN_HAVE_CUDA OFF)
if(NOT NAPKIN_CUDA MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "NAPKIN_CUDA must be AUTO, ON or OFF (got '${NAPKIN_CUDA}')")
endif()

if(NOT NAPKIN_CUDA STREQUAL "OFF")
    if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
        set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
        if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
            # No GPU at build time in CI: name the targets (A100 and Hopper).
            set(CMAKE_CUDA_ARCHITECTURES 80 90)
        endif()
        enable_language(CUDA)
        set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flags for nvcc
        set(CMAKE_CUDA_STANDARD_REQUIRED ON)
        find_package(CUDAToolkit REQUIRED)
        find_library(NAPKIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
        find_path(NAPKIN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
        if(NOT NAPKIN_NCCL_LIBRARY OR NOT NAPKIN_NCCL_INCLUDE)
            message(FATAL_ERROR "CUDA found but NCCL (nccl.h, libnccl) not found next to it")
        endif()
        add_library(napkin_cuda_libs INTERFACE)
        target_link_libraries(napkin_cuda_libs INTERFACE CUDA::cudart CUDA::cublas CUDA::cublasLt
            CUDA::cupti CUDA::nvtx3 ${NAPKIN_NCCL_LIBRARY})
        target_include_directories(napkin_cuda_libs INTERFACE ${NAPKIN_NCCL_INCLUDE})
        target_compile_definitions(napkin_cuda_libs INTERFACE NAPKIN_HAVE_CUDA=1)
        target_compile_options(napkin_options INTERFACE
            $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>)
        set(NAPKIN_HAVE_CUDA ON)
        # The architectures of code that uses Hopper's wgmma (kernels/cuda/wgmma.cuh: the probe
        # and the attention candidates, never the engine), which exists only in sm_90a code:
        # sm_90 replaced by sm_90a (it runs on 9.0 devices alone), and added where the build
        # has no 90 (CI's sm_80-only build), so that ptxas checks the wgmma code on every build.
        string(REGEX REPLACE "(^|;)90(-real|-virtual)?(;|$)" "\\190a\\3"
            NAPKIN_CUDA_ARCHITECTURES_SM90A "${CMAKE_CUDA_ARCHITECTURES}")
        if(NOT "90a" IN_LIST NAPKIN_CUDA_ARCHITECTURES_SM90A)
            list(APPEND NAPKIN_CUDA_ARCHITECTURES_SM90A 90a)
        endif()
    elseif(NAPKIN_CUDA STREQUAL "ON")
        message(FATAL_ERROR "NAPKIN_CUDA=ON but no CUDA compiler was found "
                            "(looked for /usr/local/cuda/bin/nvcc and on PATH)")
    endif()
endif()

if(NAPKIN_HAVE_CUDA)
    set(NAPKIN_HAVE_CUDA_TEXT "on: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}")
else()
    set(NAPKIN_HAVE_CUDA_TEXT "off")
endif()
