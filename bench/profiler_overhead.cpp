// The profiler's cost: the same training steps with profiling off and on, in one process,
// alternated (off, on, off, on, ...) so that drift on a shared machine hits both alike. "On"
// pays everything `napkin train --profile all` pays per step: the ranges, kernel events and
// flows, draining the recorder, folding the events into the report's per-op table, and
// streaming them into a Chrome trace on disk. Both sides are timed the same way (around the
// whole step, outside the trainer). Medians over pairs; never run as a test.
// On a shared machine the off/on difference can drown in noise, so the benchmark also measures
// the profiler's own work directly: it replays one profiled step's events (each range opened
// and closed through ScopedRange, each kernel through begin_kernel with its two flow ends, each
// counter recorded) with no training between them, then drains, folds and writes them as "on"
// does. That is the cost of the instrumentation in a warm loop, without the cache pressure the
// training puts on it, so it is a floor, and the off/on difference the figure with everything.
//   OMP_WAIT_POLICY=passive profiler_overhead [--model tiny] [--pairs N] [-B 8] [-T 64]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/trainer.h"
#include "profiler/chrome_trace_writer.h"
#include "profiler/host_range.h"
#include "profiler/step_profile.h"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
    std::string model;
    std::int64_t B, T;
    double off_ms, on_ms, events_per_step;
    double direct_ms;  // the replayed step's instrumentation alone, median
};

// Records the ranges, kernel launches and counters of one profiled step again, back to back,
// then drains, folds and writes them. Returns the median seconds over `reps`.
double replay_cost(const std::vector<napkin::profiler::Event>& step, napkin::profiler::Recorder& recorder,
                   napkin::profiler::ChromeTraceWriter& trace, int reps) {
    using namespace napkin::profiler;
    StepProfile profile;
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const Event& e : step) {
            if (const auto* range = std::get_if<RangeEvent>(&e)) {
                napkin::KernelCost cost;
                cost.flops = range->flops;
                cost.bytes_read = range->bytes;
                if (range->category == Category::kernel) {
                    std::optional<ScopedRange> k;
                    begin_kernel(k, &recorder, range->name, cost);
                } else {
                    ScopedRange s(&recorder, range->name, range->category, cost, range->track);
                }
            } else if (const auto* c = std::get_if<CounterEvent>(&e)) {
                recorder.record(CounterEvent{c->name, recorder.now_ns(), c->values});
            }  // flows are made by begin_kernel; instants do not occur in a step
        }
        std::vector<Event> ev = recorder.take();
        profile.add(ev);
        trace.write(ev);
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(t);
}

Row measure(const std::string& preset, std::int64_t B, std::int64_t T, int pairs) {
    napkin::TrainOptions o;
    o.model = napkin::preset_or_throw(preset);
    o.plan.micro_batch = B;
    o.plan.seq_len = T;
    o.plan.precision = napkin::Precision::fp32;
    o.steps = 2 * pairs + 2;
    napkin::Trainer trainer(o);
    const std::filesystem::path trace_path =
        std::filesystem::temp_directory_path() / ("napkin_overhead_" + std::to_string(getpid()) + ".json");
    napkin::profiler::Recorder recorder(napkin::profiler::Recorder::kDefaultCapacity, trainer.allocator().start());
    napkin::profiler::ChromeTraceWriter trace(trace_path);
    napkin::profiler::StepProfile profile;
    trainer.step();  // warmup, off: first touch of every buffer
    trainer.set_recorder(&recorder);
    trainer.step();  // warmup, on: the recorder's buffer grows once
    trace.write(recorder.take());

    std::vector<double> off, on;
    std::vector<napkin::profiler::Event> last_step;
    double events = 0;
    auto step_off = [&] {
        trainer.set_recorder(nullptr);
        const auto t0 = std::chrono::steady_clock::now();
        trainer.step();
        off.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    auto step_on = [&] {
        trainer.set_recorder(&recorder);
        const auto t0 = std::chrono::steady_clock::now();
        trainer.step();
        std::vector<napkin::profiler::Event> ev = recorder.take();
        profile.add(ev);
        trace.write(ev);
        on.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        events += static_cast<double>(ev.size());
        last_step = std::move(ev);
    };
    // Pairs alternate their order (off-on, on-off, ...): whatever a step leaves behind for the
    // next one (cold caches after the trace write, sleeping threads) falls on both sides.
    for (int p = 0; p < pairs; ++p) {
        if (p % 2 == 0) {
            step_off();
            step_on();
        } else {
            step_on();
            step_off();
        }
    }
    trainer.set_recorder(nullptr);
    const double direct = replay_cost(last_step, recorder, trace, std::max(pairs, 5));
    trace.close();
    std::filesystem::remove(trace_path);
    if (recorder.dropped() != 0) std::fprintf(stderr, "profiler_overhead: %llu events dropped\n",
                                              static_cast<unsigned long long>(recorder.dropped()));
    return {preset, B, T, median(off) * 1e3, median(on) * 1e3, events / pairs, direct * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> models;
    int pairs = 15;
    std::int64_t B = 8, T = 64;
    for (int i = 1; i < argc; ++i) {
        const bool has = i + 1 < argc;
        if (std::strcmp(argv[i], "--model") == 0 && has) models.emplace_back(argv[++i]);
        else if (std::strcmp(argv[i], "--pairs") == 0 && has) pairs = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "-B") == 0 && has) B = std::atoll(argv[++i]);
        else if (std::strcmp(argv[i], "-T") == 0 && has) T = std::atoll(argv[++i]);
        else {
            std::fprintf(stderr, "usage: profiler_overhead [--model PRESET]... [--pairs N] [-B N] [-T N]\n");
            return 2;
        }
    }
    if (pairs <= 0 || B <= 0 || T <= 0) {
        std::fprintf(stderr, "profiler_overhead: --pairs, -B and -T must be positive\n");
        return 2;
    }
    if (models.empty()) models = {"tiny", "gpt2"};
    std::printf("profiler overhead: step time with profiling off vs on (ranges, kernel events, flows, per-op\n"
                "table, trace streamed to disk), alternated in one process, median of %d pairs, %u hardware threads;\n"
                "direct: one step's events replayed through the profiler alone (record, fold, write), median\n\n",
                pairs, std::thread::hardware_concurrency());
    std::printf("%-8s %4s %5s %12s %12s %10s %14s %11s %9s\n", "model", "B", "T", "off ms", "on ms", "overhead",
                "events/step", "direct ms", "direct");
    for (const std::string& m : models) {
        try {
            const Row r = measure(m, B, T, pairs);
            std::printf("%-8s %4lld %5lld %12.2f %12.2f %9.2f%% %14.0f %11.3f %8.2f%%\n", r.model.c_str(),
                        static_cast<long long>(r.B), static_cast<long long>(r.T), r.off_ms, r.on_ms,
                        100 * (r.on_ms / r.off_ms - 1), r.events_per_step, r.direct_ms, 100 * r.direct_ms / r.off_ms);
            std::fflush(stdout);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "profiler_overhead: %s: %s\n", m.c_str(), e.what());
            return 1;
        }
    }
    return 0;
}
