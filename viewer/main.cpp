// napkin-view: the desktop viewer (`napkin view` starts it). Opens run folders and Chrome trace
// files; with --screenshot renders one view headless into a PNG and exits. --view, --mode,
// --window, --find, --select, --range, --versus and --keys open it in a given state, so that any
// state has a command.
// Exit codes: 0 success, 1 a window or file that could not be made (or nothing to --select, or
// no path given that could be opened), 2 usage error.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "viewer/app.h"
#include "viewer/backend_glfw.h"
#include "viewer/huge_pages.h"

namespace {

namespace viewer = napkin::viewer;

struct Flags {
    std::vector<std::string> paths;
    std::string screenshot, view = "timeline", mode, window, range, size;
    int frames = 3;
    viewer::OpenOptions open;
    viewer::WindowOptions window_options;
};

bool parse_size(const std::string& text, int& w, int& h) {
    char x = 0;
    char rest = 0;
    return std::sscanf(text.c_str(), "%d%c%d%c", &w, &x, &h, &rest) == 3 &&
           (x == 'x' || x == 'X') && w >= 64 && h >= 64 && w <= 8192 && h <= 8192;
}

void add_options(CLI::App& cli, Flags& f) {
    cli.add_option("paths", f.paths,
                   "Run folders (trace.json, memory.json, report.json) or Chrome trace files");
    cli.add_option("--screenshot", f.screenshot,
                   "Render headless into this PNG and exit (needs a display: xvfb-run -a)");
    cli.add_option("--view", f.view, "View to show first: timeline|memory|kernels|compare|estimate")
        ->capture_default_str();
    cli.add_option("--mode", f.mode, "The kernels view's rows: kernels|ops|all (default kernels)");
    cli.add_option("--window", f.window,
                   "Time window of the timeline and memory views, START:END from the runs' start, "
                   "in s unless a unit is given (ns, us, ms, s): 0.75:0.8, 120ms:135ms");
    cli.add_option("--find", f.open.find, "Text for the timeline's find box: matches outlined");
    cli.add_option("--select", f.open.select,
                   "Select the first event with this name (else with it in its name); shown "
                   "when no --window is given");
    cli.add_flag("--keys", f.open.keys, "Show the list of keys (what ? shows)");
    cli.add_option("--range", f.range,
                   "Select a time range on the timeline, START:END as --window: its ops, kernels "
                   "and bytes summed under the lanes");
    cli.add_option("--versus", f.open.versus,
                   "The kernels view's second run (its name, else part of it): an A-vs-B table "
                   "of the first run against it");
    cli.add_option("--size", f.size,
                   "Window or PNG size WxH (default 1600x900 window, 1280x720 PNG)");
    cli.add_option("--frames", f.frames, "Frames rendered before a screenshot is taken")
        ->capture_default_str();
}

// The flags' values beyond CLI11's own checks; "" or the one line to print (exit 2).
std::string check_flags(Flags& f) {
    bool known = false;
    for (std::size_t i = 0; i < viewer::kViewNames.size(); ++i) {
        if (viewer::kViewNames[i] == f.view) {
            f.open.view = static_cast<viewer::ViewId>(i);
            known = true;
        }
    }
    if (!known) {
        return "--view: unknown view '" + f.view +
               "' (expected timeline|memory|kernels|compare|estimate)";
    }
    if (f.mode == "kernels" || f.mode == "ops" || f.mode == "all") {
        f.open.mode = f.mode == "kernels" ? viewer::StatScope::kernels
                      : f.mode == "ops"   ? viewer::StatScope::ops
                                          : viewer::StatScope::all;
    } else if (!f.mode.empty()) {
        return "--mode: unknown mode '" + f.mode + "' (expected kernels|ops|all)";
    }
    if (!f.window.empty()) {
        viewer::TimeWindow w;
        if (std::string err = viewer::parse_time_window(f.window, w); !err.empty())
            return "--window: " + err;
        f.open.window = w;
    }
    if (!f.range.empty()) {
        viewer::TimeWindow w;
        if (std::string err = viewer::parse_time_window(f.range, w); !err.empty())
            return "--range: " + err;
        f.open.range = w;
    }
    viewer::WindowOptions& opt = f.window_options;
    opt.headless = !f.screenshot.empty();
    if (opt.headless) {
        opt.width = 1280;
        opt.height = 720;
    }
    if (!f.size.empty() && !parse_size(f.size, opt.width, opt.height))
        return "--size: expected WxH between 64x64 and 8192x8192 (got '" + f.size + "')";
    if (f.frames < 1 || f.frames > 1000)
        return "--frames: expected 1..1000 (got " + std::to_string(f.frames) + ")";
    return "";
}

// Loads every path; files that cannot be used are shown in the window and the rest of the runs
// still open. They are also printed; `unusable` says whether any was.
std::vector<viewer::RunData> load_runs(const Flags& f, bool& unusable) {
    std::vector<viewer::RunData> runs;
    unusable = false;
    for (const std::string& p : f.paths) {
        // A merged trace (napkin export) opens as one run per run it merged.
        for (viewer::RunData& part : viewer::split_processes(viewer::load_run(p)))
            runs.push_back(std::move(part));
    }
    for (const auto& r : runs) {
        for (const std::string& e : r.errors)
            std::fprintf(stderr, "napkin view: error: %s\n", e.c_str());
        for (const std::string& w : r.warnings)
            std::fprintf(stderr, "napkin view: warning: %s\n", w.c_str());
        unusable = unusable || !r.errors.empty();
    }
    return runs;
}

int run(const Flags& f) {
    bool unusable = false;
    std::vector<viewer::RunData> runs = load_runs(f, unusable);
    // Paths given and none usable: the errors above are all a window would show.
    if (!f.window_options.headless && !runs.empty() &&
        std::all_of(runs.begin(), runs.end(),
                    [](const viewer::RunData& r) { return !r.errors.empty(); }))
        return 1;
    viewer::GlfwBackend backend(f.window_options);
    viewer::App app(std::move(runs));
    if (std::string err = app.open(f.open); !err.empty()) {
        std::fprintf(stderr, "napkin view: error: %s\n", err.c_str());
        return 1;
    }
    if (!f.window_options.headless) {
        while (!backend.should_close())
            backend.frame([&] { app.draw(); });
        return 0;
    }
    // The PNG shows the unusable files too, and then ends with exit status 1.
    for (int i = 0; i < f.frames; ++i)
        backend.frame([&] { app.draw(); });
    if (std::string err = backend.save_png(f.screenshot); !err.empty()) {
        std::fprintf(stderr, "napkin view: error: --screenshot: %s\n", err.c_str());
        return 1;
    }
    return unusable ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    viewer::use_huge_page_malloc(argv);
    CLI::App cli{
        "napkin-view: timeline, memory, kernels, compare and estimate views of napkin runs"};
    Flags f;
    add_options(cli, f);
    try {
        cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return cli.exit(e);
        std::fprintf(stderr, "napkin view: error: %s (see napkin view --help)\n", e.what());
        return 2;
    }
    if (std::string err = check_flags(f); !err.empty()) {
        std::fprintf(stderr, "napkin view: error: %s\n", err.c_str());
        return 2;
    }
    try {
        return run(f);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "napkin view: error: %s\n", e.what());
        return 1;
    }
}
