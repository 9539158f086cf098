// Runs side by side and a range summed up, without a display: a merged export opened as one run
// per input (split_processes), the A-vs-B table (versus_table), predicted vs measured time per op
// and per step (op_time_table, compare_table), a time range's ops, kernels and bytes
// (summarize_range) and the tooltip's device time and roofline (event_details).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "viewer/format.h"
#include "viewer/run_data.h"
#include "viewer/run_stats.h"

namespace napkin::viewer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = fs::path(NAPKIN_SOURCE_DIR);

RunData run_of_trace(const std::string& text, const std::string& label) {
    RunData run;
    run.label = label;
    const std::string err = parse_trace(text, run.trace);
    EXPECT_EQ(err, "");
    run.has_trace = err.empty();
    run.has_memory = memory_from_counters(run.trace, run.memory);
    return run;
}

// One run of `napkin export`'s output: its process named "LABEL: napkin" (pid renumbered), a host
// lane with an op that launches a kernel (flow id `flow`), and its memory counter after them.
void add_exported_run(json& events, int pid, const std::string& label, int flow,
                      double activations) {
    const auto range = [&](const char* name, const char* cat, int tid, double ts, double dur) {
        json e = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid},
                  {"tid", tid},   {"ts", ts},   {"dur", dur}};
        if (std::string(cat) != "step") e["args"] = {{"flops", 1000000}, {"bytes", 4000}};
        return e;
    };
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"name", label + ": napkin"}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 1},
                      {"args", {{"name", "host"}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 2},
                      {"args", {{"name", "device (CPU)"}}}});
    events.push_back({{"name", "memory"},
                      {"ph", "C"},
                      {"pid", pid},
                      {"ts", 150},  // after the ranges: not in the profiled window
                      {"args", {{"activations", activations}}}});
    events.push_back(range("step", "step", 1, 0, 100));
    events.push_back(range("h.0.mlp.fc", "op", 1, 10, 50));
    events.push_back({{"name", "launch"},
                      {"cat", "launch"},
                      {"ph", "s"},
                      {"pid", pid},
                      {"tid", 1},
                      {"ts", 11},
                      {"id", flow}});
    events.push_back(range("matmul_forward", "kernel", 2, 20, 30));
    events.push_back({{"name", "launch"},
                      {"cat", "launch"},
                      {"ph", "f"},
                      {"bp", "e"},
                      {"pid", pid},
                      {"tid", 2},
                      {"ts", 20},
                      {"id", flow}});
}

// Both runs at the same times: opened as one run, the kernel of one would go to the op of either,
// and the two kernels would be one row.
std::string merged_trace() {
    json events = json::array();
    add_exported_run(events, 1, "fp32", 1, 1000);
    add_exported_run(events, 2, "bf16", 2, 400);
    // A process without a name (as Kineto's "Spans" and "Traces"): the second input's.
    events.push_back({{"name", "ProfilerStep#1"},
                      {"cat", "user_annotation"},
                      {"ph", "X"},
                      {"pid", 3},
                      {"tid", 1},
                      {"ts", 0},
                      {"dur", 5}});
    return json{{"traceEvents", events},
                {"otherData", {{"schema", "napkin-trace/1"}, {"merged_from", json::array()}}}}
        .dump();
}

TEST(RunStats, AMergedExportOpensAsOneRunPerInput) {
    RunData merged = run_of_trace(merged_trace(), "merged.json");
    ASSERT_EQ(merged.trace.lanes.size(), 5u);
    ASSERT_EQ(kernel_stats(merged.trace, StatScope::kernels).rows.at(0).count, 2);
    const std::vector<RunData> runs = split_processes(std::move(merged));
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].label, "merged.json: fp32");
    EXPECT_EQ(runs[1].label, "merged.json: bf16");
    const double peaks[] = {1000, 400};
    for (std::size_t r = 0; r < runs.size(); ++r) {
        const TraceData& t = runs[r].trace;
        ASSERT_EQ(t.lanes.size(), r == 0 ? 2u : 3u) << r;
        EXPECT_EQ(t.lanes[0].process_name, "napkin");
        EXPECT_EQ(t.flows, 1);
        EXPECT_EQ(t.t_min_ns, 0);
        EXPECT_EQ(t.t_max_ns, 100000);  // the ranges' span, not the counters'
        // Its own kernel only, charged to its own op; its own memory chart.
        const KernelStats kernels = kernel_stats(t, StatScope::kernels);
        ASSERT_EQ(kernels.rows.size(), 1u);
        EXPECT_EQ(kernels.rows[0].count, 1);
        const KernelStats ops = kernel_stats(t, StatScope::ops);
        ASSERT_EQ(ops.rows.size(), 1u);
        EXPECT_EQ(ops.rows[0].device_ns, 30000);
        EXPECT_EQ(ops.steps, 1);
        ASSERT_TRUE(runs[r].has_memory);
        EXPECT_EQ(runs[r].memory.peak_bytes, peaks[r]);
        // Every level is a slice of this run's own events, start-sorted.
        for (const Lane& lane : t.lanes) {
            for (const auto& [first, last] : lane.levels) {
                ASSERT_LE(last, t.events.size());
                for (std::uint32_t i = first; i < last; ++i)
                    EXPECT_EQ(&t.lanes[t.events[i].lane], &lane);
            }
        }
    }
}

TEST(RunStats, OneRunsTraceIsNotSplit) {
    RunData run = load_run(kSource / "traces" / "cpu-tiny");
    const std::size_t events = run.trace.events.size();
    const std::vector<RunData> runs = split_processes(std::move(run));
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].trace.events.size(), events);
    EXPECT_TRUE(runs[0].has_report);
}

KernelStat stat(const std::string& name, std::int64_t count, std::int64_t ns, double flops) {
    KernelStat k;
    k.name = name;
    k.count = count;
    k.total_ns = ns;
    k.flops = flops;
    return k;
}

TEST(RunStats, VersusTableMatchesTwoRunsByName) {
    KernelStats a, b;
    a.steps = 2;
    b.steps = 1;
    a.rows = {stat("matmul", 4, 100, 1e6), stat("gelu", 2, 40, 0)};
    b.rows = {stat("matmul", 2, 300, 5e5), stat("softmax", 1, 10, 0)};
    const VersusTable t = versus_table(a, b);
    ASSERT_TRUE(t.per_step);
    ASSERT_EQ(t.rows.size(), 3u);
    EXPECT_EQ(t.rows[0].name, "matmul");  // by the larger time per step: 300 ns in B
    EXPECT_EQ(t.a_ns(t.rows[0]), 50);
    EXPECT_EQ(t.b_ns(t.rows[0]), 300);
    EXPECT_DOUBLE_EQ(t.ratio(t.rows[0]), 6.0);
    EXPECT_EQ(t.rows[1].name, "gelu");
    EXPECT_EQ(t.rows[1].b.count, 0);
    EXPECT_EQ(t.ratio(t.rows[1]), 0);  // only in A
    EXPECT_EQ(t.rows[2].name, "softmax");
    EXPECT_EQ(t.rows[2].a.count, 0);
}

// napkin's run against a real torch.profiler recording: both have steps (napkin's "step" ranges,
// torch's ProfilerStep#2), so times are per step; rows of both.
TEST(RunStats, VersusTableOfNapkinAgainstPyTorch) {
    const RunData a = load_run(kSource / "traces" / "cpu-tiny");
    const RunData b = load_run(kSource / "tests" / "viewer" / "data" / "torch_cpu_gpt_trace.json");
    ASSERT_TRUE(a.errors.empty() && b.errors.empty());
    const VersusTable t =
        versus_table(kernel_stats(a.trace, StatScope::all), kernel_stats(b.trace, StatScope::all));
    EXPECT_TRUE(t.per_step);
    EXPECT_EQ(t.steps_b, 1);
    bool only_a = false, only_b = false;
    for (const VersusRow& r : t.rows) {
        only_a |= r.b.count == 0 && t.a_ns(r) > 0;
        only_b |= r.a.count == 0 && t.b_ns(r) > 0;
        EXPECT_GE(std::max(t.a_ns(r), t.b_ns(r)),
                  std::max(t.a_ns(t.rows.back()), t.b_ns(t.rows.back())));
    }
    EXPECT_TRUE(only_a && only_b);
}

// A report with the performance model's step (predicted.time) and a profile.
RunData report_run(const std::string& label, double step_s, double predicted_step_s) {
    RunData run;
    run.label = label;
    run.has_report = true;
    ReportData& r = run.report;
    r.steps.push_back({});
    r.steps.back().seconds = step_s;
    profiler::TimePrediction time;
    time.step_seconds = predicted_step_s;
    time.seconds_by_bucket = {{"gemm", 0.75 * predicted_step_s},
                              {"memory_bound", 0.25 * predicted_step_s}};
    time.ops = {{"mlp.fc", "gemm", 1, 2e-3}, {"attn.qkv", "gemm", 1, 1e-3}};
    r.predicted.time = time;
    profiler::ProfileReport profile;
    profiler::ProfileRow fc;
    fc.name = "mlp.fc";
    fc.seconds_per_step = 9e-3;         // the host's launch time
    fc.device_seconds_per_step = 3e-3;  // on the device: what is compared
    profile.ops.push_back(fc);
    r.profile = profile;
    return run;
}

TEST(RunStats, PredictedTimeBesideMeasuredPerStepAndPerOp) {
    const RunData a = report_run("a", 0.012, 0.010), b = report_run("b", 0.006, 0.004);
    const std::vector<const RunData*> runs = {&a, &b};
    const std::vector<CompareRow> table = compare_table(runs);
    const auto row = [&](const std::string& key) {
        for (const CompareRow& r : table) {
            if (r.key == key) return r.values;
        }
        ADD_FAILURE() << "no row '" << key << "'";
        return std::vector<std::string>(2);
    };
    EXPECT_EQ(row("step time (predicted)")[0], fmt_duration_ns(0.010e9));
    EXPECT_EQ(row("measured / predicted step")[0], "1.20x");
    EXPECT_EQ(row("measured / predicted step")[1], "1.50x");
    EXPECT_EQ(row("  gemm (predicted)")[1], fmt_duration_ns(0.003e9));

    const std::vector<CompareRow> ops = op_time_table(runs);
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops[0].key, "mlp.fc");  // the larger prediction first
    EXPECT_EQ(ops[0].values[0], fmt_duration_ns(2e6) + " / " + fmt_duration_ns(3e6) + " (1.50x)");
    EXPECT_EQ(ops[1].values[0], fmt_duration_ns(1e6) + " / -");  // predicted, not measured
}

// Host ops A [0, 100) us and B [100, 200) us, kernels k1 [10, 60) and k2 [150, 250) on the
// device lane; the range [50, 200) us holds half of A, all of B, a fifth of k1, half of k2.
TEST(RunStats, RangeSummarySumsWhatIsInside) {
    RunData run = run_of_trace(R"({"traceEvents":[
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"host"}},
{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"device"}},
{"name":"A","cat":"op","ph":"X","pid":1,"tid":1,"ts":0,"dur":100,"args":{"flops":1000,"bytes":100}},
{"name":"B","cat":"op","ph":"X","pid":1,"tid":1,"ts":100,"dur":100,"args":{"flops":10}},
{"name":"k1","cat":"kernel","ph":"X","pid":1,"tid":2,"ts":10,"dur":50,"args":{"flops":500}},
{"name":"k2","cat":"kernel","ph":"X","pid":1,"tid":2,"ts":150,"dur":100,"args":{"bytes":1000}}
]})",
                               "r");
    run.memory.rows = {{40000, 64, 0, 0, 1}, {60000, 128, 0, 0, 2}, {190000, -64, 0, 0, 1}};
    const RangeSummary s = summarize_range(run, 50000, 200000);
    EXPECT_EQ(s.ops, 2);
    EXPECT_EQ(s.op_ns, 150000);
    EXPECT_DOUBLE_EQ(s.op_flops, 510);
    EXPECT_DOUBLE_EQ(s.op_bytes, 50);
    EXPECT_EQ(s.kernels, 2);
    EXPECT_EQ(s.kernel_ns, 60000);
    EXPECT_DOUBLE_EQ(s.kernel_flops, 100);
    EXPECT_DOUBLE_EQ(s.kernel_bytes, 500);
    EXPECT_DOUBLE_EQ(s.allocated_bytes, 128);
    EXPECT_DOUBLE_EQ(s.freed_bytes, 64);
    ASSERT_EQ(s.top.size(), 2u);
    EXPECT_EQ(s.top[0].first, "k2");
    EXPECT_EQ(s.top[0].second, 50000);
    const std::string text = range_summary_text(s);
    EXPECT_NE(text.find("2 ops"), std::string::npos) << text;
    EXPECT_NE(text.find("2 kernels"), std::string::npos) << text;
    // Nothing there: an empty summary.
    const RangeSummary none = summarize_range(run, 300000, 400000);
    EXPECT_EQ(none.ops + none.kernels, 0);
}

// The tooltip of an op on the H200 run: its time on the device and napkin's roofline beside it.
TEST(RunStats, TooltipsCarryDeviceTimeAndRoofline) {
    const RunData run = load_run(kSource / "traces" / "h200-gpt2");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    const std::vector<std::int64_t> device = device_time_by_op(run.trace);
    ASSERT_EQ(device.size(), run.trace.events.size());
    std::uint32_t op = kNone;
    for (std::uint32_t i = 0; i < run.trace.events.size() && op == kNone; ++i) {
        const Event& e = run.trace.events[i];
        if (device[i] > 0 && e.args != kNone && run.trace.args[e.args].flops > 0) op = i;
    }
    ASSERT_NE(op, kNone);
    const Event& e = run.trace.events[op];
    const std::string text = event_details(run, e, 0, 1, device[op]);
    EXPECT_NE(text.find("device time " + fmt_duration_ns(static_cast<double>(device[op]))),
              std::string::npos)
        << text;
    const EventArgs& a = run.trace.args[e.args];
    const double roofline_ns =
        1e9 * run.roofline().seconds(a.flops, std::isfinite(a.bytes) ? a.bytes : 0);
    ASSERT_GT(roofline_ns, 0);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "measured %.2fx it",
                  static_cast<double>(device[op]) / roofline_ns);
    EXPECT_NE(text.find("roofline " + fmt_duration_ns(roofline_ns) + ": " + ratio),
              std::string::npos)
        << text;
}

}  // namespace
}  // namespace napkin::viewer
