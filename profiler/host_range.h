// ScopedRange: RAII instrumentation for host code. It records one complete RangeEvent (start at
// construction, duration at destruction) into a Recorder:
//
//     profiler::ScopedRange r(recorder, "h.3.attn.qkv", profiler::Category::op,
//                             matmul_forward_cost(shape));
//     matmul_forward(...);
//
// With a null recorder (profiling off) it does nothing but compare a pointer twice: no clock
// read, no copy of the name, no allocation. The name is copied when profiling is on, so a
// temporary ("h." + std::to_string(l) + ".attn") is fine.
//
// NVTX hook: in CUDA builds that find the header-only NVTX3 (nvtx3/nvToolsExt.h), every range
// is also pushed as an NVTX range, whether or not a Recorder is attached, so Nsight Systems
// shows the same names. Nothing here includes a CUDA header.
// Tests: tests/profiler/event_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/cost.h"
#include "profiler/event.h"

// ---- NVTX hook (CUDA builds only) --------------------------------------------------------
#if defined(NAPKIN_HAVE_CUDA) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define NAPKIN_HAVE_NVTX 1
#endif
#endif
// -------------------------------------------------------------------------------------------

namespace napkin::profiler {

namespace detail {
// The work of a range when profiling is on, out of line (host_range.cpp) so that the inline
// part is a pointer test at each end when it is off. Both swallow failures: a range that
// cannot be recorded is counted as dropped.
void begin_range(std::optional<RangeEvent>& slot, Recorder& recorder, std::string_view name,
                 Category category, const KernelCost& cost, TrackId track) noexcept;
void end_range(std::optional<RangeEvent>& slot, Recorder& recorder) noexcept;
}  // namespace detail

// Translation units built with and without the hook get differently mangled classes, so a
// program mixing them (a CUDA engine, a CPU-only test) cannot link one's constructor with the
// other's destructor and unbalance the NVTX stack.
#if defined(NAPKIN_HAVE_NVTX)
inline namespace with_nvtx {
#else
inline namespace without_nvtx {
#endif

class ScopedRange {
public:
    ScopedRange(Recorder* recorder, std::string_view name, Category category,
                const KernelCost& cost = {}, TrackId track = kHostTrack) noexcept
        : recorder_(recorder) {
#if defined(NAPKIN_HAVE_NVTX)
        nvtx_push(name);
#endif
        if (recorder_ != nullptr)
            detail::begin_range(event_, *recorder_, name, category, cost, track);
    }

    ~ScopedRange() {
        if (event_.has_value()) detail::end_range(event_, *recorder_);
#if defined(NAPKIN_HAVE_NVTX)
        nvtxRangePop();
#endif
    }

    ScopedRange(const ScopedRange&) = delete;
    ScopedRange& operator=(const ScopedRange&) = delete;

    bool active() const {
        return event_.has_value();
    }

    // The work may only be known once the range is open (a fused op picks its kernel late).
    void set_cost(const KernelCost& cost) {
        if (!event_) return;
        event_->flops = cost.flops;
        event_->bytes = cost.bytes();
    }
    // A free-form arg for the trace ("tokens", 8192). Ignored when profiling is off.
    void add_arg(std::string_view key, ArgValue value) noexcept {
        if (!event_) return;
        try {
            event_->args.push_back(Arg{std::string(key), std::move(value)});
        } catch (...) {  // the arg is lost, the range is kept
        }
    }

private:
#if defined(NAPKIN_HAVE_NVTX)
    // nvtxRangePushA wants a NUL-terminated string and copies it at once.
    static void nvtx_push(std::string_view name) noexcept {
        char buf[128];
        const std::size_t n = name.size() < sizeof buf - 1 ? name.size() : sizeof buf - 1;
        name.copy(buf, n);
        buf[n] = '\0';
        nvtxRangePushA(buf);
    }
#endif

    Recorder* recorder_;
    std::optional<RangeEvent> event_;  // engaged while a profiled range is open
};

// Opens `r` as a kernel range on the device track and joins it to the range open on the host
// track (the op that made the call) with a launch flow. A CPU kernel is timed on the host this
// way, so CPU and GPU traces share one structure. No-op with a null recorder.
inline void begin_kernel(std::optional<ScopedRange>& r, Recorder* recorder, std::string_view name,
                         const KernelCost& cost) noexcept {
    if (recorder == nullptr) return;
    r.emplace(recorder, name, Category::kernel, cost, kDeviceTrack);
    const std::int64_t t = recorder->now_ns();
    const std::uint64_t id = recorder->next_flow_id();
    recorder->flow("launch", FlowPhase::start, id, kHostTrack, t);
    recorder->flow("launch", FlowPhase::end, id, kDeviceTrack, t);
}

}  // inline namespace with_nvtx / without_nvtx
}  // namespace napkin::profiler
