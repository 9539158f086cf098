// viewer_bench: the viewer's speed on a 1,000,000-event trace (the bar: load < 2 s, a
// frame < 16 ms zoomed out and zoomed in, 1920x1080 under Xvfb/llvmpipe). The trace is written by
// napkin's own ChromeTraceWriter: steps, passes, layers, ops each with a launch, a flow and a
// kernel on the device lane, and memory counters. Prints a table with the machine; never a test.
//   viewer_bench [--events N] [--trace PATH] [--reps N] [--frames N] [--no-baseline]
//   viewer_bench --write PATH [--events N]   (only writes the trace, to open it in napkin view)
// Frames are measured when built with NAPKIN_VIEWER and a display is present (xvfb-run -a).
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiler/chrome_trace_writer.h"
#include "viewer/huge_pages.h"
#include "viewer/run_data.h"
#if NAPKIN_VIEWER_FRAMES
#include <imgui.h>

#include "viewer/app.h"
#include "viewer/backend_glfw.h"
#endif

namespace {

namespace fs = std::filesystem;
namespace prof = napkin::profiler;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string load_average() {
    std::ifstream f("/proc/loadavg");
    std::string one;
    f >> one;
    return one.empty() ? "?" : one;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "unknown CPU";
}

// A GPT-like step: forward and backward over 12 layers of 10 ops; each op is a host range with
// a launch inside it, a flow to its kernel on the device lane, and every 4th op a memory sample.
std::uint64_t write_trace(const fs::path& path, std::uint64_t target_events) {
    prof::ChromeTraceOptions opt;
    opt.process_name = "viewer_bench";
    opt.other_data = {{"schema", "napkin-trace/1"}};
    prof::ChromeTraceWriter w(path, opt);
    w.write_tracks({prof::Track{prof::kHostTrack, "host", 0},
                    prof::Track{prof::kDeviceTrack, "device (synthetic)", 1}});
    static const char* kOps[] = {"ln_1", "attn.qkv", "attn.core", "attn.proj", "attn.res",
                                 "ln_2", "mlp.fc",   "mlp.act",   "mlp.proj",  "mlp.res"};
    static const char* kKernels[] = {"layernorm_forward", "matmul_forward",   "attention_forward",
                                     "matmul_forward",    "residual_forward", "layernorm_forward",
                                     "matmul_forward",    "gelu_forward",     "matmul_forward",
                                     "residual_forward"};
    std::int64_t t = 1000;
    std::uint64_t flow_id = 1;
    double mem = 1e8;
    for (int step = 0; w.events_written() < target_events; ++step) {
        const std::int64_t step_t0 = t;
        for (int pass = 0; pass < 2; ++pass) {
            const std::int64_t pass_t0 = t;
            for (int layer = 0; layer < 12; ++layer) {
                const std::int64_t layer_t0 = t;
                for (int op = 0; op < 10; ++op) {
                    const std::int64_t dur = 8000 + 1500 * op + 300 * ((step + layer) % 7);
                    const std::string name = "h." + std::to_string(layer) + "." + kOps[op];
                    prof::RangeEvent r;
                    r.name = pass == 0 ? name : name + ".bwd";
                    r.category = prof::Category::op;
                    r.start_ns = t;
                    r.dur_ns = dur;
                    r.flops = 2ull * 8 * 1024 * 768 * 768;
                    r.bytes = 3ull * 8 * 1024 * 768 * 2;
                    w.write_range(r);
                    prof::RangeEvent launch{"launch " + std::string(kKernels[op]),
                                            prof::Category::launch,
                                            prof::kHostTrack,
                                            t + 500,
                                            2000,
                                            0,
                                            0,
                                            {}};
                    w.write_range(launch);
                    w.write_flow(prof::FlowEvent{"launch", prof::Category::launch, prof::kHostTrack,
                                                 t + 1000, flow_id, prof::FlowPhase::start});
                    prof::RangeEvent k = r;
                    k.name = kKernels[op];
                    k.category = prof::Category::kernel;
                    k.track = prof::kDeviceTrack;
                    k.start_ns = t + 3000;
                    k.dur_ns = dur - 3500;
                    w.write_range(k);
                    w.write_flow(prof::FlowEvent{"launch", prof::Category::launch,
                                                 prof::kDeviceTrack, t + 3000, flow_id++,
                                                 prof::FlowPhase::end});
                    if (op % 4 == 0) {
                        mem += pass == 0 ? 2e6 : -2e6;
                        w.write_counter(prof::CounterEvent{
                            "memory", t, {{"parameters", 5e8}, {"activations", mem}}});
                    }
                    t += dur + 200;
                }
                w.write_range(prof::RangeEvent{"h." + std::to_string(layer),
                                               prof::Category::layer,
                                               prof::kHostTrack,
                                               layer_t0,
                                               t - layer_t0,
                                               0,
                                               0,
                                               {}});
            }
            w.write_range(
                prof::RangeEvent{pass == 0 ? "forward" : "backward",
                                 pass == 0 ? prof::Category::forward : prof::Category::backward,
                                 prof::kHostTrack,
                                 pass_t0,
                                 t - pass_t0,
                                 0,
                                 0,
                                 {}});
        }
        w.write_range(prof::RangeEvent{"step " + std::to_string(step),
                                       prof::Category::step,
                                       prof::kHostTrack,
                                       step_t0,
                                       t - step_t0,
                                       0,
                                       0,
                                       {}});
        t += 5000;
    }
    const std::uint64_t n = w.events_written();
    const prof::WriteResult r = w.close();
    if (!r) {
        std::fprintf(stderr, "viewer_bench: %s\n", r.error.c_str());
        std::exit(1);
    }
    return n;
}

struct Options {
    std::uint64_t events = 1000000;
    int reps = 3, frames = 30;
    bool baseline = true;
    std::string trace, write_only;
};

bool parse_options(int argc, char** argv, Options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--events" && has_value) {
            o.events = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--trace" && has_value) {
            o.trace = argv[++i];
        } else if (a == "--reps" && has_value) {
            o.reps = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--frames" && has_value) {
            o.frames = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--no-baseline") {
            o.baseline = false;
        } else if (a == "--write" && has_value) {
            o.write_only = argv[++i];
        } else {
            return false;
        }
    }
    return true;
}

void print_machine() {
    utsname u{};
    uname(&u);
    std::printf(
        "viewer_bench: %s, %ld CPUs, %s %s, load average %s (a shared machine: wall times include "
        "waiting)\n",
        cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release,
        load_average().c_str());
}

// Load: parse + build the lanes, depths, flows and counters, as `napkin view` does; `reps`
// times, each from cold memory. Prints the row and returns the last load.
napkin::viewer::RunData bench_load(const std::string& trace, int reps, double mb) {
    std::vector<double> load_s, load_cpu_s;
    napkin::viewer::RunData run;
    for (int r = 0; r < reps; ++r) {
        run = napkin::viewer::RunData{};  // freed first: every load starts from cold memory
        const auto t0 = Clock::now();
        const double c0 = cpu_seconds();
        run = napkin::viewer::load_run(trace);
        load_s.push_back(seconds_since(t0));
        load_cpu_s.push_back(cpu_seconds() - c0);
    }
    if (!run.errors.empty()) std::printf("load errors: %s\n", run.errors.front().c_str());
    const double n_events = static_cast<double>(run.trace.events.size() + run.trace.flows * 2);
    std::printf("\n%-44s %10s %10s %10s %12s %10s\n", "load", "median s", "max s", "CPU s",
                "events/s", "MB/s");
    std::printf(
        "%-44s %10.3f %10.3f %10.3f %12.3g %10.0f   (%.0f MB, %zu ranges, %lld flows, %zu counter "
        "series; bar: < 2 s)\n",
        "load_run (simdjson On-Demand + lanes/depths)", percentile(load_s, 0.5),
        *std::max_element(load_s.begin(), load_s.end()), percentile(load_cpu_s, 0.5),
        n_events / percentile(load_s, 0.5), mb / percentile(load_s, 0.5), mb,
        run.trace.events.size(), static_cast<long long>(run.trace.flows),
        run.trace.counters.size());
    return run;
}

// Baseline: nlohmann's DOM parse of the same file (parse only, no model built).
void bench_baseline(const std::string& trace, double n_events, double mb) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    std::ifstream f(trace);
    const nlohmann::json j = nlohmann::json::parse(f);
    const double s = seconds_since(t0);
    std::printf("%-44s %10.3f %10s %10.3f %12.3g %10.0f   (baseline: %zu array elements)\n",
                "nlohmann::json::parse (DOM only)", s, "-", cpu_seconds() - c0, n_events / s,
                mb / s, j["traceEvents"].size());
}

#if NAPKIN_VIEWER_FRAMES
namespace viewer = napkin::viewer;

struct FrameCase {
    const char* name;
    viewer::ViewId view;
    double window_ns;  // 0: fit the profiled window
};

// `frames` frames of one view after three of warm-up (and the tab switch); prints its row.
// "UI ms": the panel's own work (app.draw(), building the draw lists) inside the frame; the rest
// is ImGui's render, the upload and the rasterizer. "CPU ms": the process's CPU time per frame,
// llvmpipe's threads included: on a shared machine it moves less than the wall time.
void bench_case(viewer::GlfwBackend& backend, viewer::App& app, const FrameCase& c, int frames) {
    app.select(c.view);
    const auto& tr = app.runs()[0].trace;
    const double mid = 0.5 * static_cast<double>(tr.t_min_ns + tr.t_max_ns);
    app.time().window = c.window_ns > 0
                            ? viewer::TimeWindow{mid - 0.5 * c.window_ns, mid + 0.5 * c.window_ns}
                            : viewer::TimeWindow{};
    for (int i = 0; i < 3; ++i)
        backend.frame([&] { app.draw(); });
    std::vector<double> ms, ui_ms;
    const double cpu0 = cpu_seconds();
    for (int i = 0; i < frames; ++i) {
        const auto t0 = Clock::now();
        backend.frame([&] {
            const auto u0 = Clock::now();
            app.draw();
            ui_ms.push_back(seconds_since(u0) * 1e3);
        });
        ms.push_back(seconds_since(t0) * 1e3);
    }
    const double cpu_ms = (cpu_seconds() - cpu0) * 1e3 / frames;
    const auto& tl = app.timeline();
    const bool tl_view = c.view == viewer::ViewId::timeline;
    // rects: filled step-chart rects (timeline: counter lanes; memory: the bands).
    const long long rects = tl_view                            ? tl.counter_rects
                            : c.view == viewer::ViewId::memory ? app.memory().drawn_rects
                                                               : 0LL;
    std::printf("%-34s %10.2f %10.2f %10.2f %10.2f %10.2f %10d %10lld %10lld %10lld\n", c.name,
                percentile(ms, 0.5), percentile(ms, 0.9), *std::max_element(ms.begin(), ms.end()),
                cpu_ms, percentile(ui_ms, 0.5), ImGui::GetDrawData()->TotalVtxCount,
                tl_view ? static_cast<long long>(tl.drawn_boxes) : 0LL,
                tl_view ? static_cast<long long>(tl.merged_boxes) : 0LL, rects);
}

void bench_frames(viewer::RunData run, int frames) {
    if (std::getenv("DISPLAY") == nullptr) {
        std::printf("\nframes: skipped (no DISPLAY; run under xvfb-run -a)\n");
        return;
    }
    viewer::WindowOptions opt;
    opt.width = 1920;
    opt.height = 1080;
    opt.headless = true;
    viewer::GlfwBackend backend(opt);
    std::vector<viewer::RunData> runs;
    runs.push_back(std::move(run));
    viewer::App app(std::move(runs));
    std::printf("\nframes at %dx%d on %s (draw + rasterize, glFinish; bar: < 16 ms)\n", opt.width,
                opt.height, backend.renderer().c_str());
    std::printf("%-34s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "view", "median ms",
                "p90 ms", "max ms", "CPU ms", "UI ms", "vertices", "boxes", "merged", "rects");
    const FrameCase cases[] = {
        {"timeline, zoomed out (whole trace)", viewer::ViewId::timeline, 0},
        {"timeline, 10 ms window", viewer::ViewId::timeline, 1e7},
        {"timeline, zoomed in (50 us window)", viewer::ViewId::timeline, 5e4},
        {"memory (counters)", viewer::ViewId::memory, 0},
        {"kernels", viewer::ViewId::kernels, 0}};
    for (const FrameCase& c : cases)
        bench_case(backend, app, c, frames);
}
#endif

}  // namespace

int main(int argc, char** argv) {
    napkin::viewer::use_huge_page_malloc(argv);  // as napkin-view does
    Options o;
    if (!parse_options(argc, argv, o)) {
        std::fprintf(stderr,
                     "usage: viewer_bench [--events N] [--trace PATH] [--reps N] [--frames N] "
                     "[--no-baseline] | --write PATH [--events N]\n");
        return 2;
    }
    if (!o.write_only.empty()) {
        const std::uint64_t n = write_trace(o.write_only, o.events);
        std::printf("wrote %llu events to %s\n", static_cast<unsigned long long>(n),
                    o.write_only.c_str());
        return 0;
    }
    print_machine();
    const fs::path dir =
        fs::temp_directory_path() / ("napkin_viewer_bench_" + std::to_string(getpid()));
    if (o.trace.empty()) {
        fs::create_directories(dir);
        o.trace = (dir / "trace.json").string();
        const auto t0 = Clock::now();
        const std::uint64_t n = write_trace(o.trace, o.events);
        std::printf("wrote %llu events with ChromeTraceWriter in %.2f s\n",
                    static_cast<unsigned long long>(n), seconds_since(t0));
    }
    const double mb = static_cast<double>(fs::file_size(o.trace)) / 1e6;
    napkin::viewer::RunData run = bench_load(o.trace, o.reps, mb);
    const double n_events = static_cast<double>(run.trace.events.size() + run.trace.flows * 2);
    if (o.baseline) bench_baseline(o.trace, n_events, mb);
#if NAPKIN_VIEWER_FRAMES
    bench_frames(std::move(run), o.frames);
#else
    std::printf("\nframes: not measured (configure with -DNAPKIN_VIEWER=ON; --frames %d ignored)\n",
                o.frames);
#endif
    std::error_code ec;
    fs::remove_all(dir, ec);
    return 0;
}
