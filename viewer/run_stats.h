// What the panels say about runs beyond one table of one run: two runs side by side per op or
// kernel (A vs B), the performance model's predicted time per op beside the measured one, and a
// time range of the timeline summed up. Pure: RunData in, numbers and text out, no ImGui (tests in
// tests/viewer/run_stats_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "viewer/run_data.h"

namespace napkin::viewer {

// One op or kernel name in two runs (kernel_stats of each, same scope). A side with count 0 does
// not have it. Times are per step when both runs have steps (napkin's "step" ranges), else over
// the whole trace: per_step says which.
struct VersusRow {
    std::string name;
    KernelStat a, b;
};
struct VersusTable {
    std::vector<VersusRow> rows;  // by the larger of the two times, largest first
    bool per_step = false;
    int steps_a = 0, steps_b = 0;
    double a_ns(const VersusRow& r) const { return r.a.work_ns() / divisor(steps_a); }
    double b_ns(const VersusRow& r) const { return r.b.work_ns() / divisor(steps_b); }
    // B's time over A's (work_ns: device time for ops that launched device work); 0 when either
    // side lacks the name.
    double ratio(const VersusRow& r) const {
        return r.a.count > 0 && r.b.count > 0 && a_ns(r) > 0 ? b_ns(r) / a_ns(r) : 0;
    }

private:
    double divisor(int steps) const { return per_step ? static_cast<double>(steps) : 1.0; }
};
VersusTable versus_table(const KernelStats& a, const KernelStats& b);

// The performance model's time per op (report.json predicted.time.ops) beside the profile's
// measured time per step (profile.ops: device_seconds_per_step where the op launched device
// work, else seconds_per_step), one row per op either has, by predicted time. The compare view
// shows one column per run: "pred / meas (x ratio)".
std::vector<CompareRow> op_time_table(const std::vector<const RunData*>& runs);
// The step: predicted.time.step_seconds; NaN without a time prediction.
double predicted_step_seconds(const ReportData& r);

// A window of the timeline [t0, t1) summed up: the ranges that overlap it, their time inside it,
// and the FLOPs and bytes of the part inside it (a range's counts spread evenly over its
// duration); the memory allocated and freed in it (memory.json's rows).
struct RangeSummary {
    std::int64_t t0_ns = 0, t1_ns = 0;
    std::int64_t ops = 0, op_ns = 0;  // category "op" on host lanes
    double op_flops = 0, op_bytes = 0;
    std::int64_t kernels = 0, kernel_ns = 0;  // device work on device lanes
    double kernel_flops = 0, kernel_bytes = 0;
    double allocated_bytes = 0, freed_bytes = 0;
    // The names with the most time inside (kernels when there are any, else ops), at most five.
    std::vector<std::pair<std::string, std::int64_t>> top;
    bool operator==(const RangeSummary&) const = default;
};
RangeSummary summarize_range(const RunData& run, std::int64_t t0_ns, std::int64_t t1_ns);
// One line: "12.3 ms: 45 ops 10.2 ms, 3.1 TFLOP; 120 kernels 8.1 ms, 2.0 GB; +1.2 GB -0.8 GB".
std::string range_summary_text(const RangeSummary& s);

// A range for the timeline's tooltip and status line: its name, lane, time from the runs' start
// (to `resolution_ns`), args, achieved rates, the device time of the work it launched
// (`device_ns`: device_time_by_op, 0 without any; an op's TFLOP/s then divides by it), and
// napkin's roofline for its FLOPs and bytes beside the time it took ("roofline 0.4 ms: measured
// 3.00x it").
std::string event_details(const RunData& run, const Event& e, double origin_ns,
                          double resolution_ns, std::int64_t device_ns);

}  // namespace napkin::viewer
