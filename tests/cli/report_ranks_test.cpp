// napkin report and napkin export on data-parallel run folders (RUN_DIR, RUN_DIR/rank<r>), built
// without mpirun: one real single-process `--zero 2` run (which writes the communication section
// at world size 1) copied into rank folders whose reports say world 2 or 4. Checks that every
// rank is shown and merged, that the run-level numbers follow the slowest rank, that the
// ranks' traces are lined up by their clock origins, and that a missing, disagreeing or
// truncated rank is refused with one line and no output file. The real mpirun run is in
// report_ranks_mpi_test.cpp (slow).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

void write_json(const fs::path& p, const json& j) {
    std::ofstream(p) << j.dump(1);
}

int lines(const std::string& s) {
    return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

constexpr std::int64_t kRankSkewNs = 1'000'000;  // rank r's clock zero is r ms after rank 0's

class ReportRanks : public testing::Test {
protected:
    static void SetUpTestSuite() {
        root_ = new fs::path(fresh_dir("runs"));
        const CliRun r = napkin(
            "train --device cpu --steps 3 --micro-batch 2 --seq-len 32 --zero 2 --profile all "
            "--quiet --out " +
            (*root_ / "base").string());
        ASSERT_EQ(r.rc, 0) << r.err;
    }
    static void TearDownTestSuite() {
        fs::remove_all(*root_);
        delete root_;
    }
    static fs::path base() { return *root_ / "base"; }

    // A fake W-rank run: the base run's files in RUN_DIR and RUN_DIR/rank<r>, each report saying
    // its rank and world, rank r's steps taking (1 + r) times as long.
    static fs::path make_run(const std::string& name, int world) {
        const fs::path dir = *root_ / name;
        fs::remove_all(dir);
        const json report = read_json(base() / "report.json");
        for (int r = 0; r < world; ++r) {
            const fs::path d = r == 0 ? dir : dir / ("rank" + std::to_string(r));
            fs::create_directories(d);
            json rep = report;
            rep["communication"]["world"] = world;
            rep["communication"]["rank"] = r;
            rep["communication"]["host"] = "testhost";
            rep["communication"]["clock_origin_ns"] = std::int64_t{1'000'000'000} + r * kRankSkewNs;
            for (json& s : rep["steps"]) {
                s["seconds"] = s["seconds"].get<double>() * (1 + r);
                s["tokens_per_s"] = s["tokens_per_s"].get<double>() / (1 + r);
            }
            write_json(d / "report.json", rep);
            fs::copy_file(base() / "trace.json", d / "trace.json");
        }
        return dir;
    }
    static fs::path* root_;
};
fs::path* ReportRanks::root_ = nullptr;

TEST_F(ReportRanks, BaseRunHasCommunicationTimes) {
    const json rep = read_json(base() / "report.json");
    ASSERT_TRUE(rep["communication"].is_object());
    EXPECT_EQ(rep["communication"]["world"], 1);
    EXPECT_TRUE(rep["communication"]["clock_origin_ns"].is_number_integer());
    EXPECT_FALSE(rep["communication"]["host"].get<std::string>().empty());
    EXPECT_GE(rep["communication"]["measured_total"]["seconds"].get<double>(), 0.0);
    for (const json& s : rep["steps"])
        EXPECT_GE(s["comm_seconds"].get<double>(), 0.0);
}

TEST_F(ReportRanks, ReportShowsEveryRank) {
    const fs::path two = make_run("two", 2);
    const CliRun t = napkin("report " + two.string() + " " + base().string());
    ASSERT_EQ(t.rc, 0) << t.err;
    for (const char* s : {"ranks of two: 2 ranks, ZeRO-2", "rank 0", "rank 1",
                          "sent MB/step (ring)", "received MB/step (ring)", "time in collectives",
                          "tokens/s of the rank", "all 2 ranks", "communication"}) {
        EXPECT_NE(t.out.find(s), std::string::npos) << s << "\n" << t.out;
    }
    EXPECT_EQ(t.out.find("ranks of base"), std::string::npos)
        << t.out;  // one process: no rank table

    const CliRun j = napkin("report --json --warmup 1 " + two.string() + " " + base().string());
    ASSERT_EQ(j.rc, 0) << j.err;
    const json doc = json::parse(j.out);
    ASSERT_EQ(doc["runs"].size(), 2u);
    const json& run = doc["runs"][0];
    EXPECT_EQ(run["label"], "two");
    EXPECT_EQ(run["world"], 2);
    EXPECT_EQ(run["zero"], 2);
    ASSERT_EQ(run["ranks"].size(), 2u);
    ASSERT_EQ(doc["runs"][1]["ranks"].size(), 1u);
    for (int r = 0; r < 2; ++r) {
        const json& k = run["ranks"][r];
        EXPECT_EQ(k["rank"], r);
        EXPECT_EQ(k["label"], "two rank " + std::to_string(r) + "/2");
        EXPECT_EQ(k["steps_counted"], 2);  // 3 steps, 1 of warm-up
        for (const char* c : {"parameters", "master_weights", "gradients", "optimizer_state"}) {
            EXPECT_EQ(k["memory"][c]["predicted"], k["memory"][c]["measured"]) << c;
        }
        EXPECT_TRUE(k["memory"]["communication"]["predicted"].is_null());
        EXPECT_GT(k["memory"]["communication"]["measured"].get<double>(), 0.0);  // ZeRO-2 buckets
        const json& c = k["communication"];
        ASSERT_TRUE(c.is_object());
        // World size 1 moves nothing; the fields are there all the same.
        EXPECT_EQ(c["sent_bytes_per_step"]["predicted"], c["sent_bytes_per_step"]["measured"]);
        EXPECT_EQ(c["received_bytes_per_step"]["predicted"],
                  c["received_bytes_per_step"]["measured"]);
        EXPECT_GE(c["share_of_step"].get<double>(), 0.0);
        EXPECT_LT(c["share_of_step"].get<double>(), 1.0);
    }
    // Rank 1's steps took twice as long: the run's step is rank 1's, its tokens/s both ranks'
    // tokens over it.
    const json& all = run["all_ranks"];
    const double r1_step = run["ranks"][1]["step_seconds_median"].get<double>();
    EXPECT_DOUBLE_EQ(run["ranks"][0]["step_seconds_median"].get<double>() * 2, r1_step);
    EXPECT_DOUBLE_EQ(all["step_seconds_median"].get<double>(), r1_step);
    // Per step, both ranks' tokens over rank 1's time (2 s_i): tokens / s_i; the median of
    // steps 1 and 2 is their mean.
    const json base_rep = read_json(base() / "report.json");
    const double tokens = base_rep["run"]["micro_batch"].get<double>() *
                          base_rep["run"]["seq_len"].get<double>() *
                          base_rep["run"]["grad_accum"].get<double>();
    const double expect = 0.5 * (tokens / base_rep["steps"][1]["seconds"].get<double>() +
                                 tokens / base_rep["steps"][2]["seconds"].get<double>());
    EXPECT_NEAR(all["tokens_per_s_median"].get<double>(), expect, 1e-6 * expect);
    EXPECT_EQ(all["ranks"], 2);
}

TEST_F(ReportRanks, SideBySideStagesAndARankAlone) {
    const fs::path two = make_run("two_b", 2), four = make_run("four", 4);
    const CliRun j = napkin("report --json " + two.string() + " " + four.string() + " " +
                            base().string() + " " + (four / "rank3").string());
    ASSERT_EQ(j.rc, 0) << j.err;
    const json doc = json::parse(j.out);
    ASSERT_EQ(doc["runs"].size(), 4u);
    EXPECT_EQ(doc["runs"][0]["ranks"].size(), 2u);
    EXPECT_EQ(doc["runs"][1]["ranks"].size(), 4u);
    EXPECT_EQ(doc["runs"][2]["ranks"].size(), 1u);
    EXPECT_EQ(doc["runs"][3]["ranks"].size(), 1u);
    EXPECT_EQ(doc["runs"][3]["label"], "four rank 3/4");
    EXPECT_EQ(doc["runs"][3]["ranks"][0]["rank"], 3);
    const CliRun t = napkin("report --top 0 " + two.string() + " " + four.string());
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_NE(t.out.find("ranks of two_b: 2 ranks"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("ranks of four: 4 ranks"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find("rank 3"), std::string::npos) << t.out;
}

TEST_F(ReportRanks, ExportGivesAProcessPerRank) {
    const fs::path two = make_run("two_c", 2);
    const fs::path out = fresh_dir("merged.json");
    const CliRun r =
        napkin("export " + two.string() + " " + base().string() + " -o " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("2 runs, 3 processes"), std::string::npos) << r.out;
    const auto check = napkin::profiler::check_trace_file(out);
    for (const auto& p : check.problems)
        ADD_FAILURE() << p;
    const json trace = read_json(out);
    std::map<int, std::string> names;
    std::map<int, int> sort_index;
    std::map<int, double> first_ts;
    std::set<std::uint64_t> starts;
    std::size_t flows = 0;
    for (const json& e : trace["traceEvents"]) {
        const int pid = e["pid"].get<int>();
        if (e["ph"] == "M" && e["name"] == "process_name")
            names[pid] = e["args"]["name"].get<std::string>();
        if (e["ph"] == "M" && e["name"] == "process_sort_index")
            sort_index[pid] = e["args"]["sort_index"].get<int>();
        if (e.contains("ts")) {
            const double ts = e["ts"].get<double>();
            first_ts[pid] = first_ts.count(pid) ? std::min(first_ts[pid], ts) : ts;
        }
        if (e["ph"] == "s") {
            starts.insert(e["id"].get<std::uint64_t>());
            ++flows;
        }
    }
    EXPECT_EQ(names, (std::map<int, std::string>{{1, "two_c rank 0/2: napkin"},
                                                 {2, "two_c rank 1/2: napkin"},
                                                 {3, "base: napkin"}}));
    EXPECT_EQ(sort_index, (std::map<int, int>{{1, 1}, {2, 2}, {3, 3}}));
    EXPECT_GT(flows, 100u);
    EXPECT_EQ(starts.size(), flows);  // flow ids unique across ranks and runs
    // The same trace twice, rank 1's clock zero 1 ms later: shifted by 1000 us.
    EXPECT_NEAR(first_ts[2] - first_ts[1], kRankSkewNs / 1e3, 1e-3);
    EXPECT_NEAR(first_ts[3], first_ts[1], 1e-3);
    const json& from = trace["otherData"]["merged_from"];
    ASSERT_EQ(from.size(), 3u);
    EXPECT_EQ(from[1]["rank"], 1);
    EXPECT_EQ(from[1]["world"], 2);
    EXPECT_FALSE(from[2].contains("rank"));
}

TEST_F(ReportRanks, ClocksOfOtherHostsAreNotShifted) {
    const fs::path two = make_run("two_hosts", 2);
    json rep = read_json(two / "rank1" / "report.json");
    rep["communication"]["host"] = "otherhost";
    write_json(two / "rank1" / "report.json", rep);
    const fs::path out = fresh_dir("hosts.json");
    const CliRun r = napkin("export " + two.string() + " -o " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("clocks do not compare"), std::string::npos) << r.out;
    const json trace = read_json(out);
    EXPECT_EQ(trace["otherData"]["merged_from"][1]["ts_offset_us"], 0.0);
    fs::remove(out);
}

TEST_F(ReportRanks, BadRanksAreOneLineAndWriteNothing) {
    const fs::path out = fresh_dir("bad_merged.json");
    auto expect_error = [&](const fs::path& run, const std::string& needle) {
        for (const std::string& args :
             {"report " + run.string(), "export " + run.string() + " -o " + out.string()}) {
            const CliRun r = napkin(args);
            EXPECT_EQ(r.rc, 1) << args << "\n" << r.err;
            EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
            EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
            EXPECT_FALSE(fs::exists(out)) << args;
            EXPECT_FALSE(durable_temporary_of(out)) << args;
        }
    };
    auto edit = [](const fs::path& file, auto change) {
        json j = read_json(file);
        change(j);
        write_json(file, j);
    };

    fs::path run = make_run("missing", 4);
    fs::remove_all(run / "rank2");
    expect_error(run, (run / "rank2").string() + ": no such folder (rank 2 of the 4");

    run = make_run("world", 2);
    edit(run / "rank1" / "report.json", [](json& j) { j["communication"]["world"] = 3; });
    expect_error(run, "rank1/report.json: communication.world: expected 2 (rank 0's, ");

    run = make_run("stage", 2);
    edit(run / "rank1" / "report.json", [](json& j) { j["communication"]["zero"] = 3; });
    expect_error(run, "rank1/report.json: communication.zero: expected ");

    run = make_run("number", 2);
    edit(run / "rank1" / "report.json", [](json& j) { j["communication"]["rank"] = 0; });
    expect_error(run, "rank1/report.json: communication.rank: expected 1 (its folder is rank1), got 0");

    run = make_run("single", 2);
    edit(run / "rank1" / "report.json", [](json& j) { j["communication"] = nullptr; });
    expect_error(run, "rank1/report.json: communication: expected an object (rank 0, ");

    run = make_run("truncated", 2);
    {
        std::ifstream in(run / "rank1" / "report.json");
        const std::string text(std::istreambuf_iterator<char>(in), {});
        in.close();
        std::ofstream(run / "rank1" / "report.json") << text.substr(0, text.size() / 2);
    }
    expect_error(run, "rank1/report.json: not valid JSON");

    run = make_run("stale", 2);
    fs::create_directories(run / "rank2");
    expect_error(run, "rank2: a rank folder beyond the world size 2");

    run = make_run("steps", 2);
    edit(run / "rank1" / "report.json", [](json& j) { j["steps"].erase(j["steps"].size() - 1); });
    {
        const CliRun r = napkin("report " + run.string());
        EXPECT_EQ(r.rc, 1) << r.err;
        EXPECT_EQ(lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("rank1/report.json: 2 steps, but"), std::string::npos) << r.err;
    }

    // A rank that was not profiled cannot be exported; its report is fine.
    run = make_run("untraced", 2);
    fs::remove(run / "rank1" / "trace.json");
    {
        const CliRun r = napkin("export " + run.string() + " -o " + out.string());
        EXPECT_EQ(r.rc, 1) << r.err;
        EXPECT_EQ(lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find("rank1/trace.json: no such file"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
        EXPECT_EQ(napkin("report " + run.string()).rc, 0);
    }
    // A truncated rank trace: export fails part-way and leaves nothing behind.
    run = make_run("truncated_trace", 2);
    {
        std::ifstream in(run / "rank1" / "trace.json");
        const std::string text(std::istreambuf_iterator<char>(in), {});
        in.close();
        std::ofstream(run / "rank1" / "trace.json") << text.substr(0, text.size() / 2);
        const CliRun r = napkin("export " + run.string() + " -o " + out.string());
        EXPECT_EQ(r.rc, 1) << r.err;
        EXPECT_NE(r.err.find("rank1/trace.json: not valid JSON"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(out));
        EXPECT_FALSE(durable_temporary_of(out));
    }

    const CliRun w = napkin("report --warmup 3 " + base().string());
    EXPECT_EQ(w.rc, 2) << w.err;
    EXPECT_NE(w.err.find("--warmup 3: leaves no step of"), std::string::npos) << w.err;
}

}  // namespace
