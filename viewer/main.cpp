// napkin-view: the desktop viewer (`napkin view` starts it). Opens run folders and Chrome trace
// files; with --screenshot renders one view headless into a PNG and exits.
// Exit codes: 0 success, 1 a window or file that could not be made, 2 usage error.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "viewer/app.h"
#include "viewer/backend_glfw.h"
#include "viewer/huge_pages.h"

namespace {

using napkin::viewer::ViewId;

bool parse_size(const std::string& text, int& w, int& h) {
    char x = 0;
    char rest = 0;
    return std::sscanf(text.c_str(), "%d%c%d%c", &w, &x, &h, &rest) == 3 &&
           (x == 'x' || x == 'X') && w >= 64 && h >= 64 && w <= 8192 && h <= 8192;
}

}  // namespace

int main(int argc, char** argv) {
    napkin::viewer::use_huge_page_malloc(argv);
    CLI::App cli{
        "napkin-view: timeline, memory, kernels, compare and estimate views of napkin runs"};
    std::vector<std::string> paths;
    std::string screenshot, view = "timeline", size;
    int frames = 3;
    cli.add_option("paths", paths,
                   "Run folders (trace.json, memory.json, report.json) or Chrome trace files");
    cli.add_option("--screenshot", screenshot,
                   "Render headless into this PNG and exit (needs a display: xvfb-run -a)");
    cli.add_option("--view", view, "View to show first: timeline|memory|kernels|compare|estimate")
        ->capture_default_str();
    cli.add_option("--size", size,
                   "Window or PNG size WxH (default 1600x900 window, 1280x720 PNG)");
    cli.add_option("--frames", frames, "Frames rendered before a screenshot is taken")
        ->capture_default_str();
    try {
        cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return cli.exit(e);
        std::fprintf(stderr, "napkin view: error: %s (see napkin view --help)\n", e.what());
        return 2;
    }
    ViewId first = ViewId::timeline;
    bool known = false;
    for (std::size_t i = 0; i < napkin::viewer::kViewNames.size(); ++i) {
        if (napkin::viewer::kViewNames[i] == view) {
            first = static_cast<ViewId>(i);
            known = true;
        }
    }
    if (!known) {
        std::fprintf(stderr,
                     "napkin view: error: --view: unknown view '%s' (expected "
                     "timeline|memory|kernels|compare|estimate)\n",
                     view.c_str());
        return 2;
    }
    napkin::viewer::WindowOptions opt;
    opt.headless = !screenshot.empty();
    if (opt.headless) {
        opt.width = 1280;
        opt.height = 720;
    }
    if (!size.empty() && !parse_size(size, opt.width, opt.height)) {
        std::fprintf(
            stderr,
            "napkin view: error: --size: expected WxH between 64x64 and 8192x8192 (got '%s')\n",
            size.c_str());
        return 2;
    }
    if (frames < 1 || frames > 1000) {
        std::fprintf(stderr, "napkin view: error: --frames: expected 1..1000 (got %d)\n", frames);
        return 2;
    }
    try {
        // Files that cannot be used are shown in the window and the rest of the runs still open.
        // Headless, they are also printed, and the PNG (which shows them) ends with exit status 1.
        std::vector<napkin::viewer::RunData> runs;
        bool unusable = false;
        for (const std::string& p : paths)
            runs.push_back(napkin::viewer::load_run(p));
        if (opt.headless) {
            for (const auto& r : runs) {
                for (const std::string& e : r.errors)
                    std::fprintf(stderr, "napkin view: error: %s\n", e.c_str());
                for (const std::string& w : r.warnings)
                    std::fprintf(stderr, "napkin view: warning: %s\n", w.c_str());
                unusable = unusable || !r.errors.empty();
            }
        }
        napkin::viewer::GlfwBackend backend(opt);
        napkin::viewer::App app(std::move(runs));
        app.select(first);
        if (opt.headless) {
            for (int i = 0; i < frames; ++i)
                backend.frame([&] { app.draw(); });
            if (std::string err = backend.save_png(screenshot); !err.empty()) {
                std::fprintf(stderr, "napkin view: error: --screenshot: %s\n", err.c_str());
                return 1;
            }
            return unusable ? 1 : 0;
        }
        while (!backend.should_close())
            backend.frame([&] { app.draw(); });
    } catch (const std::exception& e) {
        std::fprintf(stderr, "napkin view: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
