// The viewer as a user runs it, headless: two real CPU runs (fp32; bf16-amp with full
// checkpointing) are trained by the napkin binary, then `napkin view --screenshot` renders each
// view to a PNG that is read back and checked: not blank, and in the memory view every category
// holding a visible share of the peak is drawn in its colour. Needs a display (label gui: CI runs
// it under xvfb-run -a with Mesa's llvmpipe); skips without one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
        const fs::path png = *dir_ / (view + ".png");
        const Result r = run(std::string(NAPKIN_BINARY) + " view --screenshot " + png.string() +
                             " --view " + view + " --size 1280x720 " + (*dir_ / "fp32").string() +
                             " " + (*dir_ / "bf16-ckpt").string() + extra);
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

TEST_F(ViewerGui, BadFlagsAreUsageErrors) {
    const Result view = run(std::string(NAPKIN_BINARY) + " view --view nope --screenshot x.png");
    EXPECT_EQ(view.rc, 2);
    EXPECT_NE(view.err.find("--view"), std::string::npos) << view.err;
    const Result size = run(std::string(NAPKIN_BINARY) + " view --size 12 --screenshot x.png");
    EXPECT_EQ(size.rc, 2);
    EXPECT_NE(size.err.find("--size"), std::string::npos) << size.err;
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
