// The WMMA fragment mappings of the running launch (tests/cuda_emu/emu_wmma.h): one random
// permutation per fragment type, drawn from the launch's number the first time the launch asks,
// so that a kernel relying on a mapping CUDA leaves unspecified fails, and fails the same way
// when run again.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "tests/cuda_emu/emu_wmma.h"

namespace napkin::emu::wmma {

namespace {

// Only the scheduler thread calls these, inside a launch (one launch at a time).
std::uint64_t g_launch = 0;
std::map<int, std::vector<std::uint16_t>> g_slots;

}  // namespace

const std::uint16_t* fragment_slots(int kind, int per_lane) {
    if (g_launch != launch_number()) {
        g_launch = launch_number();
        g_slots.clear();
    }
    std::vector<std::uint16_t>& slots = g_slots[kind];
    if (slots.empty()) {
        slots.resize(static_cast<std::size_t>(per_lane) * kLanes);
        std::iota(slots.begin(), slots.end(), std::uint16_t{0});
        std::mt19937_64 rng(g_launch * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(kind));
        std::shuffle(slots.begin(), slots.end(), rng);
    }
    return slots.data();
}

std::string check_pointer(const void* p, unsigned ldm, std::size_t element_bytes) {
    if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0)
        return "the matrix pointer is not 256-bit aligned (it must be 32-byte aligned)";
    if (ldm * element_bytes % 16 != 0)
        return "ldm " + std::to_string(ldm) + " is not a multiple of 16 bytes (of 8 elements of " +
               "a 16-bit type, 4 of float)";
    return {};
}

}  // namespace napkin::emu::wmma
