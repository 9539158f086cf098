// The viewer's window content: the opened runs (with their load errors), the tab bar of views and
// each view's state. One App::draw() call per frame; the backend owns the window.
#pragma once

#include <optional>
#include <vector>

#include "viewer/run_data.h"
#include "viewer/view.h"

namespace napkin::viewer {

class App {
public:
    explicit App(std::vector<RunData> runs);

    // Draws one frame's UI filling the display. `select` switches to a view on this frame.
    void draw();
    void select(ViewId view) { pending_ = view; }
    ViewId current() const { return current_; }

    const std::vector<RunData>& runs() const { return runs_; }
    TimelineState& timeline() { return timeline_; }
    MemoryState& memory() { return memory_; }
    KernelsState& kernels() { return kernels_; }

private:
    void draw_header();

    std::vector<RunData> runs_;
    ViewId current_ = ViewId::timeline;
    std::optional<ViewId> pending_;
    TimelineState timeline_;
    MemoryState memory_;
    KernelsState kernels_;
    CompareState compare_;
    EstimateState estimate_;
};

}  // namespace napkin::viewer
