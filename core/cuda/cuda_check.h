// Checks for the CUDA backend (STYLE.md, "Errors: one policy per layer"): every CUDA runtime
// and cuBLAS(Lt) call goes through NAPKIN_GPU_CHECK (spelled NAPKIN_CUDA_CHECK or
// NAPKIN_CUBLAS_CHECK at the call site), which fails through one [[noreturn]] function that
// throws napkin::cuda::CudaError naming the library, the call as written, its status, file and
// line. Every kernel launch is followed by NAPKIN_CUDA_CHECK_LAUNCH(), which catches launch
// configuration errors at once (too many threads, too much shared memory); a fault inside a
// kernel is asynchronous and surfaces at the next checked synchronizing call.
// Preconditions of the CUDA kernels use NAPKIN_CUDA_REQUIRE (always on, throws
// napkin::InternalError like NAPKIN_ASSERT), not NAPKIN_ASSERT itself: libnapkin_cuda.so is
// dlopened and must not depend on symbols of napkin_core.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "core/check.h"

namespace napkin::cuda {

class CudaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The one failure point: throws CudaError("<library> error <code> (<text>) in <expr> at
// <file>:<line>").
[[noreturn]] void fail_status(const char* library, const char* expr, int code, const char* text,
                              const char* file, int line);
// Throws napkin::InternalError("<expr> failed at <file>:<line>: <msg>").
[[noreturn]] void fail_require(const char* expr, const std::string& msg, const char* file,
                               int line);

// Status adapters: one overload per library, so one macro serves them all.
inline bool status_ok(cudaError_t s) {
    return s == cudaSuccess;
}
inline const char* status_library(cudaError_t) {
    return "CUDA";
}
inline const char* status_text(cudaError_t s) {
    return cudaGetErrorString(s);
}
inline bool status_ok(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS;
}
inline const char* status_library(cublasStatus_t) {
    return "cuBLAS";
}
const char* status_text(cublasStatus_t s);  // cublasLtGetStatusString

}  // namespace napkin::cuda

#define NAPKIN_GPU_CHECK(expr)                                                                 \
    do {                                                                                       \
        const auto napkin_status_ = (expr);                                                    \
        if (!::napkin::cuda::status_ok(napkin_status_)) {                                      \
            ::napkin::cuda::fail_status(::napkin::cuda::status_library(napkin_status_), #expr, \
                                        static_cast<int>(napkin_status_),                      \
                                        ::napkin::cuda::status_text(napkin_status_), __FILE__, \
                                        __LINE__);                                             \
        }                                                                                      \
    } while (0)

#define NAPKIN_CUDA_CHECK(expr) NAPKIN_GPU_CHECK(expr)
#define NAPKIN_CUBLAS_CHECK(expr) NAPKIN_GPU_CHECK(expr)
// After every <<<...>>> launch.
#define NAPKIN_CUDA_CHECK_LAUNCH() NAPKIN_GPU_CHECK(cudaGetLastError())

#define NAPKIN_CUDA_REQUIRE(cond, msg)                                                         \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            std::ostringstream napkin_require_os_;                                             \
            napkin_require_os_ << msg;                                                         \
            ::napkin::cuda::fail_require(#cond, napkin_require_os_.str(), __FILE__, __LINE__); \
        }                                                                                      \
    } while (0)
