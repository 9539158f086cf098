// CuptiCollector: the GPU's own activity in the trace (CUPTI Activity API), napkin's side of it.
// It knows no CUDA or CUPTI type: the CUPTI calls live in the CUDA plugin
// (core/cuda/cupti_activity.cpp, in libnapkin_cuda.so) behind a GpuActivitySource, and records
// come back as plain GpuActivity structs (profiler/gpu_activity.h), which a CuptiTranslator
// (profiler/cupti_records.h) turns into events on the Recorder: kernels, memcpy and memset on
// a track per stream, runtime and driver calls on "cuda api", synchronization on "cuda sync",
// launch -> kernel flows, the engine's kernel names and costs on the kernels.
//
//     plugin table (core/cuda/cuda_engine_api.h)   GpuActivitySource   CuptiCollector
//     activity_enable / disable                    enable / disable    ctor / dtor
//     activity_push_external / pop_external        push / pop          push_kernel / pop_kernel
//     activity_timestamp                           timestamp_ns        clock pairs at each flush
//     activity_flush(wait, records, stats)         flush               flush -> translator
//
// Like libkineto's, the source is an interface so that tests feed synthetic records without a
// GPU (tests/profiler/cupti_collector_test.cpp); the real one is the CUDA engine device's
// (EngineDevice::activity_source, core/engine/cuda_device.cpp).
//
// It never stops the run it observes: sources report failures as counts (the plugin warns once
// on stderr), records lost to CUPTI or to the plugin's buffer cap are counted, and summary()
// goes into the trace's otherData and report.json, never silent. Not thread-safe: push, pop and
// flush come from the thread that runs the engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/cost.h"
#include "profiler/cupti_records.h"
#include "profiler/event.h"
#include "profiler/gpu_activity.h"
#include "profiler/host_range.h"

namespace napkin::profiler {

// The device side of GPU activity collection. Every call is noexcept: failures are counted in
// the stats flush() returns.
class GpuActivitySource {
public:
    virtual ~GpuActivitySource() = default;
    // Enables kernel, memcpy, memset, runtime, driver, synchronization and external-correlation
    // records. false, with the reason in *error, when collection cannot run.
    virtual bool enable(std::string* error) noexcept = 0;
    virtual void disable() noexcept = 0;  // after a final flush
    virtual void push_external(std::uint64_t id) noexcept = 0;
    virtual void pop_external() noexcept = 0;
    virtual std::uint64_t timestamp_ns() noexcept = 0;  // the records' clock, now
    // Appends the completed records to *out; wait: a forced flush, every buffer, also one with
    // a record still incomplete (call it once the device is idle: the trainer flushes after the
    // step's synchronize). *stats gets the totals since enable().
    virtual void flush(bool wait, std::vector<GpuActivity>* out,
                       GpuActivityStats* stats) noexcept = 0;
};

class CuptiCollector final : public KernelTagger {
public:
    CuptiCollector(Recorder& recorder, GpuActivitySource& source);
    ~CuptiCollector() override;  // flushes (wait) and disables the source
    CuptiCollector(const CuptiCollector&) = delete;
    CuptiCollector& operator=(const CuptiCollector&) = delete;

    bool active() const { return active_; }
    const std::string& error() const { return error_; }  // why not active

    // Around one engine kernel call: the device records it causes get `name`, `cost` and the
    // op range open on the recorder (an external correlation id links them; under a CUDA graph
    // capture, the nodes the call makes, whose launches run later).
    void push_kernel(std::string_view name, const KernelCost& cost) noexcept override;
    void pop_kernel() noexcept override;

    // Records a clock pair, takes the source's records and translates them onto the recorder.
    // Call it between steps, after the device is idle: it never runs inside a timed step.
    void flush(bool wait = true) noexcept;
    // The last flush: kernels whose launch never came are counted (unmatched_flows).
    void finish() noexcept;

    // Records lost. A refused buffer request is a cause, not more records: CUPTI counts the
    // records it could not write for want of that buffer among its dropped ones.
    std::uint64_t dropped() const { return stats_.dropped_records; }
    std::uint64_t failures() const { return stats_.failures + failures_; }
    std::uint64_t kernels() const { return translator_.kernels(); }
    const CuptiTranslator& translator() const { return translator_; }
    const GpuActivityStats& stats() const { return stats_; }

    // {"records", "kernels", "tagged", "dropped_records", "buffers_refused", "cupti_failures",
    //  "unmatched_flows"}: the trace's otherData.gpu_activity and report.json's
    // profile.gpu_activity (docs/FORMATS.md).
    nlohmann::json summary() const;

private:
    void clock_pair() noexcept;

    Recorder& recorder_;
    GpuActivitySource& source_;
    CuptiTranslator translator_;
    GpuActivityStats stats_;
    std::string error_;
    bool active_ = false;
    std::uint64_t next_external_ = 1;
    std::uint64_t failures_ = 0;  // on this side: out of memory while translating
    std::vector<GpuActivity> batch_;
};

}  // namespace napkin::profiler
