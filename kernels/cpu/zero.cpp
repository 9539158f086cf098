#include "kernels/zero.h"

#include <cstring>

namespace napkin::cpu {

void zero(const ZeroSpan* spans, int count) {
    for (int i = 0; i < count; ++i) {
        if (spans[i].bytes > 0) std::memset(spans[i].data, 0, spans[i].bytes);
    }
}

}  // namespace napkin::cpu
