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
// NVTX hook: in CUDA builds (NAPKIN_HAVE_NVTX, set on napkin_profiler when the toolkit's
// header-only NVTX3 is found), every range is also an NVTX range in the "napkin" domain, its
// category (step, forward, op, ...) an NVTX category, whether or not a Recorder is attached,
// so Nsight Systems shows the same names. The NVTX calls are out of line (host_range.cpp);
// nothing here includes a CUDA or NVTX header, and without NVTX the hook compiles to nothing.
//
// KernelScope: one engine kernel call. On the CPU (host-timed) it is a kernel range on the
// device track joined to its op by a flow (begin_kernel below); on a GPU it tags the launches
// made inside it with the kernel's name and cost (KernelTagger: the CUPTI collector pushes an
// external correlation id), and the kernel's event comes later from the device's own records.
// Tests: tests/profiler/event_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/cost.h"
#include "profiler/event.h"

namespace napkin::profiler {

namespace detail {
// The work of a range when profiling is on, out of line (host_range.cpp) so that the inline
// part is a pointer test at each end when it is off. Both swallow failures: a range that
// cannot be recorded is counted as dropped.
void begin_range(std::optional<RangeEvent>& slot, Recorder& recorder, std::string_view name,
                 Category category, const KernelCost& cost, TrackId track) noexcept;
void end_range(std::optional<RangeEvent>& slot, Recorder& recorder) noexcept;
#if defined(NAPKIN_HAVE_NVTX)
// nvtxDomainRangePushEx in the "napkin" domain, the category as an NVTX category.
void nvtx_push(std::string_view name, Category category) noexcept;
void nvtx_pop() noexcept;
#endif
}  // namespace detail

// Tags the device work launched between push_kernel and pop_kernel with an engine kernel's
// name and analytic cost (profiler/cupti_collector.h implements it over CUPTI).
class KernelTagger {
public:
    virtual ~KernelTagger() = default;
    virtual void push_kernel(std::string_view name, const KernelCost& cost) noexcept = 0;
    virtual void pop_kernel() noexcept = 0;
};

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
        detail::nvtx_push(name, category);
#endif
        if (recorder_ != nullptr)
            detail::begin_range(event_, *recorder_, name, category, cost, track);
    }

    ~ScopedRange() {
        if (event_.has_value()) detail::end_range(event_, *recorder_);
#if defined(NAPKIN_HAVE_NVTX)
        detail::nvtx_pop();
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

// One engine kernel call (see the top of this file). Destroying or resetting it ends the call.
// GCC 12 sees the never-engaged optional's destructor as a read of uninitialized members
// (-Wmaybe-uninitialized, a known false positive with nested optionals); silenced here only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
class KernelScope {
public:
    KernelScope() = default;
    ~KernelScope() { reset(); }
    KernelScope(const KernelScope&) = delete;
    KernelScope& operator=(const KernelScope&) = delete;

    // CPU: a host-timed kernel range with its launch flow. No-op with a null recorder.
    void host_timed(Recorder* recorder, std::string_view name, const KernelCost& cost) noexcept {
        reset();
        begin_kernel(range_, recorder, name, cost);
    }
    // GPU: the launches until reset() carry name and cost. No-op with a null tagger.
    void tagged(KernelTagger* tagger, std::string_view name, const KernelCost& cost) noexcept {
        reset();
        if (tagger == nullptr) return;
        tagger->push_kernel(name, cost);
        tagger_ = tagger;
    }
    void reset() noexcept {
        if (tagger_ != nullptr) tagger_->pop_kernel();
        tagger_ = nullptr;
        if (range_.has_value()) range_.reset();
    }

private:
    std::optional<ScopedRange> range_;
    KernelTagger* tagger_ = nullptr;
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // inline namespace with_nvtx / without_nvtx
}  // namespace napkin::profiler
