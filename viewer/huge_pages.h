// Loading a large trace touches hundreds of MB (the file, simdjson's index, the event arrays).
// On virtual machines a 4 KiB page fault costs microseconds, and faulting dominated the load
// time (bench/viewer_bench.cpp measures it). glibc (2.35+) can back its large allocations with
// transparent huge pages, but reads the switch only at process start: the viewer's main sets it
// and re-executes itself once, as cli/main.cpp does for OMP_WAIT_POLICY. Elsewhere a no-op.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace napkin::viewer {

inline void use_huge_page_malloc(char** argv) {
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr) return;
    const std::string value = tunables != nullptr && *tunables != 0
                                  ? std::string(tunables) + ":glibc.malloc.hugetlb=1"
                                  : std::string("glibc.malloc.hugetlb=1");
    setenv("GLIBC_TUNABLES", value.c_str(), 1);
    execv("/proc/self/exe", argv);
    // execv only returns on failure: go on with 4 KiB pages.
}

}  // namespace napkin::viewer
