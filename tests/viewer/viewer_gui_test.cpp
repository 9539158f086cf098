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

}  // namespace
}  // namespace napkin::viewer
