// The viewer's interaction, driven headless with scripted input: the App of napkin-view on
// traces/cpu-tiny in a hidden 1280x720 window, each frame given a FrameInput (pointer, left
// button, wheel, keys, text) instead of the window's, and the effect read back from the views'
// state, not from pixels: the timeline's visible window after a wheel, a drag, F; the range hovered
// and its args; the range a click selects; the match find + Enter jumps to; the blocks a click on
// the memory chart lists; the range a right drag marks. The pointer is aimed with the layout the
// views record each frame (TimelineState::axis and lane_y, MemoryChartCache::plot_*). Needs a
// display (label gui: CI runs it under xvfb-run -a with Mesa's llvmpipe); skips without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include "viewer/app.h"
#include "viewer/backend_glfw.h"
#include "viewer/format.h"
#include "viewer/run_data.h"

namespace napkin::viewer {
namespace {

namespace fs = std::filesystem;

class ViewerInput : public testing::Test {
protected:
    void SetUp() override {
        if (std::getenv("DISPLAY") == nullptr)
            GTEST_SKIP() << "no DISPLAY: run the gui tests under xvfb-run -a";
        std::vector<RunData> runs;
        runs.push_back(load_run(fs::path(NAPKIN_SOURCE_DIR) / "traces" / "cpu-tiny"));
        ASSERT_TRUE(runs[0].errors.empty()) << runs[0].errors.front();
        ASSERT_TRUE(runs[0].has_trace && runs[0].has_memory);
        WindowOptions opt;
        opt.width = 1280;
        opt.height = 720;
        opt.headless = true;
        backend_ = std::make_unique<GlfwBackend>(opt);
        app_ = std::make_unique<App>(std::move(runs));
        idle(2);
    }

    const RunData& run() const { return app_->runs()[0]; }
    TimelineState& tl() { return app_->timeline(); }
    TimeWindow& win() { return app_->time().window; }

    void frame(const FrameInput& in) {
        backend_->frame([&] { app_->draw(); }, &in);
        pointer_ = in;
        pointer_.wheel = 0.0f;
        pointer_.keys_down.clear();
        pointer_.text.clear();
    }
    // Frames with the pointer where it was, nothing pressed.
    void idle(int n = 1) {
        for (int i = 0; i < n; ++i)
            frame(pointer_);
    }
    void move_to(float x, float y) {
        FrameInput in;
        in.mouse_x = x;
        in.mouse_y = y;
        frame(in);
    }
    // Moves there (one frame), presses (one frame) and releases (one frame).
    void click(float x, float y) {
        move_to(x, y);
        FrameInput in = pointer_;
        in.left_down = true;
        frame(in);
        in.left_down = false;
        frame(in);
    }
    // Presses `button` where the pointer is, moves in two frames to x and releases there.
    void drag_to(float x, bool FrameInput::*button) {
        FrameInput in = pointer_;
        in.*button = true;
        frame(in);  // press
        in.mouse_x = 0.5f * (in.mouse_x + x);
        frame(in);
        in.mouse_x = x;
        frame(in);
        in.*button = false;
        frame(in);  // release
    }
    void press_key(int key) {
        FrameInput in = pointer_;
        in.keys_down = {key};
        frame(in);
        idle();
    }
    void type(const std::string& text) {
        FrameInput in = pointer_;
        in.text = text;
        frame(in);
    }

    // A point inside the lanes: the middle of the first depth level of the run's first lane.
    float lanes_y() {
        for (float y : tl().lane_y[0]) {
            if (y >= 0) return y + 0.5f * kTimelineRowPx;
        }
        ADD_FAILURE() << "no lane drawn";
        return 0;
    }
    // The first event named `name` (start order).
    std::uint32_t event_named(const std::string& name) {
        const TraceData& t = run().trace;
        for (std::uint32_t i = 0; i < t.events.size(); ++i) {
            if (t.name_of(t.events[i]) == name) return i;
        }
        ADD_FAILURE() << "no event " << name;
        return 0;
    }
    // Shows [t0, t1] (a view the timeline's own keys could reach) and draws it.
    void show(double t0, double t1) {
        win().t0_ns = t0;
        win().t1_ns = t1;
        idle();
    }
    // The middle of the event's box on screen.
    void event_centre(std::uint32_t e, float& x, float& y) {
        const Event& ev = run().trace.events[e];
        x = tl().axis.x(0.5 * static_cast<double>(ev.start_ns + ev.end_ns()));
        y = tl().lane_y[0][ev.lane] + (static_cast<float>(ev.depth) + 0.5f) * kTimelineRowPx;
    }
    double pixel_ns() const {
        const TimeAxis& a = app_->timeline().axis;
        return (a.t1 - a.t0) / static_cast<double>(a.x1 - a.x0);
    }

    std::unique_ptr<GlfwBackend> backend_;
    std::unique_ptr<App> app_;
    FrameInput pointer_;
};

// The profiled window: the trace's ranges, not its memory counters (which start with the
// process, long before the profiled steps), with 1% free on each side.
TEST_F(ViewerInput, TheTimelineFitsTheProfiledRangesFirst) {
    std::int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const Event& e : run().trace.events) {
        lo = std::min(lo, e.start_ns);
        hi = std::max(hi, e.end_ns());
    }
    const std::int64_t first_sample = run().memory.t_ns.front();
    ASSERT_GT(lo, first_sample) << "cpu-tiny's memory samples start before its ranges";
    const double pad = 0.01 * static_cast<double>(hi - lo);
    EXPECT_DOUBLE_EQ(win().t0_ns, static_cast<double>(lo) - pad);
    EXPECT_DOUBLE_EQ(win().t1_ns, static_cast<double>(hi) + pad);
    EXPECT_GT(tl().axis.x1 - tl().axis.x0, 800.0f);
    EXPECT_GT(tl().drawn_boxes, 0);
    // Labels count from the runs' start: the first memory sample.
    EXPECT_DOUBLE_EQ(app_->time().origin_ns, static_cast<double>(first_sample));
}

TEST_F(ViewerInput, WheelUpZoomsAroundThePointer) {
    const float x = tl().axis.x0 + 0.3f * (tl().axis.x1 - tl().axis.x0);
    const float y = lanes_y();
    move_to(x, y);
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    const double t_pointer = tl().axis.t(x);
    FrameInput in = pointer_;
    in.wheel = 1.0f;
    frame(in);
    EXPECT_GT(win().t0_ns, t0) << "left edge must move right";
    EXPECT_LT(win().t1_ns, t1) << "right edge must move left";
    EXPECT_NEAR(win().t1_ns - win().t0_ns, 0.8 * (t1 - t0), 1e-6 * (t1 - t0));
    idle();  // drawn with the new window
    EXPECT_NEAR(tl().axis.x(t_pointer), x, 1.0f) << "the time under the pointer stays there";
    // Down zooms back out.
    in.wheel = -1.0f;
    frame(in);
    EXPECT_NEAR(win().t0_ns, t0, 1e-6 * (t1 - t0));
    EXPECT_NEAR(win().t1_ns, t1, 1e-6 * (t1 - t0));
}

TEST_F(ViewerInput, ShiftWheelScrollsLanesWithoutZooming) {
    move_to(tl().axis.x0 + 100.0f, lanes_y());
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    FrameInput in = pointer_;
    in.wheel = 1.0f;
    in.shift = true;
    frame(in);
    EXPECT_DOUBLE_EQ(win().t0_ns, t0);
    EXPECT_DOUBLE_EQ(win().t1_ns, t1);
}

TEST_F(ViewerInput, DragPansByThePointersTravel) {
    const float x = tl().axis.x0 + 400.0f, y = lanes_y();
    move_to(x, y);
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    const double ns_per_px = pixel_ns();
    const int selected_before = tl().selected_run;
    drag_to(x + 150.0f, &FrameInput::left_down);  // a drag, not a click
    // Dragged right by 150 px: the content follows the pointer, the window moves back in time.
    EXPECT_NEAR(win().t0_ns, t0 - 150.0 * ns_per_px, 0.5 * ns_per_px);
    EXPECT_NEAR(win().t1_ns, t1 - 150.0 * ns_per_px, 0.5 * ns_per_px);
    EXPECT_FALSE(tl().dragging);
    EXPECT_EQ(tl().selected_run, selected_before) << "a drag must not select";
    // Moving after the release no longer pans.
    move_to(x, y);
    EXPECT_NEAR(win().t0_ns, t0 - 150.0 * ns_per_px, 0.5 * ns_per_px);
}

// A right drag marks a time range (the window does not move) and sums it up per run; a right
// click without a drag clears it.
TEST_F(ViewerInput, RightDragSelectsARangeAndSumsItUp) {
    const float x = tl().axis.x0 + 300.0f, y = lanes_y();
    move_to(x, y);
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    const double at_start = tl().axis.t(x), at_end = tl().axis.t(x + 200.0f);
    drag_to(x + 200.0f, &FrameInput::right_down);
    EXPECT_EQ(win().t0_ns, t0);
    EXPECT_EQ(win().t1_ns, t1);
    EXPECT_NEAR(tl().range_t0, at_start, 1.0);
    EXPECT_NEAR(tl().range_t1, at_end, 1.0);
    ASSERT_EQ(tl().summaries.size(), 1u);
    const RangeSummary& s = tl().summaries[0];
    EXPECT_EQ(s, summarize_range(run(), std::llround(tl().range_t0), std::llround(tl().range_t1)));
    EXPECT_GT(s.ops, 0);
    // A right click clears it.
    FrameInput in = pointer_;
    in.right_down = true;
    frame(in);
    in.right_down = false;
    frame(in);
    EXPECT_FALSE(tl().range_t1 > tl().range_t0);
}

TEST_F(ViewerInput, FRestoresTheProfiledWindow) {
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    move_to(tl().axis.x0 + 200.0f, lanes_y());
    FrameInput in = pointer_;
    in.wheel = 3.0f;
    frame(in);
    press_key('D');  // and pan a little
    ASSERT_GT(win().t0_ns, t0 + 1.0);
    press_key(GLFW_KEY_F);
    EXPECT_DOUBLE_EQ(win().t0_ns, t0);
    EXPECT_DOUBLE_EQ(win().t1_ns, t1);
}

TEST_F(ViewerInput, HoverShowsTheRangesArgs) {
    const std::uint32_t e = event_named("h.0.attn.qkv");
    const Event& ev = run().trace.events[e];
    ASSERT_NE(ev.args, kNone);
    const double flops = run().trace.args[ev.args].flops;
    ASSERT_GT(flops, 0.0);
    show(static_cast<double>(ev.start_ns) - static_cast<double>(ev.dur_ns),
         static_cast<double>(ev.end_ns()) + static_cast<double>(ev.dur_ns));
    float x = 0, y = 0;
    event_centre(e, x, y);
    move_to(x, y);
    EXPECT_EQ(tl().hovered_run, 0);
    EXPECT_EQ(tl().hovered_event, e);
    EXPECT_NE(tl().hover_text.find("h.0.attn.qkv"), std::string::npos) << tl().hover_text;
    EXPECT_NE(tl().hover_text.find("FLOPs " + fmt_flops(flops)), std::string::npos)
        << tl().hover_text;
    EXPECT_NE(tl().hover_text.find("TFLOP/s"), std::string::npos) << tl().hover_text;
    // Off every range, past the right end of the time axis: nothing hovered.
    move_to(tl().axis.x1 + 6.0f, y);
    EXPECT_EQ(tl().hovered_event, kNone);
    EXPECT_TRUE(tl().hover_text.empty()) << tl().hover_text;
}

// A lane's label is cut to the gutter ("napkin / device (cpu ker..."); over it, its whole name.
TEST_F(ViewerInput, HoveringALaneLabelShowsItsWholeName) {
    const TraceData& t = run().trace;
    for (std::uint32_t li = 0; li < t.lanes.size(); ++li) {
        const float y = tl().lane_y[0][li];
        if (y < 0) continue;
        move_to(tl().axis.x0 - 120.0f, y + 0.5f * kTimelineRowPx);
        EXPECT_EQ(tl().hovered_event, kNone);
        const std::string whole = t.lanes[li].process_name + " / " + t.lanes[li].name;
        EXPECT_EQ(tl().hover_text.rfind(whole + "\n", 0), 0u) << tl().hover_text;
        EXPECT_NE(tl().hover_text.find(t.lanes[li].device ? "device lane" : "host lane"),
                  std::string::npos);
    }
}

TEST_F(ViewerInput, AClickSelectsTheRange) {
    const std::uint32_t e = event_named("h.1.mlp.fc");
    const Event& ev = run().trace.events[e];
    show(static_cast<double>(ev.start_ns) - static_cast<double>(ev.dur_ns),
         static_cast<double>(ev.end_ns()) + static_cast<double>(ev.dur_ns));
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    float x = 0, y = 0;
    event_centre(e, x, y);
    click(x, y);
    EXPECT_EQ(tl().selected_run, 0);
    EXPECT_EQ(tl().selected_event, e);
    EXPECT_DOUBLE_EQ(win().t0_ns, t0) << "a click does not pan";
    EXPECT_DOUBLE_EQ(win().t1_ns, t1);
    // Its parent, one level up, is selected instead by a click there.
    click(x, y - kTimelineRowPx);
    ASSERT_NE(tl().selected_event, kNone);
    EXPECT_EQ(run().trace.events[tl().selected_event].depth + 1, ev.depth);
}

TEST_F(ViewerInput, FindAndEnterJumpToTheNextMatch) {
    click(tl().find_x, tl().find_y);
    type("attn.proj b");
    press_key(GLFW_KEY_ENTER);
    EXPECT_EQ(tl().find_applied, "attn.proj b");
    // The first match in time: "h.0.attn.proj backward" of the first step.
    const TraceData& t = run().trace;
    std::uint32_t first = kNone;
    for (std::uint32_t i = 0; i < t.events.size(); ++i) {
        if (t.name_of(t.events[i]).find("attn.proj b") != std::string::npos &&
            (first == kNone || t.events[i].start_ns < t.events[first].start_ns))
            first = i;
    }
    ASSERT_NE(first, kNone);
    ASSERT_EQ(tl().selected_run, 0);
    ASSERT_EQ(tl().selected_event, first);
    EXPECT_EQ(t.name_of(t.events[first]), "h.1.attn.proj backward");  // backward runs h.1 first
    const Event& ev = t.events[first];
    EXPECT_LT(win().t0_ns, static_cast<double>(ev.start_ns));
    EXPECT_GT(win().t1_ns, static_cast<double>(ev.end_ns()));
    EXPECT_LT(win().t1_ns - win().t0_ns, 10.0 * static_cast<double>(ev.dur_ns) + 3000.0)
        << "zoomed onto the match";
    // Enter again: the next match, later in time.
    click(tl().find_x, tl().find_y);
    press_key(GLFW_KEY_ENTER);
    ASSERT_NE(tl().selected_event, kNone);
    EXPECT_NE(tl().selected_event, first);
    EXPECT_GT(t.events[tl().selected_event].start_ns, ev.start_ns);
    EXPECT_NE(t.name_of(t.events[tl().selected_event]).find("attn.proj b"), std::string::npos);
}

// Keys typed into the find box are text, not the timeline's W/A/S/D/F (a key press is both a key
// and a character on a real keyboard).
TEST_F(ViewerInput, TypingInTheFindBoxDoesNotPanOrFit) {
    move_to(tl().axis.x0 + 200.0f, lanes_y());
    FrameInput in = pointer_;
    in.wheel = 2.0f;
    frame(in);
    const double t0 = win().t0_ns, t1 = win().t1_ns;
    click(tl().find_x, tl().find_y);
    for (const char* k : {"d", "f"}) {
        in = pointer_;
        in.keys_down = {std::toupper(k[0])};
        in.text = k;
        frame(in);
        idle();
    }
    EXPECT_EQ(tl().find_applied, "df");
    EXPECT_DOUBLE_EQ(win().t0_ns, t0);
    EXPECT_DOUBLE_EQ(win().t1_ns, t1);
}

TEST_F(ViewerInput, AClickOnTheMemoryChartListsTheLiveBlocks) {
    app_->select(ViewId::memory);
    idle(2);
    ASSERT_EQ(app_->current(), ViewId::memory);
    const MemoryState& mem = app_->memory();
    ASSERT_GE(mem.charts.size(), 1u);
    const MemoryChartCache& c = mem.charts[0];
    ASSERT_GT(c.plot_x1 - c.plot_x0, 500.0f);
    // At the peak: the parameters (wte, the token embedding, among them) are live.
    const double t_peak = static_cast<double>(run().memory.peak_t_ns);
    const float x =
        c.plot_x0 + static_cast<float>((t_peak - c.t0) / (c.t1 - c.t0)) * (c.plot_x1 - c.plot_x0);
    const double ns_per_px = (c.t1 - c.t0) / static_cast<double>(c.plot_x1 - c.plot_x0);
    click(x, 0.5f * (c.plot_y0 + c.plot_y1));
    ASSERT_EQ(mem.selected_run, 0);
    EXPECT_NEAR(static_cast<double>(mem.selected_t_ns), t_peak, 1.0 * ns_per_px);
    ASSERT_FALSE(mem.live.empty());
    // wte's size from memory.json's own rows.
    const MemoryData& m = run().memory;
    std::int64_t wte_bytes = 0;
    for (const MemoryRow& r : m.rows) {
        if (m.names[r.name] == "wte" && r.bytes_delta > 0) {
            wte_bytes = r.bytes_delta;
            break;
        }
    }
    ASSERT_GT(wte_bytes, 0);
    bool found = false;
    std::int64_t parameters = 0;
    for (const LiveBlock& b : mem.live) {
        if (b.name == "wte") {
            found = true;
            EXPECT_EQ(b.category, "parameters");
            EXPECT_EQ(b.bytes, wte_bytes);
        }
        if (b.category == "parameters") parameters += b.bytes;
    }
    EXPECT_TRUE(found) << "wte not among the " << mem.live.size() << " live blocks";
    // Every parameter is live then: their bytes are the peak's parameters category.
    std::size_t pc = 0;
    while (pc < m.categories.size() && m.categories[pc] != "parameters")
        ++pc;
    ASSERT_LT(pc, m.categories.size());
    std::size_t peak_i = 0;
    for (std::size_t i = 0; i < m.t_ns.size(); ++i) {
        if (m.t_ns[i] == m.peak_t_ns) peak_i = i;
    }
    EXPECT_EQ(static_cast<double>(parameters), m.by_category[peak_i * m.category_count() + pc]);
}

// The memory charts show the timeline's window: zooming the timeline zooms them, and a wheel
// notch over a chart zooms the timeline, around the pointer.
TEST_F(ViewerInput, TheMemoryChartSharesTheTimelinesWindow) {
    // Fitted to the profiled steps, not to memory.json's first allocation.
    EXPECT_GT(win().t0_ns, static_cast<double>(run().memory.t_ns.front()));
    move_to(tl().axis.x0 + 300.0f, lanes_y());
    FrameInput in = pointer_;
    in.wheel = 2.0f;
    frame(in);
    const TimeWindow zoomed = win();
    app_->select(ViewId::memory);
    idle(2);
    ASSERT_EQ(app_->current(), ViewId::memory);
    const MemoryChartCache& c = app_->memory().charts[0];
    EXPECT_DOUBLE_EQ(c.t0, zoomed.t0_ns);
    EXPECT_DOUBLE_EQ(c.t1, zoomed.t1_ns);
    // A notch down over the chart, 25% from its left: the window widens around that time.
    const float x = c.plot_x0 + 0.25f * (c.plot_x1 - c.plot_x0);
    move_to(x, 0.5f * (c.plot_y0 + c.plot_y1));
    const double t_pointer = c.t0 + 0.25 * (c.t1 - c.t0);
    in = pointer_;
    in.wheel = -1.0f;
    frame(in);
    EXPECT_NEAR(win().span(), zoomed.span() / 0.8, 1e-6 * zoomed.span());
    EXPECT_NEAR((t_pointer - win().t0_ns) / win().span(), 0.25, 1e-3);
    // F there fits the profiled window again, for both views.
    press_key(GLFW_KEY_F);
    EXPECT_DOUBLE_EQ(win().t0_ns, app_->time().profiled.t0_ns);
    app_->select(ViewId::timeline);
    idle(2);
    EXPECT_DOUBLE_EQ(tl().axis.t0, app_->time().profiled.t0_ns);
}

// A window past the run's end: the chart stops where the run does (a run shorter than another
// opened beside it is not drawn on past its end).
TEST_F(ViewerInput, TheMemoryChartStopsAtTheRunsEnd) {
    app_->select(ViewId::memory);
    idle(2);
    const double end = app_->memory().charts.at(0).t_end;
    ASSERT_GE(end, static_cast<double>(run().memory.t_ns.back()));
    win() = TimeWindow{end - 1e6, end + 1e6};
    idle();
    const MemoryChartCache& c = app_->memory().charts[0];
    ASSERT_EQ(c.t0, end - 1e6);
    EXPECT_NE(c.sample.front(), kNone) << "held before the end";
    EXPECT_EQ(c.sample.back(), kNone) << "drawn after the end";
    EXPECT_EQ(c.sample[c.sample.size() / 2 + 2], kNone);
}

// `?` shows the keys overlay and hides it again; typed into the find box it is text.
TEST_F(ViewerInput, QuestionMarkTogglesTheKeysOverlay) {
    ASSERT_FALSE(app_->help_shown());
    type("?");
    idle();
    EXPECT_TRUE(app_->help_shown());
    type("?");
    idle();
    EXPECT_FALSE(app_->help_shown());
    click(tl().find_x, tl().find_y);
    type("?");
    idle();
    EXPECT_FALSE(app_->help_shown());
    EXPECT_EQ(tl().find_applied, "?");
}

// A counter lane's label: its whole name and its scale.
TEST_F(ViewerInput, HoveringACounterLabelShowsItsScale) {
    const TraceData& t = run().trace;
    float bottom = -1;  // the counter lanes follow the run's last lane
    for (std::uint32_t li = 0; li < t.lanes.size(); ++li) {
        if (tl().lane_y[0][li] >= 0) {
            bottom = tl().lane_y[0][li] +
                     static_cast<float>(std::max<std::size_t>(1, t.lanes[li].levels.size())) *
                         kTimelineRowPx +
                     6.0f;
        }
    }
    ASSERT_GT(bottom, 0);
    move_to(tl().axis.x0 - 120.0f, bottom + 12.0f);
    EXPECT_NE(tl().hover_text.find("(counter, pid"), std::string::npos) << tl().hover_text;
    EXPECT_NE(tl().hover_text.find("scale 0 .. "), std::string::npos) << tl().hover_text;
}

// napkin view's --mode, --window, --find and --select, as App::open applies them.
TEST_F(ViewerInput, OpenOptionsSetTheViewsState) {
    OpenOptions o;
    o.view = ViewId::kernels;
    o.mode = StatScope::ops;
    o.window = TimeWindow{150e6, 160e6};
    o.find = "mlp";
    o.select = "h.1.mlp.fc";
    ASSERT_EQ(app_->open(o), "");
    idle(2);
    EXPECT_EQ(app_->current(), ViewId::kernels);
    EXPECT_EQ(app_->kernels().scope, static_cast<int>(StatScope::ops));
    ASSERT_FALSE(app_->kernels().stats.rows.empty());
    EXPECT_EQ(app_->kernels().stats.rows.size(),
              kernel_stats(run().trace, StatScope::ops).rows.size());
    EXPECT_DOUBLE_EQ(win().t0_ns, app_->time().origin_ns + 150e6);
    EXPECT_DOUBLE_EQ(win().t1_ns, app_->time().origin_ns + 160e6);
    EXPECT_EQ(std::string(tl().find), "mlp");
    ASSERT_NE(tl().selected_event, kNone);
    EXPECT_EQ(run().trace.name_of(run().trace.events[tl().selected_event]), "h.1.mlp.fc");
    EXPECT_EQ(tl().selected_event, event_named("h.1.mlp.fc"));
    // Without a window, the selection is shown; a part of a name selects too.
    OpenOptions part;
    part.select = "attn.proj backw";
    ASSERT_EQ(app_->open(part), "");
    idle();
    const Event& e = run().trace.events[tl().selected_event];
    EXPECT_NE(run().trace.name_of(e).find("attn.proj backw"), std::string::npos);
    EXPECT_LT(win().t0_ns, static_cast<double>(e.start_ns));
    EXPECT_GT(win().t1_ns, static_cast<double>(e.end_ns()));
    OpenOptions none;
    none.select = "no such op";
    EXPECT_NE(app_->open(none).find("--select"), std::string::npos);
}

}  // namespace
}  // namespace napkin::viewer
