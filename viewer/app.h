// The viewer's window content: the opened runs (with their load errors), the tab bar of views,
// each view's state and the time window the timeline and the memory charts share; the `?`
// overlay of keys. One App::draw() call per frame; the backend owns the window.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "viewer/run_data.h"
#include "viewer/view.h"

namespace napkin::viewer {

// A state to open in: napkin view's flags, so that a command can show (and screenshot) any of
// them. The window counts from the runs' start (TimeView::origin_ns), as the ruler does.
struct OpenOptions {
    ViewId view = ViewId::timeline;
    std::optional<StatScope> mode;     // the kernels table: kernels, ops or every range
    std::optional<TimeWindow> window;  // ns from the runs' start
    std::string find;                  // the find box's text: its matches outlined
    std::string select;  // an event's name (else part of it): selected, and shown unless `window`
    bool keys = false;   // the `?` overlay of keys shown
    std::optional<TimeWindow> range;  // the timeline's range selection, ns from the runs' start
    std::string versus;  // the kernels view's second run (its label, else part of it): A vs B
};

// The index of the run labelled `name`, else of the first whose label contains it; -1 if none.
int run_named(const std::vector<RunData>& runs, const std::string& name);

class App {
public:
    explicit App(std::vector<RunData> runs);

    // Draws one frame's UI filling the display. `select` switches to a view on this frame.
    void draw();
    void select(ViewId view) { pending_ = view; }
    ViewId current() const { return current_; }
    // Applies the options: "" or one line naming the flag that could not be ("--select: ...").
    std::string open(const OpenOptions& options);

    const std::vector<RunData>& runs() const { return runs_; }
    TimeView& time() { return time_; }
    TimelineState& timeline() { return timeline_; }
    MemoryState& memory() { return memory_; }
    KernelsState& kernels() { return kernels_; }
    bool help_shown() const { return help_; }

private:
    void draw_header();
    void draw_views();
    void draw_help();

    std::vector<RunData> runs_;
    ViewId current_ = ViewId::timeline;
    std::optional<ViewId> pending_;
    bool help_ = false;
    TimeView time_;
    TimelineState timeline_;
    MemoryState memory_;
    KernelsState kernels_;
    CompareState compare_;
    EstimateState estimate_;
};

}  // namespace napkin::viewer
