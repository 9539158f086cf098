// CuptiCollector: GPU activity through the CUPTI Activity API (CUDA builds only; this header
// includes no CUDA or CUPTI header). It enables concurrent-kernel, memcpy, memset, runtime-API,
// synchronization and external-correlation records; CUPTI fills buffers it asks us for on its
// own thread; flush() (once a step) asks CUPTI for what is complete, without waiting for work
// still running, and hands the records to a CuptiTranslator (profiler/cupti_records.h), which
// records them as events.
//
// It never stops the run it observes (libkineto's rule): a CUPTI failure warns once on stderr
// and is counted (failures()); buffers are capped (kMaxBuffers in flight) and records CUPTI
// drops past the cap are counted (the trace's "dropped_events"), never silent.
//
// CUPTI's activity callbacks are process-wide C functions, so at most one collector is active
// in a process (a second reports !active()). Tests: tests/profiler/cupti_collector_test.cpp
// (label gpu; it skips without a device).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cost.h"
#include "profiler/event.h"

namespace napkin::profiler {

class CuptiCollector {
public:
    static constexpr std::size_t kBufferBytes = std::size_t{8} << 20;
    static constexpr std::size_t kMaxBuffers = 64;  // 512 MiB of records in flight at most

    explicit CuptiCollector(Recorder& recorder);
    ~CuptiCollector();  // flushes and disables activity collection
    CuptiCollector(const CuptiCollector&) = delete;
    CuptiCollector& operator=(const CuptiCollector&) = delete;

    bool active() const;
    const std::string& error() const;  // why not active

    // Around one kernel call: the engine names the kernel and its analytic cost; the kernel
    // record CUPTI later delivers gets both (an external correlation id links them).
    void push_kernel(std::string name, const KernelCost& cost);
    void pop_kernel();

    // Hands completed records to the recorder. wait: also wait for work still running (the
    // end of the run).
    void flush(bool wait = false);

    std::uint64_t dropped() const;   // records CUPTI or the buffer cap lost
    std::uint64_t failures() const;  // CUPTI calls that failed
    std::uint64_t kernels() const;   // kernel records translated

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace napkin::profiler
