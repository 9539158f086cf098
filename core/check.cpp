#include "core/check.h"

namespace napkin {

void fail_assert(const char* expr, const std::string& msg, const char* file, int line) {
    std::ostringstream os;
    os << "internal error: " << msg << " (" << expr << " failed at " << file << ":" << line << ")";
    throw InternalError(os.str());
}

}  // namespace napkin
