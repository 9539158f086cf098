// The viewer as a user runs it, headless: two real CPU runs (fp32; bf16-amp with full
// checkpointing) are trained by the napkin binary, then `napkin view --screenshot` renders each
// view to a PNG that is read back and checked: not blank, and in the memory view every category
// holding a visible share of the peak is drawn in its colour. Needs a display (label gui: CI runs
// it under xvfb-run -a with Mesa's llvmpipe); skips without one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <stb_image.h>

#include "viewer/run_data.h"
#include "viewer/view.h"
#include "viewer/widgets.h"

#ifndef NAPKIN_BINARY
#error "NAPKIN_BINARY must name the napkin executable"
#endif

namespace napkin::viewer {
namespace {

namespace fs = std::filesystem;

struct Result {
    int rc = -1;
    std::string err;
};

std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Pixels of exactly colour c, and their mean x (-1 without any).
std::size_t count_of(const std::vector<unsigned char>& rgb, Rgb c, int w, float* mean_x = nullptr) {
    EXPECT_GT(w, 0);
    if (w <= 0) return 0;
    std::size_t n = 0;
    double sum_x = 0;
    for (std::size_t i = 0; i + 2 < rgb.size(); i += 3) {
        if (rgb[i] != c.r || rgb[i + 1] != c.g || rgb[i + 2] != c.b) continue;
        ++n;
        sum_x += static_cast<double>((i / 3) % static_cast<std::size_t>(w));
    }
    if (mean_x != nullptr)
        *mean_x = n > 0 ? static_cast<float>(sum_x / static_cast<double>(n)) : -1;
    return n;
}

// The longest horizontal run of exactly colour c: its length and its middle x.
struct Span {
    int length = 0;
    float middle = 0;
};
Span longest_run(const std::vector<unsigned char>& rgb, int w, int h, Rgb c) {
    Span best;
    EXPECT_EQ(rgb.size(), static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3u);
    if (rgb.size() != static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3u) return best;
    for (int y = 0; y < h; ++y) {
        int run = 0;
        for (int x = 0; x <= w; ++x) {
            const unsigned char* p =
                &rgb[(static_cast<std::size_t>(y) * w + std::min(x, w - 1)) * 3];
            if (x < w && p[0] == c.r && p[1] == c.g && p[2] == c.b) {
                ++run;
                continue;
            }
            if (run > best.length) best = {run, static_cast<float>(x - run) + 0.5f * run};
            run = 0;
        }
    }
    return best;
}

class ViewerGui : public testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new fs::path(fs::temp_directory_path() /
                            ("napkin_viewer_gui_" + std::to_string(getpid())));
        fs::remove_all(*dir_);
        fs::create_directories(*dir_);
        if (std::getenv("DISPLAY") == nullptr) return;  // every test skips
        const std::string common =
            " --device cpu --model tiny --steps 3 --micro-batch 4 --seq-len 64 --profile all "
            "--quiet";
        const Result a = run(std::string(NAPKIN_BINARY) + " train" + common + " --out " +
                             (*dir_ / "fp32").string());
        const Result b = run(std::string(NAPKIN_BINARY) + " train" + common +
                             " --precision bf16-amp --checkpointing full --out " +
                             (*dir_ / "bf16-ckpt").string());
        trained_ = a.rc == 0 && b.rc == 0;
        if (!trained_) train_error_ = a.err + b.err;
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(*dir_, ec);
        delete dir_;
    }
    void SetUp() override {
        if (std::getenv("DISPLAY") == nullptr)
            GTEST_SKIP() << "no DISPLAY: run the gui tests under xvfb-run -a";
        ASSERT_TRUE(trained_) << train_error_;
    }

    static Result run(const std::string& cmd) {
        static int calls = 0;
        const fs::path err = *dir_ / ("stderr_" + std::to_string(calls++));
        const int status = std::system((cmd + " >/dev/null 2>" + err.string()).c_str());
        Result r;
        r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.err = slurp(err);
        return r;
    }

    // Renders one view of both runs; returns the pixels (RGB) or fails the test.
    // `rc` is the exit status expected: 1 when a path given cannot be used (the PNG is written
    // all the same).
    static std::vector<unsigned char> screenshot(const std::string& view, int& w, int& h,
                                                 const std::string& extra = "", int rc = 0) {
        return shot(view,
                    " --view " + view + " " + (*dir_ / "fp32").string() + " " +
                        (*dir_ / "bf16-ckpt").string() + extra,
                    w, h, rc);
    }

    // `napkin view --screenshot NAME.png --size 1280x720 ARGS`: the pixels (RGB).
    static std::vector<unsigned char> shot(const std::string& name, const std::string& args, int& w,
                                           int& h, int rc = 0) {
        const fs::path png = *dir_ / (name + ".png");
        const Result r = run(std::string(NAPKIN_BINARY) + " view --screenshot " + png.string() +
                             " --size 1280x720" + args);
        EXPECT_EQ(r.rc, rc) << r.err;
        int channels = 0;
        unsigned char* data = stbi_load(png.c_str(), &w, &h, &channels, 3);
        if (data == nullptr) {
            ADD_FAILURE() << "cannot read " << png;
            return {};
        }
        std::vector<unsigned char> out(data, data + static_cast<std::size_t>(w) * h * 3);
        stbi_image_free(data);
        return out;
    }

    static std::map<std::uint32_t, std::size_t> histogram(const std::vector<unsigned char>& rgb) {
        std::map<std::uint32_t, std::size_t> h;
        for (std::size_t i = 0; i + 2 < rgb.size(); i += 3) {
            ++h[(std::uint32_t{rgb[i]} << 16) | (std::uint32_t{rgb[i + 1]} << 8) | rgb[i + 2]];
        }
        return h;
    }

    static void expect_not_blank(const std::vector<unsigned char>& rgb) {
        ASSERT_FALSE(rgb.empty());
        const auto h = histogram(rgb);
        std::size_t top = 0;
        for (const auto& [c, n] : h)
            top = std::max(top, n);
        const std::size_t pixels = rgb.size() / 3;
        EXPECT_GT(h.size(), 40u) << "too few colours: blank?";
        EXPECT_LT(static_cast<double>(top) / static_cast<double>(pixels), 0.9)
            << "one colour covers the image";
    }

    static fs::path* dir_;
    static bool trained_;
    static std::string train_error_;
};

fs::path* ViewerGui::dir_ = nullptr;
bool ViewerGui::trained_ = false;
std::string ViewerGui::train_error_;

TEST_F(ViewerGui, Timeline) {
    int w = 0, h = 0;
    const auto rgb = screenshot("timeline", w, h);
    EXPECT_EQ(w, 1280);
    EXPECT_EQ(h, 720);
    expect_not_blank(rgb);
}

TEST_F(ViewerGui, MemoryShowsEveryCategoryColour) {
    int w = 0, h = 0;
    const auto rgb = screenshot("memory", w, h);
    expect_not_blank(rgb);
    const auto hist = histogram(rgb);
    // Every category holding at least 3% of a run's peak is drawn in its own colour.
    std::set<std::string> expected;
    for (const char* run : {"fp32", "bf16-ckpt"}) {
        const RunData r = load_run(*dir_ / run);
        ASSERT_TRUE(r.has_memory);
        std::size_t peak_i = 0;
        for (std::size_t i = 0; i < r.memory.t_ns.size(); ++i) {
            if (r.memory.t_ns[i] == r.memory.peak_t_ns) peak_i = i;
        }
        const std::size_t nc = r.memory.category_count();
        for (std::size_t c = 0; c < nc; ++c) {
            if (r.memory.by_category[peak_i * nc + c] >= 0.03 * r.memory.peak_bytes)
                expected.insert(r.memory.categories[c]);
        }
    }
    EXPECT_GE(expected.size(), 4u);  // parameters, gradients, optimizer state, activations at least
    for (const std::string& cat : expected) {
        const Rgb c = memory_category_rgb(cat);
        const std::uint32_t key = (std::uint32_t{c.r} << 16) | (std::uint32_t{c.g} << 8) | c.b;
        auto it = hist.find(key);
        EXPECT_TRUE(it != hist.end() && it->second >= 100)
            << cat << " colour missing from the memory view";
    }
}

TEST_F(ViewerGui, Kernels) {
    int w = 0, h = 0;
    expect_not_blank(screenshot("kernels", w, h));
}

TEST_F(ViewerGui, Compare) {
    int w = 0, h = 0;
    const auto rgb = screenshot("compare", w, h);
    expect_not_blank(rgb);
    // The measured bars carry the category colours too.
    const auto hist = histogram(rgb);
    const Rgb act = memory_category_rgb("activations");
    EXPECT_GT(hist.count((std::uint32_t{act.r} << 16) | (std::uint32_t{act.g} << 8) | act.b), 0u);
}

TEST_F(ViewerGui, Estimate) {
    int w = 0, h = 0;
    expect_not_blank(screenshot("estimate", w, h));
}

TEST_F(ViewerGui, AnUnreadableFileIsShownAndTheRestStillRenders) {
    const fs::path broken = *dir_ / "broken.json";
    std::ofstream(broken) << "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": ";
    int w = 0, h = 0;
    std::string extra = " ";  // appended, not `" " + s`: GCC 12's -Wrestrict false positive
    extra += broken.string();
    extra += " /nonexistent/run";
    const auto rgb = screenshot("timeline", w, h, extra, 1);
    expect_not_blank(rgb);
}

// In a window too: the paths given, none usable, are each one line and exit 1 before a window
// opens (there is nothing to show but the errors); with DISPLAY unset, so no window could.
TEST_F(ViewerGui, NothingUsableToOpenEndsBeforeTheWindow) {
    const fs::path broken = *dir_ / "broken_only.json";
    std::ofstream(broken) << "{\"traceEvents\": [";
    const Result r = run("env -u DISPLAY -u WAYLAND_DISPLAY " + std::string(NAPKIN_BINARY) +
                         " view /nonexistent/run " + broken.string());
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("napkin view: error: /nonexistent/run: no such file or folder"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("napkin view: error: broken_only.json: not valid JSON"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("window"), std::string::npos) << r.err;
}

TEST_F(ViewerGui, BadFlagsAreUsageErrors) {
    const Result view = run(std::string(NAPKIN_BINARY) + " view --view nope --screenshot x.png");
    EXPECT_EQ(view.rc, 2);
    EXPECT_NE(view.err.find("--view"), std::string::npos) << view.err;
    const Result size = run(std::string(NAPKIN_BINARY) + " view --size 12 --screenshot x.png");
    EXPECT_EQ(size.rc, 2);
    EXPECT_NE(size.err.find("--size"), std::string::npos) << size.err;
    for (const char* flag : {"--window 2:1", "--window 5", "--mode flops"}) {
        const Result r = run(std::string(NAPKIN_BINARY) + " view --screenshot x.png " + flag);
        EXPECT_EQ(r.rc, 2) << flag;
        EXPECT_NE(r.err.find(std::string(flag).substr(0, 6)), std::string::npos) << r.err;
    }
    // Nothing to select: one line, exit 1, no image.
    const fs::path png = *dir_ / "nothing.png";
    const Result none = run(std::string(NAPKIN_BINARY) + " view --screenshot " + png.string() +
                            " --select no_such_op " + (*dir_ / "fp32").string());
    EXPECT_EQ(none.rc, 1);
    EXPECT_NE(none.err.find("--select: no event named 'no_such_op'"), std::string::npos)
        << none.err;
    EXPECT_FALSE(fs::exists(png));
}

// `--view kernels --mode M`: the checked radio button's dot is the only ink in ImGui's
// check-mark blue, left to right kernels, ops, all ranges.
TEST_F(ViewerGui, ModeChoosesTheKernelTablesRows) {
    std::string run = " ";  // appended, not `" " + s`: GCC 12's -Wrestrict false positive
    run += (*dir_ / "fp32").string();
    const Rgb check{66, 150, 250};
    float x[3] = {};
    const char* modes[] = {"kernels", "ops", "all"};
    for (int i = 0; i < 3; ++i) {
        int w = 0, h = 0;
        const auto rgb = shot(std::string("mode_") + modes[i],
                              std::string(" --view kernels --mode ") + modes[i] + run, w, h);
        EXPECT_GT(count_of(rgb, check, w, &x[i]), 20u) << modes[i];
    }
    EXPECT_LT(x[0] + 30, x[1]);
    EXPECT_LT(x[1] + 30, x[2]);
}

// --select outlines the range in white and --window sets the time shown (ns from the runs'
// start): with the window set to the selected range itself its outline spans the whole time
// axis; with the range's own duration free on each side, the middle third of it.
TEST_F(ViewerGui, WindowAndSelectionShowTheRange) {
    const fs::path fp32 = *dir_ / "fp32";
    std::vector<RunData> runs;
    runs.push_back(load_run(fp32));
    const double origin = time_view_of(runs).origin_ns;
    const TraceData& t = runs[0].trace;
    const Event* e = nullptr;  // the first in time, as --select takes it
    for (const Event& ev : t.events) {
        if (t.name_of(ev) == "h.0.mlp.fc" && (e == nullptr || ev.start_ns < e->start_ns)) e = &ev;
    }
    ASSERT_NE(e, nullptr);
    auto window = [&](double pad) {
        const double d = pad * static_cast<double>(e->dur_ns);
        return " --window " +
               std::to_string(std::llround(static_cast<double>(e->start_ns) - origin - d)) +
               "ns:" + std::to_string(std::llround(static_cast<double>(e->end_ns()) - origin + d)) +
               "ns";
    };
    const Rgb white{255, 255, 255};
    const std::string select = " --view timeline --select h.0.mlp.fc " + fp32.string();
    int w = 0, h = 0;  // set by shot(): each call before its pixels are read
    const auto full = shot("select_whole", select + window(0), w, h);
    const Span whole = longest_run(full, w, h, white);
    EXPECT_GT(whole.length, w * 3 / 4) << "the outline spans the time axis";
    const auto middle = shot("select_third", select + window(1), w, h);
    const Span third = longest_run(middle, w, h, white);
    EXPECT_NEAR(third.length, whole.length / 3.0, 6.0);
    EXPECT_NEAR(third.middle, whole.middle, 4.0);
    const auto plain = shot("select_none", " --view timeline " + fp32.string() + window(1), w, h);
    EXPECT_LT(longest_run(plain, w, h, white).length, 40) << "an outline without --select";
}

// --find outlines every range whose name contains the text, in yellow.
TEST_F(ViewerGui, FindOutlinesTheMatches) {
    const std::string args = " --view timeline " + (*dir_ / "fp32").string();
    int w = 0, h = 0;
    const Rgb yellow{255, 230, 0};
    const auto found = shot("find_mlp", args + " --find mlp", w, h);
    EXPECT_GT(count_of(found, yellow, w), 300u);
    const auto plain = shot("find_none", args, w, h);
    EXPECT_EQ(count_of(plain, yellow, w), 0u);
}

// The memory view shows the window too: before the first step only the model's states are held
// (activations appear only in the legend's swatch); the profiled window, by default, has them.
TEST_F(ViewerGui, MemoryViewShowsTheWindowGiven) {
    const fs::path fp32 = *dir_ / "fp32";
    std::vector<RunData> runs;
    runs.push_back(load_run(fp32));
    const TimeView tv = time_view_of(runs);
    const double before_steps = 0.9 * (static_cast<double>(runs[0].trace.t_min_ns) - tv.origin_ns);
    ASSERT_GT(before_steps, 1e3);
    const std::string args = " --view memory " + fp32.string();
    const Rgb act = memory_category_rgb("activations");
    int w = 0, h = 0;
    const auto init =
        shot("memory_init",
             args + " --window 0:" + std::to_string(std::llround(before_steps)) + "ns", w, h);
    expect_not_blank(init);
    EXPECT_LT(count_of(init, act, w), 300u);
    const auto profiled = shot("memory_profiled", args, w, h);
    EXPECT_GT(count_of(profiled, act, w), 2000u);
}

// --keys opens with the `?` overlay shown: its opaque panel over the view.
TEST_F(ViewerGui, KeysShowsTheOverlay) {
    const std::string args = " --view timeline " + (*dir_ / "fp32").string();
    const Rgb panel{28, 30, 38};  // the overlay's background (App::draw_help)
    int w = 0, h = 0;
    const auto shown = shot("keys", args + " --keys", w, h);
    EXPECT_GT(count_of(shown, panel, w), 100000u);
    const auto plain = shot("no_keys", args, w, h);
    EXPECT_LT(count_of(plain, panel, w), 1000u);  // a few anti-aliased pixels of that colour
}

// --range marks a time range: the opaque bar along the lanes' top spans the part of the time axis
// it covers (here the middle third of the window), and a run's summary is listed under the lanes.
TEST_F(ViewerGui, RangeMarksTheTimeGiven) {
    const fs::path fp32 = *dir_ / "fp32";
    std::vector<RunData> runs;
    runs.push_back(load_run(fp32));
    const TimeView tv = time_view_of(runs);
    const double t0 = tv.profiled.t0_ns - tv.origin_ns, span = tv.profiled.span();
    const auto ns = [](double t) { return std::to_string(std::llround(t)) + "ns"; };
    const std::string args =
        " --view timeline --window " + ns(t0) + ":" + ns(t0 + span) + " " + fp32.string();
    const Rgb bar{255, 200, 60};
    int w = 0, h = 0;
    const auto marked =
        shot("range", args + " --range " + ns(t0 + span / 3) + ":" + ns(t0 + 2 * span / 3), w, h);
    const Span third = longest_run(marked, w, h, bar);
    const auto whole = shot("range_whole", args + " --range " + ns(t0) + ":" + ns(t0 + span), w, h);
    const Span all = longest_run(whole, w, h, bar);
    EXPECT_GT(all.length, w * 3 / 4);
    EXPECT_NEAR(third.length, all.length / 3.0, 4.0);
    EXPECT_NEAR(third.middle, all.middle, 4.0);
    const auto plain = shot("range_none", args, w, h);
    EXPECT_EQ(count_of(plain, bar, w), 0u);
    const Result bad = run(std::string(NAPKIN_BINARY) + " view --screenshot x.png --range 3:2");
    EXPECT_EQ(bad.rc, 2);
    EXPECT_NE(bad.err.find("--range"), std::string::npos) << bad.err;
}

// --versus sets two runs side by side in the kernels view: the A-vs-B table replaces the one
// run's table (whose "% of step" column is drawn as progress bars, in ImGui's histogram colour).
TEST_F(ViewerGui, VersusPutsTwoRunsSideBySide) {
    const Rgb bars{230, 179, 0};  // ImGuiCol_PlotHistogram of the dark style
    const std::string runs =
        " --view kernels " + (*dir_ / "fp32").string() + " " + (*dir_ / "bf16-ckpt").string();
    int w = 0, h = 0;
    const auto one = shot("kernels_one", runs + " --mode ops", w, h);
    EXPECT_GT(count_of(one, bars, w), 500u);
    const auto two = shot("kernels_versus", runs + " --mode ops --versus bf16", w, h);
    expect_not_blank(two);
    EXPECT_EQ(count_of(two, bars, w), 0u);
    const Result none =
        run(std::string(NAPKIN_BINARY) + " view --screenshot " + (*dir_ / "none.png").string() +
            " " + (*dir_ / "fp32").string() + " --versus nope");
    EXPECT_EQ(none.rc, 1);
    EXPECT_NE(none.err.find("--versus"), std::string::npos) << none.err;
}

// Single trace files from tests/viewer/data (no training needed): another tool's trace in every
// view, counter lanes on the timeline, the device's own total in the memory view.
class ViewerGuiFiles : public testing::Test {
protected:
    void SetUp() override {
        if (std::getenv("DISPLAY") == nullptr)
            GTEST_SKIP() << "no DISPLAY: run the gui tests under xvfb-run -a";
        dir_ = fs::temp_directory_path() / ("napkin_viewer_gui_files_" + std::to_string(getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    // Renders `view` of one file at 1280x720; the exit status and the RGB pixels.
    std::vector<unsigned char> render(const std::string& view, const std::string& file, int& rc) {
        const fs::path png = dir_ / (view + ".png");
        const fs::path err = dir_ / "stderr";
        const std::string cmd = std::string(NAPKIN_BINARY) + " view --screenshot " + png.string() +
                                " --view " + view + " --size 1280x720 " + (kData / file).string() +
                                " >/dev/null 2>" + err.string();
        const int status = std::system(cmd.c_str());
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        stderr_ = slurp(err);
        int w = 0, h = 0, channels = 0;
        unsigned char* data = stbi_load(png.c_str(), &w, &h, &channels, 3);
        if (data == nullptr) return {};
        std::vector<unsigned char> out(data, data + static_cast<std::size_t>(w) * h * 3);
        stbi_image_free(data);
        return out;
    }
    static std::size_t count_colour(const std::vector<unsigned char>& rgb, Rgb c) {
        std::size_t n = 0;
        for (std::size_t i = 0; i + 2 < rgb.size(); i += 3)
            n += rgb[i] == c.r && rgb[i + 1] == c.g && rgb[i + 2] == c.b ? 1 : 0;
        return n;
    }
    static std::size_t distinct_colours(const std::vector<unsigned char>& rgb) {
        std::set<std::uint32_t> seen;
        for (std::size_t i = 0; i + 2 < rgb.size(); i += 3)
            seen.insert((std::uint32_t{rgb[i]} << 16) | (std::uint32_t{rgb[i + 1]} << 8) |
                        rgb[i + 2]);
        return seen.size();
    }

    const fs::path kData = fs::path(NAPKIN_SOURCE_DIR) / "tests" / "viewer" / "data";
    fs::path dir_;
    std::string stderr_;
};

// torch.profiler's export (hand-written in Kineto's layout): every view renders it, those that
// need napkin's files with their empty state.
TEST_F(ViewerGuiFiles, APyTorchProfilerTraceRendersInEveryView) {
    for (const char* view : {"timeline", "memory", "kernels", "compare", "estimate"}) {
        int rc = -1;
        const auto rgb = render(view, "pytorch_profiler_trace.json", rc);
        EXPECT_EQ(rc, 0) << view << ": " << stderr_;
        ASSERT_EQ(rgb.size(), 1280u * 720u * 3u) << view;
        EXPECT_GT(distinct_colours(rgb), 10u) << view;  // at least the header's text
        if (std::string(view) == "timeline" || std::string(view) == "kernels") {
            EXPECT_GT(distinct_colours(rgb), 40u) << view;
        }
    }
}

// The trace's counters are lanes under the run's tracks: napkin's memory categories in their
// colours, drawn opaque so the colours are exact.
TEST_F(ViewerGuiFiles, CounterLanesAreDrawnOnTheTimeline) {
    int rc = -1;
    const auto rgb = render("timeline", "napkin_gpu_trace.json", rc);
    EXPECT_EQ(rc, 0) << stderr_;
    for (const char* category : {"parameters", "optimizer_state", "activations"}) {
        EXPECT_GE(count_colour(rgb, memory_category_rgb(category)), 2000u)
            << category << " counter lane missing";
    }
}

// The device's own "used" bytes (the "device memory" counter) as a line over the bands.
TEST_F(ViewerGuiFiles, TheMemoryViewDrawsTheDeviceTotal) {
    int rc = -1;
    const auto rgb = render("memory", "napkin_gpu_trace.json", rc);
    EXPECT_EQ(rc, 0) << stderr_;
    EXPECT_GE(count_colour(rgb, Rgb{120, 200, 255}), 1000u) << "no device line";
    EXPECT_GE(count_colour(rgb, memory_category_rgb("activations")), 2000u);
}

// Runs of different ZeRO stages side by side: the compare view renders them, with the bars of
// bytes sent per step (drawn only for data-parallel runs) in their colour.
TEST_F(ViewerGuiFiles, CompareShowsZeroStages) {
    int rc = -1;
    const std::string zero = (kData / "zero").string();
    const auto rgb = render("compare", "zero/stage0 " + zero + "/stage1 " + zero + "/stage3", rc);
    EXPECT_EQ(rc, 0) << stderr_;
    EXPECT_GT(distinct_colours(rgb), 40u);
    EXPECT_GE(count_colour(rgb, memory_category_rgb("optimizer_state")), 100u);
    // The scalar bars (step time, tokens/s, MFU, bytes sent): 4 charts x 3 runs.
    EXPECT_GE(count_colour(rgb, Rgb{90, 140, 210}), 4u * 3u * 100u);
}

}  // namespace
}  // namespace napkin::viewer
