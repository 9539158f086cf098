// napkin report and napkin export on a real data-parallel run: `mpirun -n 2 napkin train --zero 3
// --profile all` (oversubscribed on any core count), then the report shows both ranks with
// measured model states and bytes equal to the prediction and a share of time in collectives,
// and the export has one process per rank with their collectives on it. Skips without mpirun or
// without the MPI backend; labelled slow (docs/ZERO.md).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"
#include "tests/cli/mpi_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;



TEST(ReportRanksMpi, TwoRanksReportedAndExported) {
    std::string why;
    if (!have_mpi(&why)) GTEST_SKIP() << why;
    const fs::path dir =
        fs::path(testing::TempDir()) / ("napkin_ranks_mpi_" + std::to_string(getpid()));
    fs::remove_all(dir);
    const fs::path run = dir / "z3";
    const std::string cmd =
        kMpiEnv + std::string(NAPKIN_MPIEXEC) + " -n 2 --oversubscribe " + NAPKIN_BINARY +
        " train --steps 3 --micro-batch 2 --seq-len 32 --grad-accum 2 --zero 3 --profile all "
        "--quiet --out " +
        run.string() + " >" + (dir.string() + ".log") + " 2>&1";
    fs::create_directories(dir);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(dir.string() + ".log");

    const CliRun j = napkin("report --json " + run.string());
    ASSERT_EQ(j.rc, 0) << j.err;
    const json doc = json::parse(j.out);
    const json& r = doc["runs"][0];
    EXPECT_EQ(r["world"], 2);
    EXPECT_EQ(r["zero"], 3);
    ASSERT_EQ(r["ranks"].size(), 2u);
    for (int k = 0; k < 2; ++k) {
        const json& rank = r["ranks"][k];
        EXPECT_EQ(rank["rank"], k);
        for (const char* c : {"parameters", "master_weights", "gradients", "optimizer_state"}) {
            EXPECT_EQ(rank["memory"][c]["predicted"], rank["memory"][c]["measured"])
                << "rank " << k << " " << c;
        }
        EXPECT_GT(rank["memory"]["communication"]["measured"].get<double>(),
                  0.0);  // gathered units
        const json& c = rank["communication"];
        EXPECT_GT(c["sent_bytes_per_step"]["measured"].get<double>(), 0.0);
        EXPECT_EQ(c["sent_bytes_per_step"]["predicted"], c["sent_bytes_per_step"]["measured"]);
        EXPECT_EQ(c["received_bytes_per_step"]["predicted"],
                  c["received_bytes_per_step"]["measured"]);
        EXPECT_GT(c["share_of_step"].get<double>(), 0.0);
        EXPECT_LT(c["share_of_step"].get<double>(), 1.0);
    }
    EXPECT_GT(r["all_ranks"]["tokens_per_s_median"].get<double>(), 0.0);
    const CliRun t = napkin("report " + run.string());
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_NE(t.out.find("ranks of z3: 2 ranks, ZeRO-3"), std::string::npos) << t.out;

    const fs::path out = dir / "merged.json";
    const CliRun e = napkin("export " + run.string() + " -o " + out.string());
    ASSERT_EQ(e.rc, 0) << e.err;
    const auto check = napkin::profiler::check_trace_file(out);
    for (const auto& p : check.problems)
        ADD_FAILURE() << p;
    std::ifstream f(out);
    const json trace = json::parse(f);
    std::map<int, std::string> names;
    std::map<int, int> gathers;
    std::set<std::uint64_t> starts;
    std::size_t flows = 0;
    for (const json& ev : trace["traceEvents"]) {
        const int pid = ev["pid"].get<int>();
        if (ev["ph"] == "M" && ev["name"] == "process_name")
            names[pid] = ev["args"]["name"].get<std::string>();
        if (ev["ph"] == "X" && ev["name"].get<std::string>().rfind("all_gather ", 0) == 0)
            ++gathers[pid];
        if (ev["ph"] == "s") {
            starts.insert(ev["id"].get<std::uint64_t>());
            ++flows;
        }
    }
    EXPECT_EQ(names,
              (std::map<int, std::string>{{1, "z3 rank 0/2: napkin"}, {2, "z3 rank 1/2: napkin"}}));
    EXPECT_GT(gathers[1], 0);
    EXPECT_EQ(gathers[1], gathers[2]);  // every rank gathers every unit
    EXPECT_EQ(starts.size(), flows);
    fs::remove_all(dir);
    fs::remove(dir.string() + ".log");
}

}  // namespace
