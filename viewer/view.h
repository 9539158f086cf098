// The panels. Each draws one view of the loaded runs into the current ImGui window, one file per
// panel (view_<name>.cpp); they read RunData and never load or change it. What a panel keeps
// between frames (selection, sort order, the estimator's inputs) is its state struct here, and
// the time window the timeline and the memory charts share is the TimeView, so the app, the tests
// and the benchmark can set them directly.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "estimator/estimate.h"
#include "viewer/run_data.h"
#include "viewer/run_stats.h"
#include "viewer/time_window.h"

namespace napkin::viewer {

enum class ViewId : std::uint8_t { timeline, memory, kernels, compare, estimate };
inline constexpr std::array<std::string_view, 5> kViewNames = {"timeline", "memory", "kernels",
                                                               "compare", "estimate"};

// What the timeline and the memory charts share: the window they show (zooming or panning one
// moves the other), the runs' time extents, and the origin their labels count from. The App
// computes the extents once (time_view_of) and owns the window.
struct TimeView {
    TimeWindow window;     // empty: fit `profiled` on the next frame
    bool any = false;      // some run has a time: trace events, counters or memory samples
    double origin_ns = 0;  // the earliest time in any run: labels are times from it
    TimeWindow profiled;   // every run's trace ranges, padded (else its counters and memory)
    TimeWindow whole;      // ranges, counters and memory samples together, padded
};
TimeView time_view_of(const std::vector<RunData>& runs);

inline constexpr float kTimelineRowPx = 18.0f;  // one depth level of a lane

struct TimelineState {
    char find[128] = {};
    std::string find_applied;                // the text `matches` was computed for
    std::vector<std::vector<char>> matches;  // per run, per name id: the name contains the text
    int find_run = -1;                       // the last match jumped to
    std::uint32_t find_event = kNone;
    int selected_run = -1;  // clicked event (its args stay shown)
    std::uint32_t selected_event = kNone;
    bool dragging = false;
    // The last frame as drawn: its time axis, each run's lane tops (screen y, by lane; < 0: not
    // drawn), the find box's centre, and what is under the pointer with the text shown for it: a
    // range and its args (hovered_event), a lane's label (its full name), a counter lane (its
    // value and scale); hovered_event kNone and hover_text "" when none. Input is applied after
    // drawing, so the window may already differ from axis.t0/t1. The input tests aim with these.
    TimeAxis axis;
    std::vector<std::vector<float>> lane_y;
    float find_x = 0, find_y = 0;
    int hovered_run = -1;
    std::uint32_t hovered_event = kNone;
    std::string hover_text;
    // A time range (right-drag on the lanes, or --range): shaded, and each run's summary in the
    // status line (summarize_range), recomputed when the range changes. t1 <= t0: none.
    double range_t0 = 0, range_t1 = 0;
    bool ranging = false;
    double range_anchor = 0;  // where the drag started
    double summary_t0 = 0, summary_t1 = 0;
    std::vector<RangeSummary> summaries;
    // Per run, per event: an op's device time (device_time_by_op), computed on the first hover.
    std::vector<std::vector<std::int64_t>> device_ns;
    bool device_ns_ready = false;
    // Drawing counters of the last frame (the benchmark prints them).
    std::int64_t drawn_boxes = 0, merged_boxes = 0, counter_rects = 0;
};

// One memory chart's columns, kept until its width, time range or data change: per column of
// kMemoryColumnPx pixels, the sample drawn (the largest total among those in the column, else the
// last one before it: a peak is never lost) and the device's largest "used" in it. A frame then
// costs O(columns x categories), whatever the number of samples.
struct MemoryChartCache {
    const MemoryData* memory = nullptr;
    const CounterSeries* device = nullptr;
    std::size_t samples = 0;
    int columns = 0;
    double t0 = 0, t1 = 0;
    double t_end = 0;                   // the run's last time: columns after it stay empty
    std::vector<std::uint32_t> sample;  // per column; kNone before the first sample, after t_end
    std::vector<double> device_used;    // per column; NaN before the first device sample
    double device_max = 0;
    std::size_t peak_index = 0;  // the sample at the peak (the legend's values)
    // The plot area on screen in the last frame: t0 at x0, t1 at x1 (the input tests aim with it).
    float plot_x0 = 0, plot_x1 = 0, plot_y0 = 0, plot_y1 = 0;
};

struct MemoryState {
    int selected_run = -1;  // the run whose live set is listed
    std::int64_t selected_t_ns = 0;
    std::vector<LiveBlock> live;
    bool dragging = false;
    std::vector<MemoryChartCache> charts;  // by run index
    std::vector<float> bands;              // scratch: x0, y_top, y_bottom per category
    std::int64_t drawn_rects = 0;  // band rects of the last frame (the benchmark prints them)
};

struct KernelsState {
    int run = 0;
    int scope = 0;  // StatScope
    bool stats_valid = false;
    bool resort = false;
    int stats_run = -1, stats_scope = -1;
    KernelStats stats;
    // A second run beside `run` (-1: none): the A-vs-B table per name (versus_table) instead.
    int versus = -1;
    int versus_run = -1, versus_scope = -1;  // what `table` was computed for
    VersusTable table;
};

struct CompareState {
    int unused = 0;
};

struct EstimateState {
    bool initialized = false;
    int model = 0, gpu = 0;
    int precision = 2, optimizer = 5, checkpointing = 0, attention = 1, offload = 0, finetune = 0;
    int seq_len = 2048, micro_batch = 8, grad_accum = 1, gpus = 8, zero = 0;
    float mfu = 0.5f;
    Estimate result;
    EstimateInputs inputs;
    std::string error;
};

void draw_timeline(TimelineState& state, TimeView& time, const std::vector<RunData>& runs);
void draw_memory(MemoryState& state, TimeView& time, const std::vector<RunData>& runs);
void draw_kernels(KernelsState& state, const std::vector<RunData>& runs);
// The kernels view with a second run chosen: A (state.run) vs B (state.versus) per name.
void draw_versus(KernelsState& state, const std::vector<RunData>& runs);
void draw_compare(CompareState& state, const std::vector<RunData>& runs);
void draw_estimate(EstimateState& state, const std::vector<RunData>& runs);

// Selects the first event in time named `name` (else the first whose name contains it) and, when
// `zoom`, shows it with its neighbourhood. False when no event matches.
bool select_event(TimelineState& state, TimeView& time, const std::vector<RunData>& runs,
                  const std::string& name, bool zoom);

}  // namespace napkin::viewer
