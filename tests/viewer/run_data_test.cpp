// The viewer's loader without a display: a real run folder (traces/cpu-tiny) read back whole,
// another tool's trace, and malformed, truncated and hostile JSON refused with one line and
// never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "viewer/run_data.h"

namespace napkin::viewer {
namespace {

namespace fs = std::filesystem;

const fs::path kCpuTiny = fs::path(NAPKIN_SOURCE_DIR) / "traces" / "cpu-tiny";
const fs::path kTestData = fs::path(NAPKIN_SOURCE_DIR) / "tests" / "viewer" / "data";

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = fs::temp_directory_path() / ("napkin_viewer_" + std::string(info->name()) + "_" +
                                             std::to_string(std::random_device{}()));
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const fs::path& path() const { return path_; }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path_ / name, std::ios::binary) << text;
    }

private:
    fs::path path_;
};

std::uint32_t lane_named(const TraceData& t, const std::string& name) {
    for (std::uint32_t i = 0; i < t.lanes.size(); ++i) {
        if (t.lanes[i].name == name) return i;
    }
    return kNone;
}

// Two lanes that must exist, the first a host lane and the second a device lane; both kNone when
// either is missing (a failure is recorded).
std::pair<std::uint32_t, std::uint32_t> host_and_device_lanes(const TraceData& t,
                                                              const std::string& host_name,
                                                              const std::string& device_name) {
    const std::uint32_t host = lane_named(t, host_name), device = lane_named(t, device_name);
    if (host == kNone || device == kNone) {
        ADD_FAILURE() << "no lane '" << host_name << "' or '" << device_name << "'";
        return {kNone, kNone};
    }
    EXPECT_FALSE(t.lanes[host].device) << host_name;
    EXPECT_TRUE(t.lanes[device].device) << device_name;
    return {host, device};
}

TEST(RunData, LoadsTheCpuTinyRunFolder) {
    const RunData run = load_run(kCpuTiny);
    EXPECT_TRUE(run.errors.empty()) << run.errors.front();
    ASSERT_TRUE(run.has_trace && run.has_memory && run.has_report);
    EXPECT_EQ(run.label, "cpu-tiny");
    const TraceData& t = run.trace;
    EXPECT_EQ(t.schema, "napkin-trace/1");
    EXPECT_EQ(t.skipped_events, 0);
    const auto [host, device] = host_and_device_lanes(t, "host", "device (cpu kernels)");
    ASSERT_NE(device, kNone);
    EXPECT_LT(host, device);  // thread_sort_index: host first
    EXPECT_EQ(t.lanes[host].process_name, "napkin");
    // Steps at depth 0, their passes, layers and ops nested below.
    EXPECT_GE(t.lanes[host].levels.size(), 3u);
    for (std::size_t d = 0; d < t.lanes[host].levels.size(); ++d) {
        auto [first, last] = t.lanes[host].levels[d];
        for (std::uint32_t i = first; i < last; ++i) {
            EXPECT_EQ(t.events[i].depth, d);
            EXPECT_EQ(t.events[i].lane, host);
            if (i > first) {
                EXPECT_LE(t.events[i - 1].start_ns, t.events[i].start_ns);
            }
        }
    }
    auto [s0, s1] = t.lanes[host].levels[0];
    int steps = 0;
    for (std::uint32_t i = s0; i < s1; ++i)
        steps += t.cat_of(t.events[i]) == "step" ? 1 : 0;
    EXPECT_EQ(steps, 3);
    // Args of an op: FLOPs and bytes as written, ts/dur converted to integer ns.
    bool found_qkv = false;
    for (const Event& e : t.events) {
        if (t.name_of(e) != "h.0.attn.qkv" || found_qkv) continue;
        found_qkv = true;
        ASSERT_NE(e.args, kNone);
        EXPECT_EQ(t.args[e.args].flops, 50528256.0);
        EXPECT_EQ(t.args[e.args].bytes, 1246720.0);
        EXPECT_EQ(t.cat_of(e), "op");
    }
    EXPECT_TRUE(found_qkv);
    // Memory counters became series; the snapshot's peak is the series' peak.
    EXPECT_FALSE(t.counters.empty());
    EXPECT_FALSE(run.memory.from_counters);
    EXPECT_EQ(run.memory.categories.size(), 8u);
    EXPECT_EQ(run.memory.peak_bytes, 19496960.0);  // memory.json peak.total_bytes
    EXPECT_EQ(run.report.measured.peak_total_bytes, 19496960);
    EXPECT_EQ(run.report.model.name, "tiny");
    EXPECT_EQ(run.report.run.precision, "fp32");
    EXPECT_EQ(run.report.steps.size(), 3u);
    EXPECT_GT(run.peak_flops_per_s(), 0);
}

TEST(RunData, LiveSetAtThePeakIsThePeak) {
    const RunData run = load_run(kCpuTiny);
    ASSERT_TRUE(run.has_memory);
    const std::vector<LiveBlock> live = run.live_at(run.memory.peak_t_ns);
    double total = 0;
    for (const LiveBlock& b : live)
        total += static_cast<double>(b.bytes);
    EXPECT_EQ(total, run.memory.peak_bytes);
    ASSERT_FALSE(live.empty());
    for (std::size_t i = 1; i < live.size(); ++i)
        EXPECT_GE(live[i - 1].bytes, live[i].bytes);
    // Activations are allocated inside the ops of the forward pass.
    bool op_named = false;
    for (const LiveBlock& b : live)
        op_named = op_named || (b.category == "activations" && !b.op.empty());
    EXPECT_TRUE(op_named);
}

// The kernels/ops table's roofline is report.json's: the per-layer rows of an op (h.0.attn.qkv,
// h.1.attn.qkv) sum, over the profiled steps, to the report's roofline_seconds_per_step for that
// op (attn.qkv), and measured / roofline is the row's total over it.
TEST(RunData, KernelStatsCarryTheReportsRoofline) {
    const RunData run = load_run(kCpuTiny);
    ASSERT_TRUE(run.has_report && run.report.profile);
    const profiler::Roofline roof = run.roofline();
    ASSERT_GT(roof.flops_per_s, 0);
    const KernelStats k = kernel_stats(run.trace, StatScope::ops, roof);
    const double steps = static_cast<double>(run.report.profile->steps_profiled);
    int compared = 0;
    for (const profiler::ProfileRow& op : run.report.profile->ops) {
        if (op.category != "op" || op.roofline_seconds_per_step <= 0) continue;
        double roofline_ns = 0;
        for (const KernelStat& row : k.rows) {
            const std::size_t dot = row.name.find('.', 2);
            const bool layer = row.name.rfind("h.", 0) == 0 && dot != std::string::npos;
            if ((layer ? row.name.substr(dot + 1) : row.name) == op.name) {
                roofline_ns += row.roofline_ns;
                EXPECT_DOUBLE_EQ(row.over_roofline(), row.work_ns() / row.roofline_ns);
            }
        }
        EXPECT_NEAR(roofline_ns / steps, op.roofline_seconds_per_step * 1e9,
                    1e-9 * roofline_ns / steps)
            << op.name;
        ++compared;
    }
    EXPECT_GE(compared, 10);
    // Without the ceilings there is no prediction.
    for (const KernelStat& row : kernel_stats(run.trace, StatScope::ops).rows)
        EXPECT_EQ(row.roofline_ns, 0) << row.name;
}

TEST(RunData, KernelStatsSumTheOps) {
    const RunData run = load_run(kCpuTiny);
    const KernelStats k = kernel_stats(run.trace, StatScope::ops);
    ASSERT_FALSE(k.rows.empty());
    EXPECT_EQ(k.steps, 3);
    EXPECT_GT(k.step_total_ns, 0);
    std::int64_t count = 0;
    for (const Event& e : run.trace.events)
        count += run.trace.cat_of(e) == "op" ? 1 : 0;
    std::int64_t rows = 0;
    for (const KernelStat& s : k.rows)
        rows += s.count;
    EXPECT_EQ(rows, count);
    for (std::size_t i = 1; i < k.rows.size(); ++i)
        EXPECT_GE(k.rows[i - 1].total_ns, k.rows[i].total_ns);
    bool qkv = false;
    for (const KernelStat& s : k.rows) {
        if (s.name == "h.0.attn.qkv") {
            qkv = true;
            EXPECT_EQ(s.count, 3);
            EXPECT_EQ(s.flops, 3 * 50528256.0);
            EXPECT_GT(s.achieved_flop_per_s(), 0);
        }
    }
    EXPECT_TRUE(qkv);
    const KernelStats all = kernel_stats(run.trace, StatScope::all);
    EXPECT_GT(all.rows.size(), k.rows.size());
}

// A PyTorch-profiler-like trace: string pids, unknown fields and phases, a launch -> kernel flow.
TEST(RunData, ReadsOtherToolsTraces) {
    const std::string text = R"({
      "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
      "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 123, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": "stream 7", "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 123, "tid": 123, "ts": 100.5, "dur": 20,
         "args": {"External id": 4, "Input Dims": [[8, 8], [8, 8]], "Sequence number": 12}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 123, "tid": 123, "ts": 110, "dur": 5,
         "args": {"correlation": 77}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": "stream 7", "ts": 130, "dur": 8.25,
         "args": {"correlation": 77, "grid": [1, 1, 1]}},
        {"ph": "s", "id": 77, "pid": 123, "tid": 123, "ts": 110, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 77, "pid": 0, "tid": "stream 7", "ts": 130, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "i", "s": "g", "name": "mark", "pid": 123, "ts": 105},
        {"ph": "b", "name": "async thing", "pid": 123, "id": 3, "ts": 1},
        {"ph": "C", "name": "mem", "pid": 123, "ts": 100, "args": {"allocated": 1e6, "note": "x"}}
      ]})";
    TraceData t;
    ASSERT_EQ(parse_trace(text, t), "");
    EXPECT_EQ(t.skipped_events, 0);
    EXPECT_EQ(t.ignored_events, 1);  // the async "b"
    const std::uint32_t stream = lane_named(t, "stream 7");
    ASSERT_NE(stream, kNone);
    EXPECT_TRUE(t.lanes[stream].device);
    EXPECT_EQ(t.flows, 1);
    std::uint32_t kernel = kNone, launch = kNone;
    for (std::uint32_t i = 0; i < t.events.size(); ++i) {
        if (t.name_of(t.events[i]) == "sm90_gemm") kernel = i;
        if (t.name_of(t.events[i]) == "cudaLaunchKernel") launch = i;
    }
    ASSERT_NE(kernel, kNone);
    ASSERT_NE(launch, kNone);
    EXPECT_EQ(t.events[kernel].flow_peer, launch);
    EXPECT_EQ(t.events[launch].flow_peer, kernel);
    EXPECT_EQ(t.events[kernel].dur_ns, 8250);
    EXPECT_EQ(t.events[launch].depth, 1);  // inside aten::mm
    ASSERT_NE(t.events[kernel].args, kNone);
    EXPECT_NE(t.args[t.events[kernel].args].other.find("correlation"), std::string::npos);
    ASSERT_EQ(t.counters.size(), 1u);  // the string value is not a series
    EXPECT_EQ(t.counters[0].key, "allocated");
    const KernelStats k = kernel_stats(t, StatScope::kernels);
    ASSERT_EQ(k.rows.size(), 1u);
    EXPECT_EQ(k.rows[0].name, "sm90_gemm");
    EXPECT_EQ(k.rows[0].total_ns, 8250);
}

// A trace's FLOP and byte counts are JSON numbers of any size: one past 2^64 gives a roofline
// time in double (it was cast to an integer type first: undefined, found by the fuzzer).
TEST(RunData, RooflineTakesCountsPastTwoToThe64) {
    TraceData t;
    ASSERT_EQ(parse_trace(R"([{"ph":"X","name":"op","cat":"op","pid":1,"tid":1,"ts":0,"dur":1,
                              "args":{"flops":1.78e20,"bytes":4e21}}])",
                          t),
              "");
    const profiler::Roofline roof{1e15, 1e12};
    const KernelStats k = kernel_stats(t, StatScope::ops, roof);
    ASSERT_EQ(k.rows.size(), 1u);
    EXPECT_DOUBLE_EQ(k.rows[0].roofline_ns, 1e9 * 4e21 / 1e12);
}

// tests/viewer/data/pytorch_profiler_trace.json: hand-written in the layout of torch.profiler's
// Chrome trace export (Kineto's output_json.cpp), not recorded from a run: two training steps of a
// two-layer MLP on one GPU with record_shapes, profile_memory and with_stack. Numeric and string
// pids ("Spans", "Traces", ""), fractional-microsecond ts, ac2g (launch -> kernel) and fwdbwd
// flows, "[memory]" instants, nested arrays in args, metadata the viewer does not use.
TEST(RunData, LoadsAPyTorchProfilerTrace) {
    const RunData run = load_run(kTestData / "pytorch_profiler_trace.json");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    EXPECT_TRUE(run.warnings.empty()) << run.warnings.front();
    ASSERT_TRUE(run.has_trace);
    EXPECT_FALSE(run.has_memory);  // "[memory]" instants are not napkin's memory counters
    const TraceData& t = run.trace;
    EXPECT_EQ(t.skipped_events, 0);
    EXPECT_EQ(t.schema, "");
    const std::uint32_t main = lane_named(t, "thread 12345 (python3)");
    const std::uint32_t autograd = lane_named(t, "thread 12399 (pt_autograd_0)");
    const std::uint32_t stream = lane_named(t, "stream 7 ");
    ASSERT_NE(main, kNone);
    ASSERT_NE(autograd, kNone);
    ASSERT_NE(stream, kNone);
    EXPECT_FALSE(t.lanes[main].device);
    EXPECT_FALSE(t.lanes[autograd].device);
    EXPECT_TRUE(t.lanes[stream].device);
    EXPECT_EQ(t.lanes[main].process_name, "python3");
    EXPECT_LT(main, stream);  // process_sort_index: the CPU process (12345) before GPU 0 (16777216)
    // ProfilerStep, python frames, ops nested in ops, cudaLaunchKernel innermost.
    EXPECT_GE(t.lanes[main].levels.size(), 5u);
    // The string pids get lanes of their own.
    bool spans = false;
    for (const Lane& l : t.lanes)
        spans = spans || (l.pid == "Spans" && l.name == "PyTorch Profiler");
    EXPECT_TRUE(spans);
    // Every launch reaches its kernel, memcpy or memset (22 ac2g pairs), and each of the 4
    // backward functions of each of the 2 steps its forward op (8 fwdbwd pairs).
    EXPECT_EQ(t.flows, 30);
    std::int64_t kernels = 0, bound = 0;
    for (std::uint32_t i = 0; i < t.events.size(); ++i) {
        const Event& e = t.events[i];
        if (t.cat_of(e) != "kernel") continue;
        ++kernels;
        ASSERT_NE(e.flow_peer, kNone);
        EXPECT_EQ(t.name_of(t.events[e.flow_peer]), "cudaLaunchKernel");
        EXPECT_LT(t.events[e.flow_peer].start_ns, e.start_ns);
        ++bound;
        ASSERT_NE(e.args, kNone);
        EXPECT_NE(t.args[e.args].other.find("grid: [...]"), std::string::npos);
    }
    EXPECT_EQ(kernels, 18);
    EXPECT_EQ(bound, kernels);
    // Fractional microseconds survive: the first memcpy lasts 21.500 us.
    bool memcpy = false;
    for (const Event& e : t.events) {
        if (t.cat_of(e) == "gpu_memcpy") {
            memcpy = true;
            EXPECT_EQ(e.dur_ns, 21500);
            ASSERT_NE(e.args, kNone);
            EXPECT_EQ(t.args[e.args].bytes, 64.0 * 512 * 4);
        }
    }
    EXPECT_TRUE(memcpy);
    // "[memory]" instants sit on the thread that allocated.
    std::int64_t memory_marks = 0;
    for (const Event& e : t.events) {
        if (e.instant && t.name_of(e) == "[memory]") {
            ++memory_marks;
            EXPECT_EQ(e.lane, main);
        }
    }
    EXPECT_EQ(memory_marks, 10);
    // The kernels table holds device work only: every kernel, copy and set, and nothing else
    // (not the gpu_user_annotation ranges Kineto draws on the stream, not the runtime calls).
    const KernelStats k = kernel_stats(t, StatScope::kernels);
    ASSERT_FALSE(k.rows.empty());
    EXPECT_GT(k.step_total_ns, 0);
    std::int64_t device_work_ns = 0, table_ns = 0;
    std::set<std::string> not_work;
    for (const Event& e : t.events) {
        if (e.instant) continue;
        if (profiler::is_device_work(t.cat_of(e))) {
            device_work_ns += e.dur_ns;
            EXPECT_TRUE(t.lanes[e.lane].device) << t.name_of(e);
        } else {
            not_work.insert(t.name_of(e));
        }
    }
    for (const KernelStat& row : k.rows) {
        table_ns += row.total_ns;
        EXPECT_EQ(not_work.count(row.name), 0u) << row.name;
    }
    EXPECT_EQ(table_ns, device_work_ns);
    EXPECT_TRUE(not_work.count("cudaLaunchKernel") == 1 && not_work.count("ProfilerStep#1") == 1);
    const KernelStats ops = kernel_stats(t, StatScope::all);
    EXPECT_FALSE(ops.rows.empty());
}

// tests/viewer/data/torch_cpu_gpt_trace.json: a real torch.profiler recording (scripts/
// torch_trace.sh: Debian's torch 1.13, built without Kineto, so its legacy exporter: a bare
// array, integer microseconds, no categories, no flows) of one training step of
// bench/pytorch_gpt2.py's tiny GPT on the CPU. Every event is read, the ops nest under the step
// on one lane, and with no device work the kernels table is empty rather than full of ops.
TEST(RunData, LoadsARealTorchProfilerRecording) {
    const RunData run = load_run(kTestData / "torch_cpu_gpt_trace.json");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ASSERT_TRUE(run.has_trace);
    const TraceData& t = run.trace;
    EXPECT_EQ(t.skipped_events, 0);
    EXPECT_EQ(static_cast<std::int64_t>(t.events.size()), t.event_count);
    ASSERT_EQ(t.lanes.size(), 1u);
    EXPECT_FALSE(t.lanes[0].device);
    EXPECT_GE(t.lanes[0].levels.size(), 5u);  // step, optimizer / module ops, aten ops nested
    const std::uint32_t step = t.event_at(0, t.t_min_ns);
    ASSERT_NE(step, kNone);
    EXPECT_EQ(t.name_of(t.events[step]).rfind("ProfilerStep#", 0), 0u);
    EXPECT_EQ(t.events[step].depth, 0);
    EXPECT_EQ(t.events[step].dur_ns, t.t_max_ns - t.t_min_ns);  // one step, trimmed to it
    EXPECT_TRUE(kernel_stats(t, StatScope::kernels).rows.empty());
    const KernelStats all = kernel_stats(t, StatScope::all);
    EXPECT_TRUE(std::any_of(all.rows.begin(), all.rows.end(),
                            [](const KernelStat& r) { return r.name == "aten::mm"; }));
}

// tests/viewer/data/torch_gpt2_trace.json.gz: a real Kineto recording on a GPU (an H200, PyTorch
// 2.11; bench/results/2026-11-27-h200): one training step of GPT-2 124M under bf16 autocast.
// Every event is read from the gzip; the kernels and memsets sit on stream lanes, each launched
// one bound to its runtime or driver call (cuBLAS launches through the driver) by its ac2g flow, the backward functions to their forward ops by
// fwdbwd; the kernels table holds device work only (no annotation, no runtime call).
TEST(RunData, LoadsARealGpuTorchProfilerRecording) {
    const RunData run = load_run(kTestData / "torch_gpt2_trace.json.gz");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ASSERT_TRUE(run.has_trace);
    const TraceData& t = run.trace;
    EXPECT_EQ(t.skipped_events, 0);
    std::int64_t device_work = 0, bound = 0, device_work_ns = 0;
    std::set<std::string> not_work;
    for (const Event& e : t.events) {
        if (e.instant) continue;
        if (!profiler::is_device_work(t.cat_of(e))) {
            not_work.insert(t.name_of(e));
            continue;
        }
        ++device_work;
        device_work_ns += e.dur_ns;
        EXPECT_TRUE(t.lanes[e.lane].device) << t.name_of(e);
        EXPECT_EQ(t.lanes[e.lane].name.rfind("stream ", 0), 0u) << t.lanes[e.lane].name;
        if (e.flow_peer == kNone) continue;
        ++bound;
        const std::string_view launch = t.cat_of(t.events[e.flow_peer]);  // cuBLAS: the driver's
        EXPECT_TRUE(launch == "cuda_runtime" || launch == "cuda_driver") << t.name_of(e);
        EXPECT_LE(t.events[e.flow_peer].start_ns, e.start_ns);
    }
    EXPECT_EQ(device_work, 252 + 37);  // kernels and memsets in the file
    EXPECT_EQ(bound, 286);             // its ac2g pairs: every launch the step kept
    EXPECT_EQ(t.flows, 286 + 27);      // and its fwdbwd pairs
    const KernelStats k = kernel_stats(t, StatScope::kernels);
    std::int64_t table_ns = 0;
    for (const KernelStat& row : k.rows) {
        table_ns += row.total_ns;
        EXPECT_EQ(not_work.count(row.name), 0u) << row.name;
    }
    EXPECT_EQ(table_ns, device_work_ns);
}

// The same recording's step is torch.profiler's ProfilerStep#3 (kept here only as its GPU lane's
// copy, 14,989.633 us), so "% of step" divides by it, not by the file's span; its ops are the
// aten:: calls ("cpu_op"), each timed on the device by the kernels it launched.
TEST(RunData, TorchProfilerStepsAndOpsFeedTheTables) {
    const RunData run = load_run(kTestData / "torch_gpt2_trace.json.gz");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    const KernelStats kernels = kernel_stats(run.trace, StatScope::kernels);
    EXPECT_EQ(kernels.steps, 1);
    EXPECT_EQ(kernels.step_total_ns, 14989633);
    EXPECT_LT(kernels.step_total_ns, run.trace.t_max_ns - run.trace.t_min_ns);
    const KernelStats ops = kernel_stats(run.trace, StatScope::ops);
    EXPECT_EQ(ops.steps, 1);
    std::int64_t op_device_ns = 0;
    const KernelStat* addmm = nullptr;
    for (const KernelStat& row : ops.rows) {
        EXPECT_EQ(row.name.rfind("ProfilerStep#", 0), std::string::npos) << row.name;
        op_device_ns += row.device_ns;
        if (row.name == "aten::addmm") addmm = &row;
    }
    ASSERT_NE(addmm, nullptr);
    EXPECT_EQ(addmm->count, 48);
    EXPECT_GT(addmm->device_ns, addmm->total_ns);  // its GEMMs outlast their launches
    // Each launched kernel's time goes to exactly one op, the innermost around its launch.
    std::int64_t launched_ns = 0;
    for (const Event& e : run.trace.events) {
        if (!e.instant && run.trace.lanes[e.lane].device && e.flow_peer != kNone &&
            profiler::is_device_work(run.trace.cat_of(e)) &&
            run.trace.host_event_at(run.trace.events[e.flow_peer].start_ns, "cpu_op") != kNone)
            launched_ns += e.dur_ns;
    }
    EXPECT_GT(launched_ns, 0);
    EXPECT_EQ(op_device_ns, launched_ns);
}

// A GPU run's ops are timed by their kernels (each to the op enclosing its launch), not by the
// host's launch calls: on traces/h200-gpt2 host time made ops run at up to 221% of the H200's
// peak; device time keeps every op under it, and the ops' device time is the tagged kernels'.
TEST(RunData, GpuRunsOpsAreTimedOnTheDevice) {
    const RunData run = load_run(fs::path(NAPKIN_SOURCE_DIR) / "traces" / "h200-gpt2");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    const double peak = run.peak_flops_per_s();
    ASSERT_EQ(peak, 989.5e12);
    const KernelStats ops = kernel_stats(run.trace, StatScope::ops);
    bool host_time_passed_peak = false;
    std::int64_t device_ns = 0;
    for (const KernelStat& row : ops.rows) {
        device_ns += row.device_ns;
        if (row.flops <= 0 || row.device_ns <= 0) continue;
        host_time_passed_peak |= row.flops / (static_cast<double>(row.total_ns) * 1e-9) > peak;
        EXPECT_LE(row.achieved_flop_per_s(), peak) << row.name;
    }
    EXPECT_TRUE(host_time_passed_peak);
    const KernelStats kernels = kernel_stats(run.trace, StatScope::kernels);
    std::int64_t kernel_ns = 0;
    for (const KernelStat& row : kernels.rows)
        kernel_ns += row.total_ns;
    EXPECT_GT(device_ns, kernel_ns * 9 / 10);  // nearly every kernel was launched inside an op
    EXPECT_LE(device_ns, kernel_ns);
}

// napkin's own GPU run (traces/h200-gpt2): the "cuda api" lane holds launches (cudaLaunchKernel,
// cudaMemcpyAsync) and is a host lane whatever its name says; the kernels table is the stream's.
TEST(RunData, GpuRunsKernelsTableIsTheStreams) {
    const RunData run = load_run(fs::path(NAPKIN_SOURCE_DIR) / "traces" / "h200-gpt2");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    const TraceData& t = run.trace;
    const auto [api, stream] = host_and_device_lanes(t, "cuda api", "GPU 0 stream 13");
    ASSERT_NE(stream, kNone);
    const KernelStats k = kernel_stats(t, StatScope::kernels);
    ASSERT_FALSE(k.rows.empty());
    std::int64_t stream_ns = 0, table_ns = 0;
    for (const Event& e : t.events)
        stream_ns += e.lane == stream && !e.instant ? e.dur_ns : 0;
    for (const KernelStat& row : k.rows) {
        table_ns += row.total_ns;
        EXPECT_EQ(row.name.rfind("cuda", 0), std::string::npos) << row.name;
    }
    EXPECT_EQ(table_ns, stream_ns);
}

// tests/viewer/data/napkin_gpu_trace.json: napkin's own format as a CUDA run writes it, with the
// "device memory" counter (cudaMemGetInfo's used bytes) beside the allocator's "memory" counters.
TEST(RunData, DeviceMemoryCounterIsFound) {
    const RunData run = load_run(kTestData / "napkin_gpu_trace.json");
    ASSERT_TRUE(run.errors.empty()) << run.errors.front();
    ASSERT_TRUE(run.has_trace && run.has_memory);
    EXPECT_TRUE(run.memory.from_counters);
    EXPECT_EQ(run.memory.category_count(), 8u);  // "device memory" is not a category
    const CounterSeries* device = run.trace.counter(kDeviceMemoryCounter, kDeviceMemoryUsedKey);
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->t_ns.size(), run.memory.t_ns.size());
    // The device sees the context and the allocator's reserve on top of the allocator's bytes.
    EXPECT_GT(device->max_value, run.memory.peak_bytes);
    EXPECT_EQ(run.trace.counter(kDeviceMemoryCounter, "nope"), nullptr);
    EXPECT_EQ(run.trace.counter("memory", "activations")->min_value, 0.0);
    EXPECT_EQ(run.trace.flows, 36);
}

const CompareRow* row_named(const std::vector<CompareRow>& rows, const std::string& key) {
    for (const CompareRow& r : rows) {
        if (r.key == key) return &r;
    }
    return nullptr;
}

// tests/viewer/data/zero/stage{0,1,3}: rank 0's report.json of a two-rank run at ZeRO stages 0,
// 1 and 3 (the structure of a real `napkin train --zero` report, the numbers set for world 2), and
// traces/cpu-tiny, a single-process run. The compare table puts them side by side.
TEST(RunData, CompareTableShowsZeroStagesSideBySide) {
    std::vector<RunData> runs;
    for (const char* stage : {"stage0", "stage1", "stage3"})
        runs.push_back(load_run(kTestData / "zero" / stage));
    runs.push_back(load_run(kCpuTiny));
    std::vector<const RunData*> rs;
    for (const RunData& r : runs) {
        ASSERT_TRUE(r.errors.empty()) << r.errors.front();
        ASSERT_TRUE(r.has_report);
        rs.push_back(&r);
    }
    EXPECT_EQ(runs[0].report.communication->zero, 0);
    EXPECT_EQ(runs[2].report.communication->world, 2);
    EXPECT_EQ(runs[2].report.communication->backend, "mpi");
    EXPECT_TRUE(runs[0].report.steps[0].comm->seconds.has_value());
    EXPECT_FALSE(runs[3].report.communication.has_value());

    const std::vector<CompareRow> rows = compare_table(rs);
    const CompareRow* stage = row_named(rows, "ZeRO stage");
    ASSERT_NE(stage, nullptr);
    EXPECT_EQ(stage->values, (std::vector<std::string>{"0", "1", "3", "none (1 process)"}));
    EXPECT_TRUE(stage->differs);
    const CompareRow* world = row_named(rows, "world size");
    ASSERT_NE(world, nullptr);
    EXPECT_EQ(world->values, (std::vector<std::string>{"2", "2", "2", "1"}));
    const CompareRow* sent = row_named(rows, "sent / step, pred / meas");
    ASSERT_NE(sent, nullptr);
    EXPECT_EQ(sent->values[0], "1.78 MB / 1.78 MB");  // P fp32 bytes: ring all-reduce, N = 2
    EXPECT_EQ(sent->values[2], "2.68 MB / 2.68 MB");  // stage 3 gathers the parameters twice
    EXPECT_EQ(sent->values[3], "-");
    const CompareRow* comm_time = row_named(rows, "in collectives / step");
    ASSERT_NE(comm_time, nullptr);
    EXPECT_NE(comm_time->values[0].find("%"), std::string::npos) << comm_time->values[0];
    const CompareRow* opt = row_named(rows, "optimizer_state pred / meas");
    ASSERT_NE(opt, nullptr);
    EXPECT_TRUE(opt->differs);  // sharded from stage 1
    EXPECT_NE(row_named(rows, "communication (meas)"), nullptr);
    const CompareRow* precision = row_named(rows, "precision");
    ASSERT_NE(precision, nullptr);
    EXPECT_FALSE(precision->differs);

    // Without data-parallel runs there are no ZeRO rows at all.
    const std::vector<CompareRow> single = compare_table({&runs[3]});
    EXPECT_EQ(row_named(single, "ZeRO stage"), nullptr);
    EXPECT_EQ(row_named(single, "sent / step, pred / meas"), nullptr);
    for (const CompareRow& r : single)
        EXPECT_FALSE(r.differs) << r.key;
}

TEST(RunData, BeginEndPairsAndBareArrays) {
    TraceData t;
    ASSERT_EQ(parse_trace(R"([{"ph":"B","name":"a","pid":1,"tid":1,"ts":0},
                              {"ph":"B","name":"b","pid":1,"tid":1,"ts":1},
                              {"ph":"E","pid":1,"tid":1,"ts":2},
                              {"ph":"E","pid":1,"tid":1,"ts":5},
                              {"ph":"E","pid":1,"tid":1,"ts":6},
                              {"ph":"B","name":"open","pid":1,"tid":2,"ts":3}])",
                          t),
              "");
    ASSERT_EQ(t.events.size(), 3u);  // a, b, and the unclosed one ended at the last time
    EXPECT_EQ(t.skipped_events, 1);  // the third E
    EXPECT_EQ(t.lanes[t.events[0].lane].levels.size(), 2u);
}

// Each of these must be refused with one line, or load with the bad events skipped: never crash.
TEST(RunData, MalformedTracesAreRefusedWithOneLine) {
    const std::string bad_docs[] = {
        "",
        "   ",
        "not json",
        "{\"traceEvents\": [",
        "{\"traceEvents\": [{\"ph\":\"X\"",
        "{\"traceEvents\": 12}",
        "{\"traceEvents\": {\"a\": 1}}",
        "{\"other\": []}",
        "42",
        "\"traceEvents\"",
        "{\"traceEvents\": [{\"ph\":\"X\",\"ts\":1e999,\"dur\":1}]}",
        "{\"traceEvents\": [{\"ph\":\"X\"}]} trailing",
        "{\"traceEvents\": [\"\xff\xfe\"]}",
    };
    for (const std::string& doc : bad_docs) {
        TraceData t;
        const std::string err = parse_trace(doc, t);
        EXPECT_FALSE(err.empty()) << "accepted: " << doc;
        EXPECT_EQ(err.find('\n'), std::string::npos) << err;
        EXPECT_TRUE(t.events.empty());
    }
}

// The trace reader descends four levels (root, traceEvents, event, args) and skips anything
// deeper without recursion; the DOM readers (memory.json, report.json) stop at kMaxJsonDepth.
TEST(RunData, DeepNestingIsBounded) {
    for (const std::size_t depth : {kMaxJsonDepth + 1, std::size_t{100000}}) {
        const std::string nest = std::string(depth, '[') + std::string(depth, ']');
        TraceData t;
        EXPECT_EQ(parse_trace("{\"traceEvents\": "
                              "[{\"ph\":\"X\",\"name\":\"n\",\"ts\":1,\"dur\":1,\"args\":{\"x\":" +
                                  nest + "},\"y\":" + nest + "}]}",
                              t),
                  "");
        ASSERT_EQ(t.events.size(), 1u);
        ASSERT_NE(t.events[0].args, kNone);
        EXPECT_EQ(t.args[t.events[0].args].other, "x: [...]");
        MemoryData m;
        const std::string err =
            parse_memory("{\"categories\":[\"a\"],\"timeline\":" + nest + "}", m);
        EXPECT_NE(err.find("deep"), std::string::npos) << err;
        ReportData r;
        EXPECT_NE(parse_report("{\"run\":" + nest + "}", r).find("deep"), std::string::npos);
    }
    // Unbalanced deep nesting is a syntax error, not a crash.
    TraceData t;
    EXPECT_FALSE(parse_trace("{\"traceEvents\": [" + std::string(100000, '[') + "]}", t).empty());
}

// Valid ranges on their own lane, enough that the bad events below are not most of the trace.
std::string good_events(int n) {
    std::string out;
    for (int i = 0; i < n; ++i) {
        out += R"({"ph":"X","name":"filler","pid":2,"tid":1,"ts":)" + std::to_string(10 * i) +
               R"(,"dur":5},)";
    }
    return out;
}

TEST(RunData, WrongTypesAndHugeNumbersSkipTheEvent) {
    const std::string doc = R"({"traceEvents": [)" + good_events(20) + R"(
        {"ph":"X","name":"good","pid":1,"tid":1,"ts":1,"dur":2},
        {"ph":"X","name":"ts string","pid":1,"tid":1,"ts":"1","dur":2},
        {"ph":"X","name":"ts huge","pid":1,"tid":1,"ts":1e300,"dur":2},
        {"ph":"X","name":"dur negative","pid":1,"tid":1,"ts":1,"dur":-5},
        {"ph":"X","name":"dur huge","pid":1,"tid":1,"ts":1,"dur":1e20},
        {"ph":"X","name":"dur null","pid":1,"tid":1,"ts":1,"dur":null},
        {"ph":7,"name":"ph number","pid":1,"tid":1,"ts":1,"dur":2},
        {"ph":"XX","name":"ph long","pid":1,"tid":1,"ts":1,"dur":2},
        {"name":"no ph","pid":1,"tid":1,"ts":1,"dur":2},
        [1,2,3], null, "event", 17, 1e400,
        {"ph":"X","name":"ts bigint","pid":1,"tid":1,"ts":123456789012345678901234567890,"dur":2},
        {"ph":"X","name":{"not":"a string"},"pid":{"a":[1]},"tid":[1,2],"ts":3,"dur":1,"args":[1,2]},
        {"ph":"X","name":"args wrong","pid":1,"tid":1,"ts":4,"dur":1,"args":{"flops":"many","bytes":1e308,"x":{"y":[1]}}},
        {"ph":"C","name":"counter","pid":1,"ts":1,"args":"not an object"},
        {"ph":"C","name":"counter","pid":1,"ts":2,"args":{"v":18446744073709551615}},
        {"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":5}},
        {"ph":"M","name":"thread_sort_index","pid":1,"tid":1,"args":{"sort_index":1e300}},
        {"ph":"s","name":"flow","pid":1,"tid":1,"ts":1},
        {"ph":"f","name":"flow","pid":1,"tid":1,"ts":1,"id":{"x":1},"bp":"e"},
        {"ph":"i","name":"instant","pid":1,"tid":1,"ts":-1e12}
    ]})";
    TraceData t;
    ASSERT_EQ(parse_trace(doc, t), "");
    // The fillers, good, the wrongly typed name/pid/tid one, "args wrong", the instant; the flow
    // end whose id is an object is left out like the start without one.
    EXPECT_EQ(t.events.size(), 24u);
    EXPECT_EQ(t.skipped_events, 16);
    EXPECT_FALSE(t.warnings.empty());
    EXPECT_LE(t.warnings.size(), 6u);
    for (const Event& e : t.events) {
        if (t.name_of(e) != "args wrong") continue;
        ASSERT_NE(e.args, kNone);
        EXPECT_TRUE(std::isnan(t.args[e.args].flops));
        EXPECT_EQ(t.args[e.args].bytes, 1e308);
    }
    ASSERT_EQ(t.counters.size(), 1u);
    EXPECT_EQ(t.counters[0].values[0], 18446744073709551615.0);
}

// A trace whose events are mostly unusable (a Kineto trace before rebasing was such a trace: every
// event refused, an empty window, exit 0) is an error in one line, not an empty timeline.
TEST(RunData, AMostlyInvalidTraceIsAnError) {
    TraceData t;
    const std::string err = parse_trace(R"([{"ph":"X","name":"ok","pid":1,"tid":1,"ts":1,"dur":1},
        {"ph":"X","name":"bad","pid":1,"tid":1,"ts":2,"dur":-1},
        {"ph":"X","name":"worse","pid":1,"tid":1,"dur":1}])",
                                        t);
    EXPECT_EQ(err.rfind("most events are invalid: 2 of 3 left out (the first: event 1 ('bad', ph "
                        "X): negative 'dur' -1.000)",
                        0),
              0u)
        << err;
    EXPECT_TRUE(t.events.empty());
    TempDir dir;
    dir.write("trace.json", R"([{"ph":"X","name":"bad","pid":1,"tid":1,"ts":"x","dur":1}])");
    const RunData run = load_run(dir.path());
    ASSERT_EQ(run.errors.size(), 1u);
    EXPECT_NE(run.errors[0].find("trace.json: most events are invalid: 1 of 1"), std::string::npos)
        << run.errors[0];
    EXPECT_FALSE(run.has_trace);
}

TEST(RunData, TruncatedFilesOfARealRunAreErrorsNotCrashes) {
    const std::string trace = slurp(kCpuTiny / "trace.json");
    const std::string memory = slurp(kCpuTiny / "memory.json");
    const std::string report = slurp(kCpuTiny / "report.json");
    ASSERT_FALSE(trace.empty());
    for (double frac : {0.0, 0.1, 0.5, 0.9, 0.999}) {
        const auto cut = [&](const std::string& s) {
            return s.substr(0, static_cast<std::size_t>(frac * static_cast<double>(s.size())));
        };
        TraceData t;
        MemoryData m;
        ReportData r;
        EXPECT_FALSE(parse_trace(cut(trace), t).empty());
        EXPECT_FALSE(parse_memory(cut(memory), m).empty());
        EXPECT_FALSE(parse_report(cut(report), r).empty());
    }
    // Random byte flips: anything goes but a crash.
    std::mt19937 rng(1234);
    for (int i = 0; i < 200; ++i) {
        std::string s = trace.substr(0, 4000) + "]}";
        for (int k = 0; k < 5; ++k)
            s[rng() % s.size()] = static_cast<char>(rng() % 256);
        TraceData t;
        parse_trace(s, t);
    }
}

// Inputs the fuzz target once crashed on (tests/viewer/fuzz/corpus/regression_*): parsed whole,
// under the sanitizers in CI.
TEST(RunData, FuzzRegressions) {
    for (const auto& entry :
         fs::directory_iterator(fs::path(NAPKIN_SOURCE_DIR) / "tests/viewer/fuzz/corpus")) {
        if (entry.path().filename().string().rfind("regression_", 0) != 0) continue;
        const std::string text = slurp(entry.path());
        TraceData t;
        MemoryData m;
        ReportData r;
        parse_trace(text, t);
        parse_memory(text, m);
        parse_report(text, r);
    }
}

TEST(RunData, MalformedMemoryRowsAreSkipped) {
    const std::string doc =
        R"({"schema":"napkin-memory/1","device":"cpu","categories":["parameters","activations"],
        "names":["","w","x"],
        "timeline":[[1.0,100,0,1,4096],[2.0,50,1,2,8192],[2.5,"x",1,2,1],[3.0,10,9,1,1],[3.5,10,-1,1,1],
                    "row",[4.0],[5.0,-50,1,2,8192],[6.0,1e300,0,0,1],[7.0,5,1,99,77]]})";
    MemoryData m;
    ASSERT_EQ(parse_memory(doc, m), "");
    EXPECT_EQ(m.rows.size(), 4u);
    EXPECT_EQ(m.skipped_rows, 6);
    EXPECT_EQ(m.peak_bytes, 150.0);
    EXPECT_EQ(m.peak_t_ns, 2000);
    EXPECT_EQ(m.rows.back().name, 0u);  // out-of-range name index -> unnamed
    MemoryData bad;
    EXPECT_FALSE(parse_memory(R"({"timeline":[]})", bad).empty());
    EXPECT_FALSE(parse_memory(R"([1,2])", bad).empty());
    EXPECT_FALSE(parse_memory(R"({"categories":["a"],"timeline":{}})", bad).empty());
}

TEST(RunData, ABrokenFileLeavesTheRestOfTheRun) {
    TempDir dir;
    dir.write("trace.json", "{\"traceEvents\": [ {\"ph\": \"X\", ");
    fs::copy_file(kCpuTiny / "memory.json", dir.path() / "memory.json");
    fs::copy_file(kCpuTiny / "report.json", dir.path() / "report.json");
    const RunData run = load_run(dir.path());
    ASSERT_EQ(run.errors.size(), 1u);
    EXPECT_EQ(run.errors[0].find(dir.path().filename().string() + "/trace.json: "), 0u)
        << run.errors[0];
    EXPECT_FALSE(run.has_trace);
    EXPECT_TRUE(run.has_memory);
    EXPECT_TRUE(run.has_report);
    // Live blocks still list, without ops (no trace).
    EXPECT_FALSE(run.live_at(run.memory.peak_t_ns).empty());
}

TEST(RunData, InvalidEventsAreWarningsNotErrors) {
    TempDir dir;
    dir.write("trace.json",
              R"({"traceEvents":[{"ph":"X","name":"ok","pid":1,"tid":1,"ts":1,"dur":1},
                                                {"ph":"X","name":"bad","pid":1,"tid":1,"ts":1,"dur":-1}]})");
    const RunData run = load_run(dir.path());
    EXPECT_TRUE(run.errors.empty());
    ASSERT_EQ(run.warnings.size(), 1u);
    EXPECT_NE(run.warnings[0].find("'bad'"), std::string::npos) << run.warnings[0];
    EXPECT_TRUE(run.has_trace);
}

TEST(RunData, MissingPathsAndEmptyFolders) {
    const RunData missing = load_run("/nonexistent/napkin/run");
    ASSERT_EQ(missing.errors.size(), 1u);
    EXPECT_NE(missing.errors[0].find("no such file or folder"), std::string::npos);
    TempDir dir;
    const RunData empty = load_run(dir.path());
    ASSERT_EQ(empty.errors.size(), 1u);
    EXPECT_NE(empty.errors[0].find("no trace.json"), std::string::npos);
}

TEST(RunData, SingleFilesAreRecognizedBySchema) {
    const RunData trace = load_run(kCpuTiny / "trace.json");
    EXPECT_TRUE(trace.has_trace);
    EXPECT_TRUE(trace.has_memory);  // from the trace's counters
    EXPECT_TRUE(trace.memory.from_counters);
    EXPECT_EQ(trace.memory.peak_bytes, 19496960.0);
    const RunData memory = load_run(kCpuTiny / "memory.json");
    EXPECT_TRUE(memory.has_memory);
    EXPECT_FALSE(memory.has_trace);
    const RunData report = load_run(kCpuTiny / "report.json");
    EXPECT_TRUE(report.has_report);
    EXPECT_TRUE(report.errors.empty());
}

}  // namespace
}  // namespace napkin::viewer
