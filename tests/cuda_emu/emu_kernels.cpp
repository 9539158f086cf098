// The emulator's kernel scheduler (tests/cuda_emu/cuda_emu.h says what it models): a launch runs
// its blocks one after another on the calling thread, each block's threads as fibers
// (Boost.Context: a switch is a few register moves, no system call) that run until they reach a
// barrier. When every runnable fiber waits, the barriers whose threads have all arrived are
// released, each waiter with its result (the shuffled value, the ballot, the block's predicate).
// Nothing releasable is a deadlock, reported with who waits where, as is a barrier that threads
// which have returned can no longer reach.
#include <sys/mman.h>

#include <cupti_runtime_cbid.h>
#include <boost/context/fiber.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "tests/cuda_emu/cuda_emu.h"
#include "tests/cuda_emu/emu_state.h"
#include "tests/cuda_emu/emu_trace.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define NAPKIN_EMU_ASAN 1
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace napkin::emu {

namespace {

namespace ctx = boost::context;

// A kernel's locals, plus what AddressSanitizer adds to them; guard page below.
constexpr std::size_t kStackBytes = 256 * 1024;
constexpr int kWarp = 32;
// Dynamic shared memory's alignment: what a kernel may ask of an extern __shared__ array
// (__align__(128)), more than the 32 bytes a WMMA pointer needs.
constexpr std::size_t kSharedAlign = 128;

// The launch's dynamic shared memory: exactly as many bytes as asked, so that AddressSanitizer
// sees a read past its end.
struct AlignedDelete {
    void operator()(unsigned char* p) const {
        ::operator delete (p, std::align_val_t{kSharedAlign});
    }
};
using SharedBytes = std::unique_ptr<unsigned char, AlignedDelete>;

enum class State : std::uint8_t { kReady, kWaiting, kDone };

struct Fiber {
    ctx::fiber context;  // the thread, where it stopped (empty once it has returned)
    ctx::fiber caller;   // inside the thread: the scheduler, to go back to
    char* stack = nullptr;
    State state = State::kReady;
    uint3 index{};
    SyncRequest request;
    const char* what = nullptr;  // the intrinsic it waits in
    std::uint64_t result = 0;
    void* fake_stack = nullptr;  // AddressSanitizer's, across switches
    int sleep = 0;               // rounds it sits out though ready (after a bar.arrive)
};

// Fiber stacks, mapped once and reused by every launch: Boost.Context gets them preallocated
// and gives them back to this no-op allocator. Last freed, first taken: a kernel without
// barriers runs all its threads on one stack, which stays in cache.
class StackPool {
public:
    char* take() {
        if (free_.empty()) {
            void* p = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) throw std::bad_alloc();
            mprotect(p, kPage, PROT_NONE);  // an overflowing kernel stack faults, not corrupts
            return static_cast<char*>(p) + kPage;
        }
        char* s = free_.back();
        free_.pop_back();
        return s;
    }
    void give(char* stack) { free_.push_back(stack); }

private:
    static constexpr std::size_t kPage = 4096;
    std::vector<char*> free_;
};

struct KeepStack {
    ctx::stack_context allocate() { throw std::logic_error("cuda-emu: stacks are preallocated"); }
    void deallocate(ctx::stack_context&) noexcept {}
};

// One of a block's named barriers (bar.sync / bar.arrive): the count it completes at while some
// thread has arrived, the arrivals so far and the threads that wait.
struct NamedBarrier {
    int threads = 0, arrived = 0;
    std::vector<Fiber*> waiting;
    std::vector<std::uint8_t> in;  // per thread of the block: arrived in this round
};
constexpr int kNamedBarriers = 16;
// The most scheduler rounds a thread sits out after arriving at a named barrier: more than the
// rounds a warpgroup takes from a barrier to its first wgmma's product.
constexpr int kArriveSleep = 24;

// The launch being run (one at a time: `g_launch_mutex`).
struct Run {
    const char* name = nullptr;
    const char* file = nullptr;
    int line = 0;
    const std::function<void()>* body = nullptr;
    std::vector<Fiber> fibers;
    Fiber* current = nullptr;
    const void* scheduler_stack = nullptr;  // for AddressSanitizer's switch annotations
    std::size_t scheduler_stack_size = 0;
    SharedBytes dynamic_shared;
    std::size_t dynamic_shared_bytes = 0;
    std::string failure;  // set inside a fiber (an exception) or by the scheduler
    std::array<NamedBarrier, kNamedBarriers> named;  // the running block's
    std::minstd_rand* rng = nullptr;                 // the running block's schedule
};

// NAPKIN_EMU_STATS=1: at exit, where the emulator's time went, per launch site (stderr).
class Stats {
public:
    void add(const char* name, const char* file, int line, std::uint64_t blocks,
             std::uint64_t threads, std::uint64_t ns) {
        if (!on_) return;
        std::lock_guard<std::mutex> lock(mutex_);
        Site& s = sites_[std::string(name) + " (" + file + ":" + std::to_string(line) + ")"];
        ++s.launches;
        s.threads += blocks * threads;
        s.ns += ns;
    }
    ~Stats() {
        if (!on_ || sites_.empty()) return;
        std::vector<std::pair<std::string, Site>> rows(sites_.begin(), sites_.end());
        std::sort(rows.begin(), rows.end(),
                  [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
        std::fprintf(stderr, "napkin cuda-emu: %12s %10s %14s  launch site\n", "seconds",
                     "launches", "threads");
        for (const auto& [site, s] : rows)
            std::fprintf(stderr, "napkin cuda-emu: %12.3f %10llu %14llu  %s\n",
                         static_cast<double>(s.ns) * 1e-9,
                         static_cast<unsigned long long>(s.launches),
                         static_cast<unsigned long long>(s.threads), site.c_str());
    }

private:
    struct Site {
        std::uint64_t launches = 0, threads = 0, ns = 0;
    };
    bool on_ = [] {
        const char* v = std::getenv("NAPKIN_EMU_STATS");
        return v != nullptr && *v != '\0' && *v != '0';
    }();
    std::mutex mutex_;
    std::map<std::string, Site> sites_;
};
Stats g_stats;

std::mutex g_launch_mutex;
StackPool g_stacks;
Run g_run;
std::uint64_t g_launches = 0;
std::map<std::string, std::uint64_t> g_launches_by_name;  // kernel -> launches that ran

// ---- switching, with AddressSanitizer told about each stack change ----

// From the scheduler: runs `f` until it waits or returns; with `unwind`, destroys a fiber left
// waiting by a failure instead (Boost.Context unwinds its stack, running its destructors).
void enter_fiber(Fiber& f, bool unwind = false) {
    g_run.current = &f;
    threadIdx = f.index;
#ifdef NAPKIN_EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
    if (unwind)
        f.context = ctx::fiber{};
    else
        f.context = std::move(f.context).resume();
#ifdef NAPKIN_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    g_run.current = nullptr;
}

#ifdef NAPKIN_EMU_ASAN
// Inside a fiber, once it runs again (or unwinds): back on its own stack.
struct Resumed {
    Fiber& f;
    ~Resumed() { __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr); }
};
#endif

// From inside a fiber: back to the scheduler, until it resumes this fiber.
void leave_fiber(Fiber& f) {
#ifdef NAPKIN_EMU_ASAN
    Resumed resumed{f};
    __sanitizer_start_switch_fiber(&f.fake_stack, g_run.scheduler_stack,
                                   g_run.scheduler_stack_size);
#endif
    f.caller = std::move(f.caller).resume();
}

// The thread's whole life: the kernel body, then back to the scheduler for good.
ctx::fiber fiber_main(Fiber& f, ctx::fiber&& scheduler) {
    f.caller = std::move(scheduler);
#ifdef NAPKIN_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_run.scheduler_stack, &g_run.scheduler_stack_size);
#endif
    try {
        (*g_run.body)();
    } catch (const ctx::detail::forced_unwind&) {
#ifdef NAPKIN_EMU_ASAN
        __sanitizer_start_switch_fiber(nullptr, g_run.scheduler_stack, g_run.scheduler_stack_size);
#endif
        throw;  // a failed launch unwinding the fibers it left waiting
    } catch (const std::exception& e) {
        if (g_run.failure.empty()) g_run.failure = std::string("threw: ") + e.what();
    } catch (...) {
        if (g_run.failure.empty()) g_run.failure = "threw a non-standard exception";
    }
    f.state = State::kDone;
#ifdef NAPKIN_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, g_run.scheduler_stack, g_run.scheduler_stack_size);
#endif
    return std::move(f.caller);
}

// ---- barriers ----

std::string where(const Fiber& f) {
    std::ostringstream os;
    os << "thread (" << f.index.x << ", " << f.index.y << ", " << f.index.z << ")";
    return os.str();
}

bool is_warp_kind(Sync k) {
    return k != Sync::kBlock && k != Sync::kNamed;
}

// The block barrier: released when every thread that has not returned waits at it. Returns
// false when it cannot be released yet; sets the failure when it never can.
bool release_block_barrier() {
    std::vector<Fiber*> waiting;
    std::size_t done = 0, elsewhere = 0;
    for (Fiber& f : g_run.fibers) {
        if (f.state == State::kDone)
            ++done;
        else if (f.state == State::kWaiting && f.request.kind == Sync::kBlock)
            waiting.push_back(&f);
        else
            ++elsewhere;
    }
    if (waiting.empty() || elsewhere > 0) return false;
    if (done > 0) {
        g_run.failure = std::to_string(waiting.size()) + " threads wait in " + waiting[0]->what +
                        " after " + std::to_string(done) + " of the block returned (" +
                        where(*waiting[0]) + " waits): a barrier not every thread reaches";
        return false;
    }
    std::uint64_t any = 0, all = 1, count = 0;
    for (const Fiber* f : waiting) {
        if (f->request.operand != waiting[0]->request.operand) {
            g_run.failure = std::string("the block's threads wait in different barriers: ") +
                            waiting[0]->what + " and " + f->what;
            return false;
        }
        any |= f->request.value;
        all &= f->request.value;
        count += f->request.value;
    }
    for (Fiber* f : waiting) {
        const int op = f->request.operand;
        f->result = op == 0 ? any : op == 1 ? all : count;
        f->state = State::kReady;
    }
    return true;
}

// The value lane `lane` receives from a released warp operation over `lanes` (indices into
// g_run.fibers by lane, -1 where the warp has no such thread).
using Lanes = std::array<Fiber*, kWarp>;

std::uint64_t warp_result(const Fiber& f, int lane, const Lanes& by_lane) {
    const SyncRequest& r = f.request;
    int src = lane;
    switch (r.kind) {
        case Sync::kSyncWarp:
        case Sync::kBlock:
        case Sync::kNamed:
        case Sync::kWarpOp:  // its results are in the lanes' own data (release_warp_op)
            return 0;
        case Sync::kBallot: {
            std::uint64_t bits = 0;
            for (int l = 0; l < kWarp; ++l)
                if (by_lane[l] != nullptr && (r.mask >> l & 1u) && by_lane[l]->request.value != 0)
                    bits |= 1u << l;
            return bits;
        }
        case Sync::kShflIdx:
            src = lane / r.width * r.width + (r.operand % r.width + r.width) % r.width;
            break;
        case Sync::kShflXor:
            src = lane ^ r.operand;
            if (src / r.width > lane / r.width) src = lane;  // a later group: its own value
            break;
        case Sync::kShflDown:
            src = lane % r.width + r.operand >= r.width ? lane : lane + r.operand;
            break;
        case Sync::kShflUp:
            src = lane % r.width < r.operand ? lane : lane - r.operand;
            break;
    }
    if (src < 0 || src >= kWarp || by_lane[src] == nullptr || !(r.mask >> src & 1u)) {
        g_run.failure = std::string(f.what) + " in " + where(f) + " reads lane " +
                        std::to_string(src) + ", which is not in its mask or not in the block";
        return 0;
    }
    return by_lane[src]->request.value;
}

// A warp collective (the WMMA calls) whose lanes all wait: checks that the warp is whole and its
// lanes agree on the operation, then runs it. Returns false (the failure set) when it is invalid.
bool release_warp_op(const Lanes& by_lane, std::size_t warp) {
    const Fiber& first = *by_lane[0];
    const std::string in_warp = std::string(first.what) + " in warp " + std::to_string(warp) +
                                " of the block (" + where(first) + ")";
    std::array<WarpCollective*, kWarp> ops{};
    for (int l = 0; l < kWarp; ++l) {
        if (by_lane[l] == nullptr) {
            g_run.failure = in_warp + ": the warp has " + std::to_string(l) +
                            " threads; the call needs all 32 lanes of a full warp";
            return false;
        }
        ops[l] = from_bits<WarpCollective*>(by_lane[l]->request.value);
        if (ops[l]->run != ops[0]->run) {
            g_run.failure = in_warp + ": lane " + std::to_string(l) + " waits in " +
                            by_lane[l]->what +
                            " of other types or arguments; all 32 lanes must make the same call";
            return false;
        }
    }
    const std::string error = ops[0]->run(ops.data());
    if (!error.empty()) {
        g_run.failure = in_warp + ": " + error;
        return false;
    }
    return true;
}

// Each warp whose named lanes all wait at the same warp operation is released.
bool release_warp_barriers() {
    const std::size_t n = g_run.fibers.size();
    bool released = false;
    for (std::size_t base = 0; base < n; base += kWarp) {
        Lanes by_lane{};
        for (std::size_t i = base; i < std::min(n, base + kWarp); ++i)
            by_lane[i - base] = &g_run.fibers[i];
        const Fiber* first = nullptr;
        for (const Fiber* f : by_lane)
            if (f != nullptr && f->state == State::kWaiting && is_warp_kind(f->request.kind)) {
                first = f;
                break;
            }
        if (first == nullptr) continue;
        const unsigned mask = first->request.mask;
        bool ready = true;
        for (int l = 0; l < kWarp && ready; ++l) {
            const Fiber* f = by_lane[l];
            if (f == nullptr || !(mask >> l & 1u)) continue;
            if (f->state == State::kDone) {
                g_run.failure = std::string(first->what) + " in " + where(*first) + " names lane " +
                                std::to_string(l) + ", which has returned";
                return false;
            }
            if (f->state != State::kWaiting || !is_warp_kind(f->request.kind))
                ready = false;
            else if (f->request.kind != first->request.kind || f->request.mask != mask ||
                     f->request.width != first->request.width) {
                g_run.failure = std::string("one warp's lanes wait in different operations: ") +
                                first->what + " in " + where(*first) + ", " + f->what + " in " +
                                where(*f);
                return false;
            }
        }
        if (!ready) continue;
        const int first_lane = static_cast<int>(first - &g_run.fibers[base]);
        if (!(mask >> first_lane & 1u)) {
            g_run.failure = std::string(first->what) + " in " + where(*first) +
                            " has a mask without its own lane";
            return false;
        }
        if (first->request.kind == Sync::kWarpOp && !release_warp_op(by_lane, base / kWarp))
            return false;
        std::array<std::uint64_t, kWarp> results{};
        for (int l = 0; l < kWarp; ++l)
            if (by_lane[l] != nullptr && (mask >> l & 1u))
                results[l] = warp_result(*by_lane[l], l, by_lane);
        if (!g_run.failure.empty()) return false;
        for (int l = 0; l < kWarp; ++l)
            if (by_lane[l] != nullptr && (mask >> l & 1u)) {
                by_lane[l]->result = results[l];
                by_lane[l]->state = State::kReady;
            }
        released = true;
    }
    return released;
}

// At the block's end: every named barrier counts from zero (no arrival left without a sync).
bool named_barriers_settled() {
    for (int id = 0; id < kNamedBarriers; ++id) {
        const NamedBarrier& b = g_run.named[static_cast<std::size_t>(id)];
        if (b.arrived == 0) continue;
        g_run.failure = "named barrier " + std::to_string(id) + " holds " +
                        std::to_string(b.arrived) + " of its " + std::to_string(b.threads) +
                        " arrivals when the block ends: an arrive that no sync completes";
        return false;
    }
    return true;
}

std::string deadlock_report() {
    std::ostringstream os;
    os << "deadlock: every thread waits and no barrier can be released;";
    int shown = 0;
    for (const Fiber& f : g_run.fibers)
        if (f.state == State::kWaiting && shown++ < 4) {
            os << " " << where(f) << " in " << f.what;
            if (f.request.kind == Sync::kNamed) {
                const NamedBarrier& b = g_run.named[static_cast<std::size_t>(f.request.operand)];
                os << " " << f.request.operand << " (" << b.arrived << " of " << b.threads
                   << " arrived)";
            }
            os << ";";
        }
    return os.str();
}

// A thread's fiber, made when it first runs, on a stack from the pool.
void start_fiber(Fiber& f) {
    f.stack = g_stacks.take();
    ctx::stack_context sctx;
    sctx.sp = f.stack + kStackBytes;
    sctx.size = kStackBytes;
    f.context =
        ctx::fiber(std::allocator_arg, ctx::preallocated(sctx.sp, sctx.size, sctx), KeepStack{},
                   [&f](ctx::fiber&& scheduler) { return fiber_main(f, std::move(scheduler)); });
}

// Runs one block to the end, or until a failure. Returns false on failure.
// The order of each round is shuffled, seeded per launch so that a failure reproduces: any two
// threads run in either order, as the hardware allows.
bool run_block(std::minstd_rand& rng) {
    for (Fiber& f : g_run.fibers) {
        f.state = State::kReady;
        f.fake_stack = nullptr;
        f.sleep = 0;
    }
    g_run.named = {};
    g_run.rng = &rng;
    std::vector<std::uint32_t> order(g_run.fibers.size());
    std::iota(order.begin(), order.end(), 0u);
    for (;;) {
        std::shuffle(order.begin(), order.end(), rng);
        for (std::uint32_t i : order) {
            Fiber& f = g_run.fibers[i];
            if (f.state != State::kReady) continue;
            if (f.sleep > 0) {
                --f.sleep;
                continue;
            }
            if (!f.context) start_fiber(f);
            enter_fiber(f);
            if (f.state == State::kDone) g_stacks.give(f.stack);
            if (!g_run.failure.empty()) return false;
        }
        if (std::all_of(g_run.fibers.begin(), g_run.fibers.end(),
                        [](const Fiber& f) { return f.state == State::kDone; }))
            return named_barriers_settled();
        // A named barrier completed by a thread of this round released its waiters already.
        const bool named = std::any_of(g_run.fibers.begin(), g_run.fibers.end(),
                                       [](const Fiber& f) { return f.state == State::kReady; });
        const bool warps = release_warp_barriers();
        if (!g_run.failure.empty()) return false;
        const bool block = !warps && !named && release_block_barrier();
        if (!g_run.failure.empty()) return false;
        if (!named && !warps && !block) {
            g_run.failure = deadlock_report();
            return false;
        }
    }
}

std::string config_error(const void* kernel, dim3 grid, dim3 block, std::size_t smem) {
    const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
    std::ostringstream os;
    if (threads == 0 || threads > kMaxThreadsPerBlock || block.z > 64)
        os << "block (" << block.x << ", " << block.y << ", " << block.z << ") has " << threads
           << " threads (1 to " << kMaxThreadsPerBlock << ")";
    else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
             grid.x > 2147483647u)
        os << "grid (" << grid.x << ", " << grid.y << ", " << grid.z << ") is out of range";
    else if (smem > static_cast<std::size_t>(dynamic_shared_limit(kernel)))
        os << smem << " bytes of dynamic shared memory, more than the "
           << dynamic_shared_limit(kernel)
           << " this kernel may have (cudaFuncSetAttribute raises the 48 KiB default)";
    return os.str();
}

}  // namespace

namespace {

// The fiber of the thread calling the intrinsic `what`; outside a kernel, a message and abort.
Fiber* current_fiber(const char* what) {
    Fiber* f = g_run.current;
    if (f == nullptr) {
        std::fprintf(stderr, "napkin cuda-emu: %s called outside a kernel\n", what);
        std::abort();
    }
    return f;
}

}  // namespace

std::uint64_t sync(const SyncRequest& request, const char* what) {
    Fiber* f = current_fiber(what);
    f->request = request;
    f->what = what;
    f->state = State::kWaiting;
    leave_fiber(*f);
    return f->result;
}

void yield(const char* what) {
    Fiber* f = current_fiber(what);
    f->what = what;  // stays ready: it runs again in the scheduler's next round
    leave_fiber(*f);
}

void named_barrier(int id, int threads, bool wait, const char* what) {
    Fiber* f = current_fiber(what);
    const int block = static_cast<int>(g_run.fibers.size());
    std::string bad;
    if (id < 1 || id >= kNamedBarriers)
        bad = "barrier " + std::to_string(id) + " (1 to 15; 0 is __syncthreads's)";
    else if (threads <= 0 || threads % kWarp != 0 || threads > block)
        bad = std::to_string(threads) + " threads (a multiple of 32, at most the block's " +
              std::to_string(block) + ")";
    NamedBarrier* b = bad.empty() ? &g_run.named[static_cast<std::size_t>(id)] : nullptr;
    if (b != nullptr && b->arrived > 0 && b->threads != threads)
        bad = std::to_string(threads) + " threads while it counts to " + std::to_string(b->threads);
    if (!bad.empty()) {
        g_run.failure = where(*f) + " in " + what + ": " + bad;
        f->what = what;
        f->state = State::kWaiting;  // never resumed: the launch fails
        leave_fiber(*f);
        return;
    }
    // A thread counts once a round: a second arrival means a round's arrivals mix with the next.
    const std::size_t rank = static_cast<std::size_t>(f - g_run.fibers.data());
    b->in.resize(g_run.fibers.size());
    if (b->in[rank] != 0) {
        g_run.failure = where(*f) + " in " + what + ": arrives at barrier " + std::to_string(id) +
                        " twice in one round (" + std::to_string(b->arrived) + " of " +
                        std::to_string(threads) + " arrived): the next round's arrival before " +
                        "this one completes";
        f->state = State::kWaiting;
        leave_fiber(*f);
        return;
    }
    b->in[rank] = 1;
    b->threads = threads;
    if (++b->arrived == threads) {
        // bar.sync and bar.arrive are warp instructions: whole warps arrive.
        for (std::size_t w = 0; w < b->in.size(); w += kWarp) {
            const std::size_t end = std::min(b->in.size(), w + kWarp);
            const auto lanes = std::count(b->in.begin() + static_cast<std::ptrdiff_t>(w),
                                          b->in.begin() + static_cast<std::ptrdiff_t>(end), 1);
            if (lanes != 0 && static_cast<std::size_t>(lanes) != end - w) {
                g_run.failure = "barrier " + std::to_string(id) + " completed with " +
                                std::to_string(lanes) + " of the lanes of warp " +
                                std::to_string(w / kWarp) + ": whole warps arrive at a barrier";
                f->state = State::kWaiting;
                leave_fiber(*f);
                return;
            }
        }
        for (Fiber* w : b->waiting)
            w->state = State::kReady;
        b->waiting.clear();
        b->arrived = 0;
        std::fill(b->in.begin(), b->in.end(), std::uint8_t{0});
    }
    if (!wait || b->arrived == 0) {
        // The thread goes on, but only after sitting out up to kArriveSleep of the scheduler's
        // rounds: the threads it released may run well ahead, as they may on a GPU, so that a
        // kernel that arrives before its data is ready reads it unready.
        f->what = what;
        f->sleep = static_cast<int>((*g_run.rng)() % (kArriveSleep + 1));
        leave_fiber(*f);
        return;
    }
    b->waiting.push_back(f);
    f->request = {Sync::kNamed, 0, 0, id, threads};
    f->what = what;
    f->state = State::kWaiting;
    leave_fiber(*f);
}

void* dynamic_shared_memory() {
    return g_run.dynamic_shared.get();
}

std::size_t dynamic_shared_bytes() {
    return g_run.dynamic_shared_bytes;
}

std::uint64_t launch_number() {
    return g_launches;
}

std::uint64_t launches_of(const std::string& kernel) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    const auto it = g_launches_by_name.find(kernel);
    return it == g_launches_by_name.end() ? 0 : it->second;
}

void warp_collective(WarpCollective& op, const char* what) {
    sync({Sync::kWarpOp, 0xffffffffu, to_bits(&op), 0, kWarp}, what);
}

namespace {

// run_kernel's work: false when the launch failed (its error set).
bool launch_blocks(const char* name, const char* file, int line, const void* kernel, dim3 grid,
                   dim3 block, std::size_t dynamic_smem, const std::function<void()>& body) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    if (g_run.body != nullptr) {
        std::fprintf(stderr, "napkin cuda-emu: %s launched from inside a kernel\n", name);
        std::abort();
    }
    const std::string bad = config_error(kernel, grid, block, dynamic_smem);
    if (!bad.empty()) {
        const std::string message =
            std::string(name) + " (" + file + ":" + std::to_string(line) + "): " + bad;
        std::fprintf(stderr, "napkin cuda-emu: %s\n", message.c_str());
        set_error(cudaErrorInvalidConfiguration, false, message);
        return false;
    }
    const DeviceAccess access;
    g_run = Run{};
    g_run.name = name, g_run.file = file, g_run.line = line, g_run.body = &body;
    gridDim = grid;
    blockDim = block;
    g_run.fibers.resize(std::size_t{block.x} * block.y * block.z);
    for (unsigned z = 0, i = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
            for (unsigned x = 0; x < block.x; ++x, ++i)
                g_run.fibers[i].index = uint3{x, y, z};
    std::minstd_rand rng(static_cast<std::uint32_t>(++g_launches));
    ++g_launches_by_name[name];
    g_run.dynamic_shared_bytes = dynamic_smem;
    if (dynamic_smem > 0)
        g_run.dynamic_shared.reset(static_cast<unsigned char*>(
            ::operator new (dynamic_smem, std::align_val_t{kSharedAlign})));
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = uint3{x, y, z};
                // Shared memory starts as garbage on the GPU: NaN bytes here, so a read before
                // a write shows.
                if (dynamic_smem > 0) std::memset(g_run.dynamic_shared.get(), 0xff, dynamic_smem);
                if (run_block(rng)) continue;
                std::ostringstream os;
                os << name << " (" << file << ":" << line << "), block (" << x << ", " << y << ", "
                   << z << "): " << g_run.failure;
                std::fprintf(stderr, "napkin cuda-emu: %s\n", os.str().c_str());
                set_error(cudaErrorLaunchFailure, true, os.str());
                for (Fiber& f : g_run.fibers)
                    if (f.context) {
                        enter_fiber(f, true);
                        g_stacks.give(f.stack);
                    }
                g_run.body = nullptr;
                return false;
            }
    g_run.body = nullptr;
    return true;
}

}  // namespace

void refuse_host_pointer(const char* name, const char* file, int line, int argument) {
    std::ostringstream os;
    os << name << " (" << file << ":" << line << "): argument " << argument
       << " is a host pointer, which the kernel cannot read on a GPU";
    std::fprintf(stderr, "napkin cuda-emu: %s\n", os.str().c_str());
    set_error(cudaErrorIllegalAddress, true, os.str());
}

void run_kernel(const char* name, const char* file, int line, const void* kernel, dim3 grid,
                dim3 block, std::size_t dynamic_smem, cudaStream_t stream,
                const std::function<void()>& body) {
    trace::ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    call.returned_at(trace::now());
    cudaError_t refused = cudaSuccess;
    const Route route_taken = route(stream, name, &refused);
    if (route_taken == Route::refused) return;  // the error is set for cudaGetLastError
    // What the launch does, now or at each launch of the graph a capture makes of it.
    Work work = [=](std::uint32_t correlation) {
        const std::uint64_t start = trace::now();
        if (!launch_blocks(name, file, line, kernel, grid, block, dynamic_smem, body)) return;
        const std::uint64_t end = trace::now();
        trace::kernel(correlation, name, grid, block, dynamic_smem, stream, start, end);
        g_stats.add(name, file, line, std::uint64_t{grid.x} * grid.y * grid.z,
                    std::uint64_t{block.x} * block.y * block.z, end - start);
    };
    if (route_taken == Route::record)
        record(stream, std::move(work));
    else
        work(call.correlation());
}

}  // namespace napkin::emu
