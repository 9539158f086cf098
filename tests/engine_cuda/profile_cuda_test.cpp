// A profiled CUDA training run checked through its trace (label gpu; skips without a device):
// `napkin train --device cuda --profile` must write the device's own activity (CUPTI, through
// the plugin): every kernel on a GPU stream track with a launch flow ending on it, the engine's
// name and analytic cost on every kernel, no record dropped, no kernel without its launch, GPU
// time on the host ranges' clock (each kernel inside its step), and kernel time that accounts
// for the step when the GPU is the bottleneck. It includes no CUDA header: it builds everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "profiler/step_profile.h"
#include "profiler/trace_check.h"
#include "tests/engine_cuda/cuda_engine_test_util.h"
#include "tests/profiler/temp_dir.h"

namespace {

struct Kernel {
    double ts = 0, dur = 0;
    int tid = 0;
    nlohmann::json args;
    std::string name;
};

// Runs napkin train with `flags` into a fresh folder, validates the trace and checks the GPU
// tracks. min_busy: the least share of each profiled step's CUDA-event time that kernels must
// fill.
void check_profiled_run(const std::string& flags, double min_busy) {
    napkin::profiler::test::TempDir dir;
    const std::string cmd = std::string(NAPKIN_BINARY) + " train --device cuda --quiet " + flags +
                            " --out " + dir.path().string() + " > " +
                            (dir.path() / "log.txt").string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n"
                                           << std::ifstream(dir.path() / "log.txt").rdbuf();
    const auto trace_path = dir.path() / "trace.json";
    const auto check = napkin::profiler::check_trace_file(trace_path);
    for (const auto& problem : check.problems)
        ADD_FAILURE() << problem;
    const nlohmann::json doc = nlohmann::json::parse(std::ifstream(trace_path));

    // What the collector says it lost: nothing.
    ASSERT_TRUE(doc["otherData"].contains("gpu_activity")) << doc["otherData"].dump();
    const auto& g = doc["otherData"]["gpu_activity"];
    EXPECT_EQ(g["dropped_records"], 0) << g.dump();
    EXPECT_EQ(g["buffers_refused"], 0) << g.dump();
    EXPECT_EQ(g["cupti_failures"], 0) << g.dump();
    EXPECT_EQ(g["unmatched_flows"], 0) << g.dump();
    EXPECT_GT(g["kernels"].get<int>(), 0) << g.dump();

    std::map<int, std::string> threads;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_name")
            threads[e["tid"].get<int>()] = e["args"]["name"];
    }
    std::vector<Kernel> kernels;
    std::vector<std::pair<double, double>> steps;  // ts, dur
    std::vector<int> step_numbers;                 // "step N"
    std::multimap<int, double> flow_ends;          // tid -> ts
    for (const auto& e : doc["traceEvents"]) {
        const std::string ph = e.value("ph", "");
        if (ph == "f") flow_ends.emplace(e["tid"].get<int>(), e["ts"].get<double>());
        if (ph != "X") continue;
        if (e.value("cat", "") == "step") {
            steps.emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
            step_numbers.push_back(std::stoi(e["name"].get<std::string>().substr(5)));
        }
        const int tid = e["tid"].get<int>();
        if (e.value("cat", "") != "kernel" || threads[tid].rfind("GPU ", 0) != 0) continue;
        kernels.push_back({e["ts"].get<double>(), e["dur"].get<double>(), tid,
                           e.value("args", nlohmann::json::object()), e["name"]});
    }
    ASSERT_FALSE(kernels.empty());
    ASSERT_FALSE(steps.empty());
    std::set<std::string> untagged, unlaunched;
    std::uint64_t flops = 0;
    for (const Kernel& k : kernels) {
        const bool is_kernel = k.args.contains("grid");  // not a memcpy or memset
        if (is_kernel && !k.args.contains("cost_split")) untagged.insert(k.name);
        if (k.args.contains("flops")) flops += k.args["flops"].get<std::uint64_t>();
        bool launched = false;
        auto [lo, hi] = flow_ends.equal_range(k.tid);
        for (auto it = lo; it != hi && !launched; ++it)
            launched = it->second >= k.ts && it->second <= k.ts + k.dur;
        if (!launched) unlaunched.insert(k.name);
    }
    for (const auto& n : untagged)
        ADD_FAILURE() << "kernel without the engine's name and cost: " << n;
    for (const auto& n : unlaunched)
        ADD_FAILURE() << "kernel without a launch flow: " << n;
    EXPECT_GT(flops, 0u);

    // The clock: every kernel inside a step (the step range closes after the synchronize), and
    // per step the kernels' summed time against the step's (one stream: they never overlap).
    // Against the step's own time on the device's stream too (CUDA events, report.json's
    // steps[].device_seconds): the acceptance's "kernel time within a few % of the step".
    const nlohmann::json report = nlohmann::json::parse(std::ifstream(dir.path() / "report.json"));
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto [ts, dur] = steps[i];
        double busy = 0;
        for (const Kernel& k : kernels) {
            if (k.ts >= ts && k.ts + k.dur <= ts + dur) busy += k.dur;
        }
        // Against the host's step range only an upper bound: the first profiled step's range
        // also holds CUPTI's start-up on the host (on an H200: 43.7 ms on the host, 40.0 ms by
        // CUDA events, kernels 38.3 ms), which is not the GPU's time.
        EXPECT_LE(busy, dur * 1.001);
        double device_us = 0;
        for (const auto& st : report["steps"]) {
            if (st["step"].get<int>() == step_numbers[i])
                device_us = st.value("device_seconds", 0.0) * 1e6;
        }
        EXPECT_GT(device_us, 0) << "step " << step_numbers[i]
                                << " has no device_seconds in report.json";
        EXPECT_LE(busy, device_us * 1.001) << "kernels longer than the CUDA-event step";
        EXPECT_GE(busy, min_busy * device_us)
            << "kernels fill " << 100 * busy / device_us << "% of the " << device_us / 1e3
            << " ms CUDA-event step";
        std::printf(
            "  step %d: %.3f ms on the host, %.3f ms by CUDA events, kernels %.3f ms (%.1f%% / "
            "%.1f%%)\n",
            step_numbers[i], dur / 1e3, device_us / 1e3, busy / 1e3, 100 * busy / dur,
            100 * busy / device_us);
    }
    std::size_t outside = 0;
    for (const Kernel& k : kernels) {
        bool in = false;
        for (const auto& [ts, dur] : steps)
            in |= k.ts >= ts && k.ts + k.dur <= ts + dur;
        outside += !in;
    }
    EXPECT_EQ(outside, 0u) << "kernels outside every step: the GPU clock is off the host's";
}

}  // namespace

// A tiny model: launch-bound, so the kernels fill only part of the step; the structure checks.
TEST(ProfileCuda, TinyRunHasEveryKernelLaunchedAndCosted) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    check_profiled_run("--steps 3 --profile steps:2-3", 0.0);
}

// GPT-2 124M at B = 8, T = 1024, bf16-amp: the GPU is the bottleneck, so the kernels' summed
// time must come within a few percent of the step's on the device (CUDA events): 0.93 leaves
// room under the 94-96% three runs on an H200 measured (its session's bench/results). The
// rest is idle time the trace shows as gaps between kernels, not missing kernels: about 1 ms in
// the ~1.5 us between each of the step's 684 kernels and copies, and about 0.35 ms where the
// stream waits for the host (the batch made and uploaded at the step's start, the loss and the
// gradient norm read back).
TEST(ProfileCuda, Gpt2KernelTimeAccountsForTheStep) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    NAPKIN_SKIP_ON_EMULATOR("GPT-2 steps take hours there");
    check_profiled_run(
        "--model gpt2 --micro-batch 8 --seq-len 1024 --precision bf16-amp --steps 3 --profile "
        "steps:2-3",
        0.93);
}

namespace {

// What a profiled run says about each step's device work, and its memory, for comparing a run
// with CUDA graphs against one without.
struct GraphProfileRun {
    // Per profiled step: the device records (kernels, copies, sets) as (arg "op", name).
    std::vector<std::multiset<std::pair<std::string, std::string>>> steps;
    // report.json: op -> device records per step, of the ops the records name (arg "op"; the
    // batch copies, named by none, go by their launch's time, which the clock map may put a
    // few microseconds into the neighbouring "data" range in one run and not the other).
    std::map<std::string, double> op_device_records;
    std::size_t graph_records = 0;  // records with arg "graph_node"
    std::size_t unmapped = 0;       // records of op "cuda_graph"
    std::size_t kernels_without_op = 0;
    double peak_total_counter = 0;  // the trace's memory_total counter, at its highest
    nlohmann::json report, memory;
};

GraphProfileRun graph_profile_run(const std::string& flags) {
    napkin::profiler::test::TempDir dir;
    const std::string cmd = std::string(NAPKIN_BINARY) + " train --device cuda --quiet " + flags +
                            " --out " + dir.path().string() + " > " +
                            (dir.path() / "log.txt").string() + " 2>&1";
    GraphProfileRun r;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n"
                                           << std::ifstream(dir.path() / "log.txt").rdbuf();
    const auto check = napkin::profiler::check_trace_file(dir.path() / "trace.json");
    for (const auto& problem : check.problems)
        ADD_FAILURE() << problem;
    const nlohmann::json doc = nlohmann::json::parse(std::ifstream(dir.path() / "trace.json"));
    r.report = nlohmann::json::parse(std::ifstream(dir.path() / "report.json"));
    r.memory = nlohmann::json::parse(std::ifstream(dir.path() / "memory.json"));
    std::map<int, std::string> threads;
    std::vector<std::pair<double, double>> steps;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] == "M" && e["name"] == "thread_name")
            threads[e["tid"].get<int>()] = e["args"]["name"];
        if (e["ph"] == "X" && e.value("cat", "") == "step") steps.emplace_back(e["ts"], e["dur"]);
        if (e["ph"] == "C" && e["name"] == "memory_total")
            r.peak_total_counter = std::max(r.peak_total_counter, e["args"]["bytes"].get<double>());
    }
    r.steps.resize(steps.size());
    std::set<std::string> named_ops;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] != "X" || e.value("cat", "") != "kernel") continue;
        if (threads[e["tid"].get<int>()].rfind("GPU ", 0) != 0) continue;
        const nlohmann::json args = e.value("args", nlohmann::json::object());
        const std::string op = args.value("op", "");
        if (!op.empty()) named_ops.insert(napkin::profiler::StepProfile::op_key(op));
        r.graph_records += args.contains("graph_node");
        r.unmapped += op == "cuda_graph";
        r.kernels_without_op += args.contains("grid") && op.empty();
        const double ts = e["ts"], dur = e["dur"];
        for (std::size_t s = 0; s < steps.size(); ++s) {
            if (ts >= steps[s].first && ts + dur <= steps[s].first + steps[s].second)
                r.steps[s].emplace(op, e["name"]);
        }
    }
    for (const auto& o : r.report["profile"]["ops"])
        if (o.contains("device_records_per_step") && named_ops.count(o["name"]) != 0)
            r.op_device_records[o["name"]] = o["device_records_per_step"].get<double>();
    return r;
}

}  // namespace

// With --cuda-graph on, a graph launch replaces each micro-batch's launch calls, which the
// profiler names kernels by: the nodes' ids (CUPTI's graphNodeId, mapped to the engine's calls
// when the capture made them) must give every kernel the op it has without graphs. Step 1 runs
// plainly, step 2 captures both batch slots, step 3 launches them: per step the same multiset
// of (op, kernel), report.json's ops the same device records, and memory the same peaks.
TEST(ProfileCuda, GraphsKeepEachKernelsOp) {
    NAPKIN_SKIP_WITHOUT_CUDA_ENGINE();
    const std::string flags =
        "--precision bf16-amp --grad-accum 2 --micro-batch 1 --seq-len 16 --steps 3 --profile all";
    const GraphProfileRun graphs = graph_profile_run(flags + " --cuda-graph on");
    const GraphProfileRun plain = graph_profile_run(flags + " --cuda-graph off");
    EXPECT_EQ(graphs.report["run"]["cuda_graph"], true);
    EXPECT_GT(graphs.graph_records, 0u) << "no record of a graph launch";
    EXPECT_EQ(plain.graph_records, 0u);
    EXPECT_EQ(graphs.unmapped, 0u) << "graph nodes mapped to no engine call";
    EXPECT_EQ(graphs.kernels_without_op, 0u);
    EXPECT_EQ(plain.kernels_without_op, 0u);
    EXPECT_EQ(graphs.report["profile"]["gpu_activity"]["unmatched_flows"], 0);
    ASSERT_EQ(graphs.steps.size(), 3u);
    ASSERT_EQ(plain.steps.size(), 3u);
    for (std::size_t s = 0; s < plain.steps.size(); ++s) {
        SCOPED_TRACE(testing::Message() << "step " << s + 1);
        EXPECT_FALSE(plain.steps[s].empty());
        EXPECT_EQ(graphs.steps[s], plain.steps[s]);
        if (graphs.steps[s] == plain.steps[s]) continue;
        for (const auto& [op, name] : graphs.steps[s])
            if (plain.steps[s].count({op, name}) != graphs.steps[s].count({op, name}))
                ADD_FAILURE() << op << " / " << name << ": " << graphs.steps[s].count({op, name})
                              << " with graphs, " << plain.steps[s].count({op, name}) << " without";
    }
    EXPECT_EQ(graphs.op_device_records, plain.op_device_records);
    EXPECT_EQ(graphs.memory["peak"]["total_bytes"], plain.memory["peak"]["total_bytes"]);
    EXPECT_EQ(graphs.memory["peak"]["by_category"], plain.memory["peak"]["by_category"]);
    EXPECT_EQ(graphs.memory["final"], plain.memory["final"]);
    EXPECT_GT(plain.peak_total_counter, 0.0);
    EXPECT_EQ(graphs.peak_total_counter, plain.peak_total_counter);
}
