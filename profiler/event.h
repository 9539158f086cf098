// The profiler's event model: what a run records, and nothing about how it is written or drawn
// (the Chrome trace writer, the memory snapshot and the viewer each read these types).
//
// Time base: every timestamp is int64 nanoseconds since the Recorder was created (the run
// start), on std::chrono::steady_clock. Writers convert to their own units (the Chrome trace
// uses microseconds as doubles); nothing else does.
//
// Events:
//  - RangeEvent: a complete interval [start_ns, start_ns + dur_ns) on one track, with the
//    work it did (flops, bytes, from the kernel's KernelCost) and free-form args;
//  - CounterEvent: values of one or more series of a named counter at one time (memory by
//    category: one counter "memory" with a series per category);
//  - InstantEvent: a point in time on one track ("checkpoint saved");
//  - FlowEvent: one end of an arrow between tracks (a kernel launch on the host and the kernel
//    on the device share a flow id).
//
// The run start defaults to the Recorder's creation; pass another time point to share a clock
// with something started earlier (the AccountingAllocator's start, so memory events and ranges
// need no offset). The Recorder is a plain object (no globals; whoever runs the engine owns one and
// passes a pointer, null meaning "profiling off"). Its buffer is capped: past the cap events are
// dropped and counted, never thrown. It is safe to record from several threads. Tests:
// tests/profiler/event_test.cpp.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/enum_names.h"

namespace napkin::profiler {

// What a range is. The writers put the name in the trace's "cat" field; the viewer groups by it.
enum class Category : std::uint8_t {
    step,     // one training step
    forward,  // the forward pass of a step
    backward,
    optimizer,
    layer,   // one transformer block, in one direction
    op,      // one op of the op plan on the host ("h.3.attn.qkv")
    kernel,  // one kernel as it ran on the device
    launch,  // the host side of an asynchronous kernel launch
    marker,  // anything else worth a point on the timeline
};
inline constexpr std::array kCategoryNames = {
    EnumName<Category>{Category::step, "step"},
    EnumName<Category>{Category::forward, "forward"},
    EnumName<Category>{Category::backward, "backward"},
    EnumName<Category>{Category::optimizer, "optimizer"},
    EnumName<Category>{Category::layer, "layer"},
    EnumName<Category>{Category::op, "op"},
    EnumName<Category>{Category::kernel, "kernel"},
    EnumName<Category>{Category::launch, "launch"},
    EnumName<Category>{Category::marker, "marker"},
};

// A timeline row: a host thread, the device, a CUDA stream. Ids start at 1 (trace viewers
// treat thread id 0 specially); the Chrome trace uses the id as "tid".
using TrackId = std::uint32_t;
inline constexpr TrackId kHostTrack = 1;    // the thread that runs the engine
inline constexpr TrackId kDeviceTrack = 2;  // kernels as the device ran them
struct Track {
    TrackId id = kHostTrack;
    std::string name;
    int sort_index = 0;  // rows are shown by increasing sort index
};

using ArgValue = std::variant<std::int64_t, double, std::string>;
struct Arg {
    std::string key;
    ArgValue value;
};

struct RangeEvent {
    std::string name;  // "h.3.attn.qkv", "step 12", "matmul_forward"
    Category category = Category::op;
    TrackId track = kHostTrack;
    std::int64_t start_ns = 0;
    std::int64_t dur_ns = 0;
    std::uint64_t flops = 0;  // 0 with bytes 0: not a compute range (a step, a layer)
    std::uint64_t bytes = 0;  // compulsory traffic, KernelCost::bytes()
    std::vector<Arg> args;
};

struct CounterValue {
    std::string series;  // "activations"; a single-valued counter uses "value"
    double value = 0.0;
};
struct CounterEvent {
    std::string name;  // "memory"
    std::int64_t t_ns = 0;
    std::vector<CounterValue> values;  // every series of the counter, each time
};

struct InstantEvent {
    std::string name;
    Category category = Category::marker;
    TrackId track = kHostTrack;
    std::int64_t t_ns = 0;
    std::vector<Arg> args;
};

// A flow joins the range enclosing the start (on its track at t_ns) to the range enclosing the
// end; both ends carry the same id and name.
enum class FlowPhase : std::uint8_t { start, end };
struct FlowEvent {
    std::string name;
    Category category = Category::launch;
    TrackId track = kHostTrack;
    std::int64_t t_ns = 0;
    std::uint64_t id = 0;
    FlowPhase phase = FlowPhase::start;
};

using Event = std::variant<RangeEvent, CounterEvent, InstantEvent, FlowEvent>;

// The result of writing a file: the profiler reports failures, it does not throw them.
struct WriteResult {
    bool ok = true;
    std::string error;  // "runs/a/trace.json: write failed (No space left on device)"
    explicit operator bool() const { return ok; }
};

class Recorder {
public:
    // At 100-200 bytes an event (names and args past 15 characters live on the heap), the
    // default cap holds ~150 MiB between two take()s.
    static constexpr std::size_t kDefaultCapacity = std::size_t{1} << 20;

    explicit Recorder(
        std::size_t capacity = kDefaultCapacity,
        std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now())
        : start_(start), capacity_(capacity) {
        tracks_.push_back(Track{kHostTrack, "host", 0});
        tracks_.push_back(Track{kDeviceTrack, "device (cpu kernels)", 1});
    }
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

    // Nanoseconds since the run start.
    std::int64_t now_ns() const noexcept { return to_ns(std::chrono::steady_clock::now()); }
    std::int64_t to_ns(std::chrono::steady_clock::time_point t) const noexcept {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t - start_).count();
    }
    std::chrono::steady_clock::time_point start() const noexcept { return start_; }

    // Adds a timeline row (another host thread, a CUDA stream) and returns its id. The host
    // and device tracks exist from the start; the CUDA backend renames the device track.
    TrackId add_track(std::string name, int sort_index) {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto id = static_cast<TrackId>(tracks_.size() + 1);
        tracks_.push_back(Track{id, std::move(name), sort_index});
        return id;
    }
    void rename_track(TrackId id, std::string name) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& t : tracks_) {
            if (t.id == id) t.name = std::move(name);
        }
    }
    std::vector<Track> tracks() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return tracks_;
    }

    // Keeps `e`, or drops and counts it when the buffer holds `capacity` events already.
    void record(Event&& e) noexcept {
        try {
            std::lock_guard<std::mutex> lock(mutex_);
            if (events_.size() >= capacity_) {
                ++dropped_;
                return;
            }
            events_.push_back(std::move(e));
        } catch (...) {  // out of memory or a broken mutex: lose the event, not the run
            dropped_.fetch_add(1);
        }
    }
    void counter(std::string_view name, std::int64_t t_ns, double value) noexcept {
        try {
            record(CounterEvent{std::string(name), t_ns, {CounterValue{"value", value}}});
        } catch (...) {
            dropped_.fetch_add(1);
        }
    }
    void instant(std::string_view name, Category category, TrackId track,
                 std::int64_t t_ns) noexcept {
        try {
            record(InstantEvent{std::string(name), category, track, t_ns, {}});
        } catch (...) {
            dropped_.fetch_add(1);
        }
    }
    void flow(std::string_view name, FlowPhase phase, std::uint64_t id, TrackId track,
              std::int64_t t_ns, Category category = Category::launch) noexcept {
        try {
            record(FlowEvent{std::string(name), category, track, t_ns, id, phase});
        } catch (...) {
            dropped_.fetch_add(1);
        }
    }

    // A fresh id for a flow (launch -> kernel), unique in the run.
    std::uint64_t next_flow_id() noexcept { return flow_ids_.fetch_add(1) + 1; }

    // Counts an event its producer could not even build (out of memory).
    void record_drop() noexcept { dropped_.fetch_add(1); }

    // The host track's op or optimizer range open now ("" when none): ScopedRange keeps it, the
    // CUPTI collector names the op of each kernel call it tags by it (a graph launch opens no op
    // range, so its kernels carry the op of their capture). Op ranges never nest. The engine's
    // thread only.
    const std::string& open_op() const noexcept { return open_op_; }
    void set_open_op(std::string_view name) { open_op_.assign(name); }
    void clear_open_op() noexcept { open_op_.clear(); }

    // Moves the buffered events out, oldest first (ranges are recorded when they end, so a
    // parent follows its children). Call it once a step to stream them into a writer: the cap
    // then bounds one step's events, not the run's.
    std::vector<Event> take() {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<Event> out;
        out.swap(events_);
        return out;
    }

    std::size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return events_.size();
    }
    std::size_t capacity() const { return capacity_; }
    std::uint64_t dropped() const noexcept { return dropped_.load(); }

private:
    std::chrono::steady_clock::time_point start_;
    std::size_t capacity_;
    mutable std::mutex mutex_;
    std::vector<Event> events_;
    std::vector<Track> tracks_;
    std::atomic<std::uint64_t> dropped_{0};
    std::atomic<std::uint64_t> flow_ids_{0};
    std::string open_op_;
};

}  // namespace napkin::profiler
