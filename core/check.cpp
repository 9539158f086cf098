#include "core/check.h"

namespace napkin {

namespace {

bool field_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::string name_fields(std::string_view marked, FieldNamer namer) {
    std::string out;
    out.reserve(marked.size());
    std::size_t i = 0;
    while (i < marked.size()) {
        std::size_t end = i + 1;
        if (marked[i] == '{' && end < marked.size() && marked[end] >= 'a' && marked[end] <= 'z') {
            while (end < marked.size() && field_char(marked[end]))
                ++end;
            if (end < marked.size() && marked[end] == '}') {
                const std::string_view field = marked.substr(i + 1, end - i - 1);
                out += namer != nullptr ? namer(field) : std::string(field);
                i = end + 1;
                continue;
            }
        }
        out += marked[i++];
    }
    return out;
}

void fail_assert(const char* expr, const std::string& msg, const char* file, int line) {
    std::ostringstream os;
    os << "internal error: " << msg << " (" << expr << " failed at " << file << ":" << line << ")";
    throw InternalError(os.str());
}

}  // namespace napkin
