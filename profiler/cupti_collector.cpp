#include "profiler/cupti_collector.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace napkin::profiler {

CuptiCollector::CuptiCollector(Recorder& recorder, GpuActivitySource& source)
    : recorder_(recorder), source_(source), translator_(recorder) {
    active_ = source_.enable(&error_);
    if (active_) clock_pair();
}

CuptiCollector::~CuptiCollector() {
    if (!active_) return;
    flush(true);
    source_.disable();
}

void CuptiCollector::clock_pair() noexcept {
    // The pair's host time is the middle of the read, so the map is off by at most half of it;
    // the window tells the clock how far to trust the pair.
    const std::int64_t before = recorder_.now_ns();
    const std::uint64_t gpu = source_.timestamp_ns();
    const std::int64_t after = recorder_.now_ns();
    try {
        translator_.clock().add_pair(gpu, before + (after - before) / 2, after - before);
    } catch (...) {
        ++failures_;
    }
}

void CuptiCollector::push_kernel(std::string_view name, const KernelCost& cost) noexcept {
    if (!active_) return;
    const std::uint64_t id = next_external_++;
    try {
        translator_.register_external(id, std::string(name), cost, recorder_.open_op());
    } catch (...) {  // the kernel keeps CUPTI's name and no cost
        ++failures_;
    }
    source_.push_external(id);
}

void CuptiCollector::pop_kernel() noexcept {
    if (active_) source_.pop_external();
}

void CuptiCollector::flush(bool wait) noexcept {
    if (!active_) return;
    batch_.clear();
    source_.flush(wait, &batch_, &stats_);
    clock_pair();
    try {
        translator_.add(batch_);
    } catch (...) {
        ++failures_;
    }
    batch_.clear();
}

void CuptiCollector::finish() noexcept {
    if (!active_) return;
    flush(true);
    translator_.finish();
}

nlohmann::json CuptiCollector::summary() const {
    return {{"records", stats_.records},
            {"kernels", translator_.kernels()},
            {"tagged", translator_.tagged()},
            {"dropped_records", stats_.dropped_records},
            {"buffers_refused", stats_.buffers_refused},
            {"cupti_failures", failures()},
            {"unmatched_flows", translator_.unmatched_flows()}};
}

}  // namespace napkin::profiler
