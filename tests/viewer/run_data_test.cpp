// The viewer's loader without a display: a real run folder (traces/cpu-tiny) read back whole,
// another tool's trace, and malformed, truncated and hostile JSON refused with one line and
// never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "viewer/run_data.h"

namespace napkin::viewer {
namespace {

namespace fs = std::filesystem;

const fs::path kCpuTiny = fs::path(NAPKIN_SOURCE_DIR) / "traces" / "cpu-tiny";

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

TEST(RunData, LoadsTheCpuTinyRunFolder) {
    const RunData run = load_run(kCpuTiny);
    EXPECT_TRUE(run.errors.empty()) << run.errors.front();
    ASSERT_TRUE(run.has_trace && run.has_memory && run.has_report);
    EXPECT_EQ(run.label, "cpu-tiny");
    const TraceData& t = run.trace;
    EXPECT_EQ(t.schema, "napkin-trace/1");
    EXPECT_EQ(t.skipped_events, 0);
    const std::uint32_t host = lane_named(t, "host");
    const std::uint32_t device = lane_named(t, "device (cpu kernels)");
    ASSERT_NE(host, kNone);
    ASSERT_NE(device, kNone);
    EXPECT_FALSE(t.lanes[host].device);
    EXPECT_TRUE(t.lanes[device].device);
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
    EXPECT_EQ(run.report.measured_value("peak_total_bytes"), 19496960.0);
    EXPECT_EQ(run.report.model_name, "tiny");
    EXPECT_EQ(run.report.run_value("precision"), "fp32");
    EXPECT_EQ(run.report.step_seconds.size(), 3u);
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

TEST(RunData, WrongTypesAndHugeNumbersSkipTheEvent) {
    const std::string doc = R"({"traceEvents": [
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
    // good, the wrongly typed name/pid/tid one, "args wrong", the instant.
    EXPECT_EQ(t.events.size(), 4u);
    EXPECT_EQ(t.skipped_events, 15);
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
