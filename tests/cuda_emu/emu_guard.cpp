// The host guard's memory (emu_state.h): guarded allocations live in one reserved arena, in
// whole 64 KiB chunks, inaccessible (PROT_NONE) except to the emulated device. Opened lazily: a
// DeviceAccess changes no protection; the device's first touch of a chunk faults, and the
// SIGSEGV handler opens that chunk (if it belongs to a live allocation and a DeviceAccess is
// open) and notes it; the outermost DeviceAccess's end closes the chunks noted. A fault anywhere
// else, or while no DeviceAccess is open, goes to the handler that was there before (by default:
// the process dies, as a host read of device memory does on a GPU).
//
// Why lazily: opening and closing every allocation around every launch (mprotect of all their
// pages twice per launch) was two thirds of an emulated training step (a tiny GPT-2 step: 6.2 s
// with it, 2.2 s without the guard, on the 2-core dev VM under load); a launch touches a few of
// them.
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "tests/cuda_emu/emu_state.h"

namespace napkin::emu {

namespace {

constexpr std::uintptr_t kChunk = 64 * 1024;
constexpr std::uintptr_t kArenaBytes = std::uintptr_t{1} << 40;  // 1 TiB of address space
constexpr std::size_t kChunks = kArenaBytes / kChunk;
constexpr std::size_t kOpenedCapacity = 8192;

// Written under the emulator's mutex (emu_cudart.cpp), read by the handler without it: every
// field the handler reads is atomic, and the arena's bounds never change once reserved.
std::atomic<std::uintptr_t> g_lo{0};           // the arena's start (0: not reserved yet)
std::atomic<std::uintptr_t> g_next{0};         // the next free chunk (allocations only grow it)
std::atomic<std::uint64_t>* g_live = nullptr;  // one bit per chunk of a live allocation
std::atomic<int> g_depth{0};                   // DeviceAccess nesting
struct Opened {
    std::atomic<std::uintptr_t> start{0}, bytes{0};
};
Opened g_opened[kOpenedCapacity];
std::atomic<std::size_t> g_opened_count{0};
std::atomic<bool> g_all_open{false};  // more chunks opened than noted: the whole used arena is
struct sigaction g_previous {};

bool live(std::uintptr_t chunk) {
    return (g_live[chunk / 64].load(std::memory_order_acquire) >> (chunk % 64)) & 1u;
}

void set_live(std::uintptr_t first, std::uintptr_t count, bool on) {
    for (std::uintptr_t c = first; c < first + count; ++c) {
        const std::uint64_t bit = std::uint64_t{1} << (c % 64);
        if (on)
            g_live[c / 64].fetch_or(bit, std::memory_order_release);
        else
            g_live[c / 64].fetch_and(~bit, std::memory_order_release);
    }
}

void note_opened(std::uintptr_t start, std::uintptr_t bytes) {
    const std::size_t i = g_opened_count.fetch_add(1, std::memory_order_acq_rel);
    if (i < kOpenedCapacity) {
        g_opened[i].start.store(start, std::memory_order_relaxed);
        g_opened[i].bytes.store(bytes, std::memory_order_release);
        return;
    }
    // Too many to note: open the whole used arena; the close protects it whole.
    g_all_open.store(true, std::memory_order_release);
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    mprotect(reinterpret_cast<void*>(lo), g_next.load(std::memory_order_acquire) - lo,
             PROT_READ | PROT_WRITE);
}

// Async-signal-safe: atomics, mprotect, sigaction.
void on_segv(int sig, siginfo_t* info, void* context) {
    const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    if (g_depth.load(std::memory_order_acquire) > 0 && lo != 0 && a >= lo &&
        a < g_next.load(std::memory_order_acquire)) {
        const std::uintptr_t chunk = (a - lo) / kChunk;
        if (live(chunk)) {
            const std::uintptr_t start = lo + chunk * kChunk;
            if (mprotect(reinterpret_cast<void*>(start), kChunk, PROT_READ | PROT_WRITE) == 0) {
                note_opened(start, kChunk);
                return;  // the access runs again, now allowed
            }
        }
    }
    // Not the device's: whoever handled SIGSEGV before, or the default action when the faulting
    // access runs again.
    if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
        g_previous.sa_sigaction(sig, info, context);
    } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
               g_previous.sa_handler != nullptr) {
        g_previous.sa_handler(sig);
    } else {
        signal(SIGSEGV, SIG_DFL);
    }
}

// The arena and the handler, once; false when the address space cannot be had.
bool reserve() {
    if (g_lo.load(std::memory_order_acquire) != 0) return true;
    void* arena =
        mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) return false;
    void* bits = mmap(nullptr, kChunks / 8, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (bits == MAP_FAILED) {
        munmap(arena, kArenaBytes);
        return false;
    }
    g_live = static_cast<std::atomic<std::uint64_t>*>(bits);  // zero pages: nothing live
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
    const auto lo = reinterpret_cast<std::uintptr_t>(arena);
    g_next.store(lo, std::memory_order_release);
    g_lo.store(lo, std::memory_order_release);
    return true;
}

std::uintptr_t chunks_of(std::size_t bytes) {
    return (static_cast<std::uintptr_t>(bytes) + kChunk - 1) / kChunk;
}

}  // namespace

void* guarded_allocate(std::size_t bytes) {
    if (!reserve()) return nullptr;
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    const std::uintptr_t start = g_next.load(std::memory_order_acquire);
    const std::uintptr_t n = chunks_of(bytes);
    if (start + n * kChunk > lo + kArenaBytes) return nullptr;  // the arena is spent
    auto* p = reinterpret_cast<void*>(start);
    if (mprotect(p, n * kChunk, PROT_READ | PROT_WRITE) != 0) return nullptr;
    std::memset(p, 0xff, bytes);  // not zero: nothing promises cudaMalloc'd memory is
    set_live((start - lo) / kChunk, n, true);
    g_next.store(start + n * kChunk, std::memory_order_release);
    if (g_depth.load(std::memory_order_acquire) == 0)
        mprotect(p, n * kChunk, PROT_NONE);
    else
        note_opened(start, n * kChunk);
    return p;
}

bool guarded(const void* p) {
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return lo != 0 && a >= lo && a < lo + kArenaBytes;
}

void guarded_free(void* p, std::size_t bytes) {
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t n = chunks_of(bytes);
    set_live((start - lo) / kChunk, n, false);  // a later touch is a use after free: it faults
    mprotect(p, n * kChunk, PROT_NONE);
    madvise(p, n * kChunk, MADV_DONTNEED);  // the pages go back; the addresses are not reused
}

void guard_open() {
    g_depth.fetch_add(1, std::memory_order_acq_rel);
}

void guard_close() {
    if (g_depth.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    const std::uintptr_t lo = g_lo.load(std::memory_order_acquire);
    if (g_all_open.exchange(false, std::memory_order_acq_rel)) {
        mprotect(reinterpret_cast<void*>(lo), g_next.load(std::memory_order_acquire) - lo,
                 PROT_NONE);
    } else {
        // One call over the span of what was opened: every other chunk in it is closed already
        // (only this access opened any), and each mprotect that takes a right away flushes the
        // TLB of every core the process runs on: one per launch, not one per chunk touched
        // (an emulated tiny GPT-2 step: 18% of its time was those flushes).
        const std::size_t n =
            std::min(g_opened_count.load(std::memory_order_acquire), kOpenedCapacity);
        std::uintptr_t first = UINTPTR_MAX, last = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::uintptr_t start = g_opened[i].start.load(std::memory_order_relaxed);
            first = std::min(first, start);
            last = std::max(last, start + g_opened[i].bytes.load(std::memory_order_acquire));
        }
        if (first < last) mprotect(reinterpret_cast<void*>(first), last - first, PROT_NONE);
    }
    g_opened_count.store(0, std::memory_order_release);
}

}  // namespace napkin::emu
