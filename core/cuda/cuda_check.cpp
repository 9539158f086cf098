#include "core/cuda/cuda_check.h"

#include <cublasLt.h>

namespace napkin::cuda {

void fail_status(const char* library, const char* expr, int code, const char* text,
                 const char* file, int line) {
    std::ostringstream os;
    os << library << " error " << code << " (" << (text != nullptr ? text : "?") << ") in " << expr
       << " at " << file << ":" << line;
    throw CudaError(os.str());
}

void fail_require(const char* expr, const std::string& msg, const char* file, int line) {
    std::ostringstream os;
    os << expr << " failed at " << file << ":" << line << ": " << msg;
    throw InternalError(os.str());
}

const char* status_text(cublasStatus_t s) {
    return cublasLtGetStatusString(s);
}

}  // namespace napkin::cuda
