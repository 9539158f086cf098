// napkin report and napkin export on real profiled CPU runs: the tables, the merged trace, the
// op coverage of each step, and every kind of bad input refused with one line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"
#include "tests/profiler/double_nesting.h"

namespace {

namespace fs = std::filesystem;

int lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

// Two profiled runs that differ in recipe, made once for the suite.
class ReportCli : public testing::Test {
protected:
    static void SetUpTestSuite() {
        root_ = new fs::path(fresh_dir("runs"));
        const std::string common = " --device cpu --steps 3 --profile all --quiet --out ";
        ASSERT_EQ(napkin("train" + common + (*root_ / "fp32").string()).rc, 0);
        ASSERT_EQ(napkin("train --precision bf16-amp --checkpointing full" + common + (*root_ / "bf16-full").string()).rc, 0);
    }
    static void TearDownTestSuite() {
        fs::remove_all(*root_);
        delete root_;
    }
    static fs::path run(const std::string& name) { return *root_ / name; }
    static fs::path* root_;
};
fs::path* ReportCli::root_ = nullptr;

// The acceptance bar of the profiler: on the CPU, op ranges account for >= 95% of each step.
TEST_F(ReportCli, OpRangesCoverEachStep) {
    for (const char* name : {"fp32", "bf16-full"}) {
        const auto report = read_json(run(name) / "report.json");
        ASSERT_EQ(report["profile"]["steps"].size(), 3u);
        for (const auto& s : report["profile"]["steps"]) {
            EXPECT_GE(s["op_coverage"].get<double>(), 0.95) << name << " " << s["name"];
            EXPECT_GT(s["roofline_seconds"].get<double>(), 0.0);
            EXPECT_LE(s["kernel_seconds"].get<double>(), s["op_seconds"].get<double>() * 1.000001);
        }
        // Per-step MFU and HFU; HFU counts recomputation, so it is higher under checkpointing.
        for (const auto& s : report["steps"]) {
            EXPECT_GT(s["mfu"].get<double>(), 0.0);
            if (std::string(name) == "bf16-full") {
                EXPECT_GT(s["hfu"].get<double>(), s["mfu"].get<double>());
            }
        }
        EXPECT_GT(report["predicted"]["closed_form"]["model_flops_per_step"].get<double>(), 0.0);
    }
}

TEST_F(ReportCli, TableSideBySide) {
    // Every op listed (--top 100): which ops make the default 12 depends on the machine's load,
    // and "(recompute)" was left out on a loaded one.
    const CliRun r =
        napkin("report --top 100 " + run("fp32").string() + " " + run("bf16-full").string());
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* s :
         {"fp32", "bf16-full", "bf16-amp", "activations", "closed form", "MFU", "MFU, median step",
          "HFU", "ops of fp32", "ops of bf16-full", "attn.qkv", "(recompute)",
          "step, predicted (model)", "measured / predicted", "x model"}) {
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    }
    // Cells stay apart however wide: no two numbers run together ("2460.022460.02"), no device
    // name into the next ("cuda: NVIDIA H200cuda: ...").
    EXPECT_FALSE(std::regex_search(r.out, std::regex(R"(\.\d{3,}\.\d)"))) << r.out;
    EXPECT_FALSE(std::regex_search(r.out, std::regex(R"(\S(cpu|cuda): )"))) << r.out;
    const CliRun j = napkin("report --json " + run("fp32").string() + " " + run("bf16-full").string());
    ASSERT_EQ(j.rc, 0) << j.err;
    const auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["schema"], "napkin-report/1");
    ASSERT_EQ(doc["runs"].size(), 2u);
    for (const auto& run : doc["runs"]) {
        EXPECT_EQ(run["memory"]["parameters"]["predicted"], run["memory"]["parameters"]["measured"]);
        EXPECT_FALSE(run["ops"].empty());
        EXPECT_GT(run["mfu_median"].get<double>(), 0.0) << run.dump();
        // The performance model's step and ops beside the measured ones, met by op name.
        EXPECT_GT(run["predicted_step_seconds"].get<double>(), 0.0);
        int modelled = 0;
        for (const auto& op : run["ops"])
            modelled += op["model_seconds_per_step"].is_number();
        EXPECT_GE(modelled, static_cast<int>(run["ops"].size()) - 2) << run["ops"].dump();
    }
    EXPECT_EQ(napkin("report --top 0 " + run("fp32").string()).out.find("ops of"), std::string::npos);
}

// An offloaded run's report (as napkin train --offload optimizer writes it on a GPU: the host's
// model states, predicted and measured) gets host rows; the other run's column shows "-".
TEST_F(ReportCli, OffloadedRunsShowTheirHostMemory) {
    const fs::path dir = fresh_dir("offloaded");
    fs::create_directories(dir);
    fs::copy_file(run("bf16-full") / "report.json", dir / "report.json");
    auto report = read_json(dir / "report.json");
    report["predicted"]["host_memory"] = {{"master_weights", 4e6}, {"gradients", 4e6}, {"optimizer_state", 8e6}};
    report["measured"]["host_peak_bytes"] = {{"master_weights", 4e6}, {"gradients", 4e6}, {"optimizer_state", 8e6}};
    std::ofstream(dir / "report.json") << report.dump(2);
    const CliRun r = napkin("report --top 0 " + run("fp32").string() + " " + dir.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* s : {"host (offloaded) master_weights", "host (offloaded) optimizer_state", "8.00 / 8.00"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    const CliRun plain = napkin("report --top 0 " + run("fp32").string());
    EXPECT_EQ(plain.out.find("host (offloaded)"), std::string::npos) << plain.out;
    fs::remove_all(dir);
}

// A GPU run's op ranges time the host's launches: the table ranks and times the ops by the GPU
// time of the kernels each launched (report.json's device_seconds_per_step), and says so. CPU
// runs keep the host's time.
TEST_F(ReportCli, GpuRunsRankOpsByTheirKernelsTime) {
    const fs::path dir = fresh_dir("gpu-run");
    fs::create_directories(dir);
    auto report = read_json(run("bf16-full") / "report.json");
    report["run"]["device"] = "cuda: NVIDIA H200";
    auto& ops = report["profile"]["ops"];
    ASSERT_GE(ops.size(), 2u);
    for (auto& o : ops) {
        o["device_seconds_per_step"] = 1e-6;
        o["device_flops_per_s"] = 1e9;
    }
    ops.back()["device_seconds_per_step"] = 0.5;  // the host's last op is the GPU's first
    const std::string last = ops.back()["name"];
    std::ofstream(dir / "report.json") << report.dump(2);
    const CliRun r = napkin("report --top 1 " + dir.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("GPU time of the kernels each op launched"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  " + last + " "), std::string::npos) << r.out;
    const CliRun cpu = napkin("report --top 1 " + run("bf16-full").string());
    EXPECT_EQ(cpu.out.find("GPU time"), std::string::npos) << cpu.out;
    fs::remove_all(dir);
}

TEST_F(ReportCli, ExportMergesRunsAsProcesses) {
    const fs::path out = fresh_dir("merged.json");
    const CliRun r = napkin("export " + run("fp32").string() + " " + run("bf16-full").string() + " -o " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto check = napkin::profiler::check_trace_file(out);
    for (const auto& p : check.problems) ADD_FAILURE() << p;
    const auto trace = read_json(out);
    std::set<int> pids;
    std::set<std::string> names;
    std::set<std::uint64_t> starts;
    std::size_t flows = 0;
    for (const auto& e : trace["traceEvents"]) {
        pids.insert(e["pid"].get<int>());
        if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"].get<std::string>());
        if (e["ph"] == "s") {
            starts.insert(e["id"].get<std::uint64_t>());
            ++flows;
        }
    }
    EXPECT_EQ(pids, (std::set<int>{1, 2}));
    EXPECT_EQ(names, (std::set<std::string>{"fp32: napkin", "bf16-full: napkin"}));
    EXPECT_GT(flows, 100u);
    EXPECT_EQ(starts.size(), flows);  // flow ids stay unique across runs
    EXPECT_EQ(trace["otherData"]["schema"], "napkin-trace/1");
    EXPECT_EQ(trace["otherData"]["merged_from"].size(), 2u);
}

TEST_F(ReportCli, BadInputIsOneLineAndWritesNothing) {
    const fs::path bad = fresh_dir("bad");
    fs::create_directories(bad);
    const fs::path out = bad / "merged.json";
    auto expect_error = [&](const std::string& args, int rc, const std::string& needle) {
        const CliRun r = napkin(args);
        EXPECT_EQ(r.rc, rc) << args << "\n" << r.err;
        EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
        EXPECT_FALSE(fs::exists(out)) << args;
        EXPECT_FALSE(durable_temporary_of(out)) << args;
    };
    expect_error("report", 2, "runs is required");
    expect_error("report " + (bad / "missing").string(), 1, "no such folder");
    expect_error("report " + bad.string(), 1,
                 "holds neither report.json (napkin train --out) nor generate.json");
    expect_error("report --warmup -1 " + run("fp32").string(), 2,
                 "--warmup: must be 0 or a positive integer (got '-1')");
    expect_error("report --top x " + run("fp32").string(), 2,
                 "--top: must be 0 or a positive integer");
    expect_error("export " + run("fp32").string(), 2, "--out is required");
    expect_error("export " + (bad / "missing").string() + " -o " + out.string(), 1, "no such folder");

    // Truncated, malformed and future-version copies of a real run.
    const std::string report = [&] {
        std::ifstream f(run("fp32") / "report.json");
        return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    const std::string trace = [&] {
        std::ifstream f(run("fp32") / "trace.json");
        return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    auto make = [&](const std::string& name, const std::string& rep, const std::string& tr) {
        const fs::path d = bad / name;
        fs::create_directories(d);
        std::ofstream(d / "report.json") << rep;
        std::ofstream(d / "trace.json") << tr;
        return d.string();
    };
    const std::string truncated = make("truncated", report.substr(0, report.size() / 2), trace.substr(0, trace.size() / 2));
    expect_error("report " + truncated, 1, "not valid JSON");
    expect_error("export " + run("fp32").string() + " " + truncated + " -o " + out.string(), 1, "not valid JSON");
    const std::string garbage = make("garbage", "{\"schema\": napkin}", "not json at all");
    expect_error("report " + garbage, 1, "not valid JSON");
    expect_error("export " + garbage + " -o " + out.string(), 1, "not valid JSON");
    auto future = [](std::string s, const std::string& from, const std::string& to) {
        s.replace(s.find(from), from.size(), to);
        return s;
    };
    const std::string v9 =
        make("v9", future(report, "napkin-train-report/2", "napkin-train-report/9"),
             future(trace, "napkin-trace/1", "napkin-trace/9"));
    expect_error(
        "report " + v9, 1,
        "schema: expected napkin-train-report/1-2, got \"napkin-train-report/9\" (newer than this "
        "napkin reads: update napkin)");
    expect_error("export " + v9 + " -o " + out.string(), 1, "napkin-trace/9 is not supported");
    const std::string wrong_type = make("wrong_type", future(report, "\"tokens_per_s\":", "\"tokens_per_s\": \"fast\", \"x\":"), trace);
    expect_error("report " + wrong_type, 1, "measured.tokens_per_s: expected a number, got \"fast\"");
    // A run without a trace cannot be exported.
    const fs::path plain = bad / "plain";
    ASSERT_EQ(napkin("train --device cpu --steps 1 --quiet --out " + plain.string()).rc, 0);
    expect_error("export " + plain.string() + " -o " + out.string(), 1, "--profile");
    fs::remove_all(bad);
}

// Export takes other tools' traces beside napkin's and writes times that nest in double:
// traces/h200-gpt2 (a real GPU run, given twice: named apart), torch.profiler's Kineto layout
// (tests/viewer/data), a real torch 1.13 recording (the legacy bare array), a Kineto trace in
// Unix-epoch microseconds (19 digits), rebased to start at 0 with its nanoseconds kept.
// napkin report on a napkin generate run folder: the inference report (memory by category
// predicted and measured, prefill and decode time, tokens/s), --json's generate_runs[] equal to
// generate.json's numbers, beside a training run, and its refusals in one line.
TEST_F(ReportCli, GenerateRunShowsTheInferenceReport) {
    const fs::path gen = fresh_dir("generate");
    ASSERT_EQ(napkin("generate --synthetic-prompt 6 --batch 2 --max-new-tokens 4 --precision bf16 "
                     "-o " +
                     gen.string())
                  .rc,
              0);
    const auto g = read_json(gen / "generate.json");
    const CliRun t = napkin("report " + gen.string());
    ASSERT_EQ(t.rc, 0) << t.err;
    for (const char* needle : {"generate run", "parameters", "kv_cache", "temporaries", "total",
                               "prefill", "decode per token (3)", "tokens/s", "time model:"})
        EXPECT_NE(t.out.find(needle), std::string::npos) << needle << "\n" << t.out;
    EXPECT_EQ(t.out.find("DIFFERS"), std::string::npos) << t.out;

    // --json: the file's numbers, under generate_runs[]; the same through generate.json's path.
    for (const fs::path& arg : {gen, gen / "generate.json"}) {
        const CliRun j = napkin("report --json " + arg.string());
        ASSERT_EQ(j.rc, 0) << j.err;
        const auto doc = nlohmann::json::parse(j.out);
        EXPECT_EQ(doc["schema"], "napkin-report/1");
        EXPECT_TRUE(doc["runs"].empty());
        ASSERT_EQ(doc["generate_runs"].size(), 1u);
        const auto& r = doc["generate_runs"][0];
        EXPECT_EQ(r["model"], g["model"]["name"]);
        EXPECT_EQ(r["batch"], 2);
        EXPECT_EQ(r["prompt_len"], 6);
        EXPECT_EQ(r["precision"], "bf16");
        EXPECT_EQ(r["flash_decoding"], false);  // the CPU
        for (const char* c : {"parameters", "kv_cache", "activations", "temporaries", "data"}) {
            EXPECT_EQ(r["memory"][c]["predicted"], g["predicted"]["memory"][c]) << c;
            EXPECT_EQ(r["memory"][c]["measured"], g["measured"]["peak_bytes"][c]) << c;
            EXPECT_EQ(r["memory"][c]["predicted"], r["memory"][c]["measured"]) << c;
        }
        EXPECT_EQ(r["memory"]["total"]["measured"], g["measured"]["peak_total_bytes"]);
        EXPECT_EQ(r["prefill_seconds"]["measured"], g["measured"]["prefill_seconds"]);
        EXPECT_EQ(r["prefill_seconds"]["predicted"], g["predicted"]["time"]["prefill_seconds"]);
        EXPECT_EQ(r["decode_seconds_per_token"]["measured"],
                  g["measured"]["decode_seconds_per_token"]);
        EXPECT_EQ(r["decode_seconds_per_token"]["predicted"],
                  g["predicted"]["time"]["decode_seconds_per_token"]);
        EXPECT_EQ(r["tokens_per_s"]["measured"], g["measured"]["tokens_per_s"]);
        EXPECT_EQ(r["decode_steps"], 3);
    }

    // Beside a training run: the training table, then the inference report.
    const CliRun both = napkin("report " + run("fp32").string() + " " + gen.string());
    ASSERT_EQ(both.rc, 0) << both.err;
    EXPECT_NE(both.out.find("time and throughput"), std::string::npos) << both.out;
    EXPECT_NE(both.out.find("decode per token"), std::string::npos) << both.out;
    const CliRun both_json = napkin("report --json " + run("fp32").string() + " " + gen.string());
    ASSERT_EQ(both_json.rc, 0) << both_json.err;
    const auto doc = nlohmann::json::parse(both_json.out);
    EXPECT_EQ(doc["runs"].size(), 1u);
    EXPECT_EQ(doc["generate_runs"].size(), 1u);

    // A generate.json with a field of the wrong type, or from a newer schema: one line, exit 1.
    const fs::path bad = fresh_dir("generate_bad");
    fs::create_directories(bad);
    auto g2 = g;
    g2["measured"]["prefill_seconds"] = "slow";
    std::ofstream(bad / "generate.json") << g2.dump();
    CliRun r = napkin("report " + bad.string());
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("generate.json: measured.prefill_seconds: expected"), std::string::npos)
        << r.err;
    g2 = g;
    g2["schema"] = "napkin-generate/2";
    std::ofstream(bad / "generate.json") << g2.dump();
    r = napkin("report " + bad.string());
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("schema"), std::string::npos) << r.err;
    fs::remove_all(bad);
    fs::remove_all(gen);
}

TEST(ExportCli, MergesKinetoTracesAndNestsInDouble) {
    const fs::path src(NAPKIN_SOURCE_DIR);
    const fs::path dir = fresh_dir("export_kineto");
    fs::create_directories(dir);
    const fs::path epoch = dir / "epoch.json";
    std::ofstream(epoch) << R"({"schemaVersion":1,"traceEvents":[
        {"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":1732601234567890.123,"dur":98.37},
        {"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":1732601234567988.493,"dur":1}
    ],"baseTimeNanoseconds":1732600000000000000})";
    const fs::path out = dir / "merged.json";
    const std::string h200 = (src / "traces/h200-gpt2").string();
    const CliRun r = napkin("export " + h200 + " " + h200 + " " +
                            (src / "tests/viewer/data/pytorch_profiler_trace.json").string() + " " +
                            epoch.string() + " -o " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    // torch 1.13's legacy export is taken too (its integer microseconds overlap by 1 us in the
    // input: not a rounding export could undo, so it stays out of the nesting check).
    const fs::path legacy = src / "tests/viewer/data/torch_cpu_gpt_trace.json";
    EXPECT_EQ(napkin("export " + legacy.string() + " -o " + (dir / "legacy.json").string()).rc, 0);
    const nlohmann::json trace = read_json(out);
    const std::vector<std::string> faults = napkin::test::double_nesting_faults(trace);
    EXPECT_TRUE(faults.empty()) << faults.size() << " faults, first " << faults.front();
    std::vector<std::string> labels;
    for (const auto& m : trace["otherData"]["merged_from"]) labels.push_back(m["label"]);
    ASSERT_EQ(labels.size(), 4u);
    EXPECT_EQ(labels[0], "h200-gpt2");
    EXPECT_EQ(labels[1], "h200-gpt2 (2)");
    double k1 = -1, k2 = -1;
    for (const auto& e : trace["traceEvents"]) {
        if (e.value("name", "") == "k1") k1 = e["ts"].get<double>();
        if (e.value("name", "") == "k2") k2 = e["ts"].get<double>();
    }
    EXPECT_EQ(k1, 0.0);
    EXPECT_EQ(k2, 98.37);  // 1732601234567988.493 - ...890.123, to the nanosecond
    fs::remove_all(dir);
}

}  // namespace

namespace {

// An fp8-amp run records its amax history length in report.json (run.fp8_amax_history), and
// `napkin report` prints it in the settings: 4, "0 (current scaling)", "-" for a run of another
// precision (which has no key).
TEST(ReportCliFp8, PrintsTheAmaxHistoryLength) {
    const fs::path dir = fresh_dir("fp8_history");
    const std::string common = "train --device cpu --steps 1 --quiet --precision ";
    ASSERT_EQ(napkin(common + "fp8-amp --fp8-amax-history 4 --out " + (dir / "h4").string()).rc, 0);
    ASSERT_EQ(napkin(common + "fp8-amp --fp8-amax-history 0 --out " + (dir / "h0").string()).rc, 0);
    ASSERT_EQ(napkin(common + "bf16-amp --out " + (dir / "bf16").string()).rc, 0);
    EXPECT_EQ(read_json(dir / "h4" / "report.json")["run"]["fp8_amax_history"], 4);
    EXPECT_EQ(read_json(dir / "h0" / "report.json")["run"]["fp8_amax_history"], 0);
    EXPECT_FALSE(read_json(dir / "bf16" / "report.json")["run"].contains("fp8_amax_history"));
    const CliRun r = napkin("report --top 0 " + (dir / "h4").string() + " " +
                            (dir / "h0").string() + " " + (dir / "bf16").string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::size_t row = r.out.find("fp8 amax history");
    ASSERT_NE(row, std::string::npos) << r.out;
    const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
    EXPECT_NE(line.find(" 4 "), std::string::npos) << line;
    EXPECT_NE(line.find("0 (current scaling)"), std::string::npos) << line;
    EXPECT_NE(line.find(" -"), std::string::npos) << line;
    // A plain run's report prints no such row.
    EXPECT_EQ(napkin("report --top 0 " + (dir / "bf16").string()).out.find("fp8 amax history"),
              std::string::npos);
    fs::remove_all(dir);
}

}  // namespace
