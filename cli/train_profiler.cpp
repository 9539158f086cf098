#include "cli/train_profiler.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "profiler/memory_snapshot.h"

namespace napkin::cli {

TrainProfiler::TrainProfiler(Trainer& trainer, ProfileSteps steps,
                             const std::filesystem::path& out_dir)
    : trainer_(trainer), steps_(steps), out_dir_(out_dir) {
    for (AccountingAllocator* a : {&trainer.allocator(), &trainer.host_allocator()}) {
        if (steps.any() && a == &trainer.allocator()) continue;  // the host's feed nothing
        a->set_record_events(false);
        a->clear_events();
    }
    if (!steps.any()) return;
    recorder_ = std::make_unique<profiler::Recorder>(profiler::Recorder::kDefaultCapacity,
                                                     trainer.allocator().start());
    trace_ = std::make_unique<profiler::ChromeTraceWriter>(out_dir / "trace.json");
    if (!trace_->ok()) throw InputError(trace_->error());
}

void TrainProfiler::set_roofline(const profiler::Roofline& roofline) {
    profile_ = profiler::StepProfile(roofline);
}

void TrainProfiler::before_step(int s) {
    const bool profiled = this->profiled(s);
    if (on()) trainer_.set_recorder(profiled ? recorder_.get() : nullptr);
    if (trainer_.device() != nullptr && profiled && gpu_source_ == nullptr) {
        gpu_source_ = trainer_.device()->activity_source();
        if (gpu_source_ != nullptr) {
            gpu_activity_ = std::make_unique<profiler::CuptiCollector>(*recorder_, *gpu_source_);
            if (!gpu_activity_->active()) {
                std::fprintf(stderr,
                             "napkin: profiler: no GPU activity in the trace (%s); host ranges "
                             "only\n",
                             gpu_activity_->error().c_str());
                gpu_summary_ = profiler::GpuActivitySummary{.error = gpu_activity_->error()};
                gpu_activity_.reset();
            }
        }
    }
    trainer_.set_kernel_tagger(profiled ? gpu_activity_.get() : nullptr);
}

void TrainProfiler::after_step(int s, int last_step) {
    if (s + 1 == steps_.last) trainer_.allocator().set_record_events(false);
    if (gpu_activity_ == nullptr || !profiled(s)) return;
    if (s + 1 == steps_.last || s + 1 == last_step) {
        finish_gpu_activity();  // the steps after run without collection
    } else {
        gpu_activity_->flush(true);
    }
}

void TrainProfiler::record_device_memory(int s, const EngineDevice::MemoryUse& m) {
    if (trace_ == nullptr || !profiled(s)) return;
    recorder_->record(profiler::CounterEvent{"device memory",
                                             recorder_->now_ns(),
                                             {{"used", static_cast<double>(m.used_bytes)},
                                              {"total", static_cast<double>(m.total_bytes)}}});
}

void TrainProfiler::write_step(int s) {
    if (trace_ == nullptr) return;
    std::vector<profiler::Event> events = recorder_->take();
    profile_.add(events);
    const std::uint64_t before = trace_->bytes_written();
    trace_->write(events);
    // The second profiled step is a steady one (the first also writes the metadata).
    if (s + 1 == steps_.first + 1) {
        const std::string w = large_trace_warning(
            trace_->bytes_written(), trace_->bytes_written() - before, steps_.last - (s + 1));
        if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    }
}

void TrainProfiler::finish_gpu_activity() {
    trainer_.set_kernel_tagger(nullptr);
    gpu_activity_->finish();
    gpu_summary_ = gpu_activity_->summary().get<profiler::GpuActivitySummary>();
    gpu_activity_.reset();  // disables collection
}

void TrainProfiler::stop_collecting() {
    if (gpu_activity_ != nullptr) finish_gpu_activity();
}

void TrainProfiler::close() {
    if (trace_ == nullptr) return;
    trainer_.set_recorder(nullptr);
    for (const profiler::CounterEvent& c :
         profiler::memory_counter_events(trainer_.allocator().events())) {
        trace_->write_counter(c);
    }
    trace_->write_tracks(recorder_->tracks());
    trace_->set_other_data("dropped_events", recorder_->dropped());
    if (gpu_summary_) trace_->set_other_data("gpu_activity", *gpu_summary_);
    const profiler::WriteResult tr = trace_->close();
    if (!tr) throw InputError(tr.error);
    const profiler::WriteResult mr =
        profiler::write_memory_snapshot(trainer_.allocator(), out_dir_ / "memory.json");
    if (!mr) throw InputError(mr.error);
}

std::optional<profiler::ProfileReport> TrainProfiler::report() const {
    if (!on()) return std::nullopt;
    profiler::ProfileReport r = profile_.report();
    r.gpu_activity = gpu_summary_;
    return r;
}

void TrainProfiler::print_summary() const {
    if (on() && !profile_.steps().empty()) {
        double lowest = 1.0;
        for (const profiler::StepTiming& st : profile_.steps())
            lowest = std::min(lowest, st.coverage());
        std::printf(
            "  profile: %zu steps in %s (Perfetto: ui.perfetto.dev), op ranges cover >= %.1f%% "
            "of each; per-op table: napkin report %s\n",
            profile_.steps().size(), (out_dir_ / "trace.json").string().c_str(), 100 * lowest,
            out_dir_.string().c_str());
    }
    if (gpu_summary_ && !gpu_summary_->error) {
        const profiler::GpuActivitySummary& g = *gpu_summary_;
        std::printf(
            "  gpu activity: %llu kernels (%llu records with the engine's cost), %llu records "
            "dropped, %llu buffers refused, %llu CUPTI failures, %llu kernels without a launch\n",
            static_cast<unsigned long long>(g.kernels), static_cast<unsigned long long>(g.tagged),
            static_cast<unsigned long long>(g.dropped_records),
            static_cast<unsigned long long>(g.buffers_refused),
            static_cast<unsigned long long>(g.cupti_failures),
            static_cast<unsigned long long>(g.unmatched_flows));
    }
}

}  // namespace napkin::cli
