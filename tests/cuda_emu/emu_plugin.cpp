// Only in the emulated CUDA backend plugin (libnapkin_cuda_emu_plugin.so), which runs the CUDA
// training engine on the CPU: its host code must never read or write device memory through a
// pointer (on a GPU that is a segfault), so the host guard (emu_state.h) is on there, unless
// NAPKIN_EMU_HOST_GUARD=0 asks otherwise or AddressSanitizer runs (its exact-size heap blocks
// catch a kernel reading past an allocation's end, which the guard's whole pages would hide).
#include <cstdint>
#include <cstdlib>

#include "tests/cuda_emu/emu_state.h"

namespace {

const bool g_host_guard = [] {
#if defined(__SANITIZE_ADDRESS__)
    const bool on = false;
#else
    const char* v = std::getenv("NAPKIN_EMU_HOST_GUARD");
    const bool on = v == nullptr || v[0] != '0';
#endif
    napkin::emu::set_host_guard(on);
    return on;
}();

}  // namespace

// For the engine's tests, which load this plugin (dlsym): the managed memory the engine asked
// for (tests/cuda_emu/emu_state.h ManagedStats), and a fresh count.
extern "C" void napkin_emu_managed_stats(napkin::emu::ManagedStats* out) {
    *out = napkin::emu::managed_stats();
}
extern "C" void napkin_emu_reset_managed_stats() {
    napkin::emu::reset_managed_stats();
}
// The copy stream's pinned staging and cross-stream waits (emu_state.h StreamStats).
extern "C" void napkin_emu_stream_stats(napkin::emu::StreamStats* out) {
    *out = napkin::emu::stream_stats();
}
extern "C" std::uint64_t napkin_emu_launches_of(const char* kernel) {
    return napkin::emu::launches_of(kernel);
}
// Captures, graph launches and the nodes they ran (emu_state.h GraphStats).
extern "C" void napkin_emu_graph_stats(napkin::emu::GraphStats* out) {
    *out = napkin::emu::graph_stats();
}
