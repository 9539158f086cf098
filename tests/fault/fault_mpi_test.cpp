// The fault suite under MPI: one rank of a ZeRO run killed (kill -9) at points spread over its
// sharded saves, then the run resumed on the same world size and stage: the final checkpoint is
// the uninterrupted run's, byte for byte, and no temporary is left (docs/CHECKPOINTS.md, "What
// survives which fault").
#include <map>

#include "fault_util.h"

namespace {

class FaultZero : public Fault, public testing::WithParamInterface<int> {
protected:
    // `mpirun -n 2` of napkin train: each rank writes its pid to `pids`<rank> and becomes napkin.
    std::string launch(const fs::path& pids, const std::string& args) const {
        return kMpiEnv + "timeout -k 5 60 " + std::string(NAPKIN_MPIEXEC) +
               " -n 2 --oversubscribe sh -c 'echo $$ > " + pids.string() +
               "$OMPI_COMM_WORLD_RANK; exec " + napkin_under_test() + " train" + args + "'";
    }
    // Waits (in the shell) until `pid_file` holds a pid, at most 20 s.
    static std::string await(const fs::path& pid_file) {
        return "for k in $(seq 2000); do [ -s " + pid_file.string() +
               " ] && break; sleep 0.01; done; ";
    }
    // The files of the last sharded checkpoint of `run` ("step-00000006/rank0.safetensors" ...),
    // with their bytes.
    static std::map<std::string, std::string> final_checkpoint(const fs::path& run,
                                                               const std::string& step) {
        std::map<std::string, std::string> files;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(run / "checkpoints" / step, ec))
            files[e.path().filename().string()] = slurp(e.path().string());
        return files;
    }
    static bool has_complete_checkpoint(const fs::path& run) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(run / "checkpoints", ec)) {
            if (fs::is_regular_file(e.path() / "manifest.json", ec)) return true;
        }
        return false;
    }
};

// Six steps with a sharded checkpoint after each: most of the run's time is saves. The killed
// rank alternates between 0 (which also writes the manifest) and 1.
TEST_P(FaultZero, AKilledRankResumesBitForBit) {
    std::string why;
    if (!have_mpi(&why)) GTEST_SKIP() << why;
    const std::string zero = " --zero " + std::to_string(GetParam());
    const std::string args =
        " --steps 6 --save-every 1 --micro-batch 2 --seq-len 16 --quiet" + zero + " --out ";
    const std::string last = "step-00000006";

    // The reference run, timed from its ranks' start (the pid files) to its end.
    const fs::path ref = dir_ / "ref", ref_pids = dir_ / "ref.pid", times = dir_ / "ref.times";
    const std::string timed = launch(ref_pids, args + ref.string()) + " >" +
                              (dir_ / "ref.log").string() + " 2>&1 & m=$!; " +
                              await(ref_pids.string() + "1") + "date +%s.%N > " + times.string() +
                              "; wait $m; r=$?; date +%s.%N >> " + times.string() + "; exit $r";
    ASSERT_EQ(std::system(timed.c_str()), 0) << slurp((dir_ / "ref.log").string());
    double start_s = 0, end_s = 0;
    std::ifstream(times) >> start_s >> end_s;
    const double window_s = end_s - start_s;
    ASSERT_GT(window_s, 0);
    const auto want = final_checkpoint(ref, last);
    ASSERT_EQ(want.size(), 3u) << "manifest.json and two shards";

    constexpr int kTrials = 4;
    for (int i = 0; i < kTrials; ++i) {
        const fs::path out = dir_ / ("t" + std::to_string(i)),
                       pids = dir_ / ("t" + std::to_string(i) + ".pid");
        const fs::path victim = pids.string() + std::to_string(i % 2);
        const double delay_s = window_s * (i + 0.5) / kTrials;
        const std::string cmd = launch(pids, args + out.string()) + " >/dev/null 2>&1 & m=$!; " +
                                await(victim) + "sleep " + std::to_string(delay_s) +
                                "; kill -KILL $(cat " + victim.string() + ") 2>/dev/null; wait $m";
        const int status = std::system(cmd.c_str());
        ASSERT_TRUE(WIFEXITED(status));
        const std::string at =
            "rank " + std::to_string(i % 2) + " killed at " + std::to_string(delay_s) + " s";
        if (WEXITSTATUS(status) != 0) {
            // Killed while training or saving: resumed (or run anew, before its first save). Killed
            // after its report, on the way out: the run is whole and --resume says it finished.
            const bool saved = has_complete_checkpoint(out);
            const bool reported = fs::exists(out / "report.json");
            const CliRun r =
                napkin("train" + (saved ? " --quiet" + zero + " --resume " + out.string()
                                        : args + out.string()),
                       kMpiEnv + kLongTimeout + std::string(NAPKIN_MPIEXEC) + " -n 2 --oversubscribe ");
            const bool finished =
                reported && r.rc == 2 &&
                r.err.find("the run already finished its 6 steps") != std::string::npos;
            ASSERT_TRUE(r.rc == 0 || finished) << at << ":\n" << r.err;
        }
        EXPECT_TRUE(final_checkpoint(out, last) == want)
            << at << ": the final checkpoint differs from the uninterrupted run's";
        for (const char* report : {"report.json", "rank1/report.json"}) {
            EXPECT_TRUE(fs::exists(out / report)) << at << ": " << report;
            EXPECT_FALSE(fs::exists(out / (std::string(report) + ".pending")))
                << at << ": " << report;
        }
        const std::vector<std::string> left = temporaries_under(out);
        EXPECT_TRUE(left.empty()) << at << ": " << left.front();
    }
}

INSTANTIATE_TEST_SUITE_P(Stage, FaultZero, testing::Values(1, 2, 3));

// A kill between two ranks' renames of their final reports leaves one rank's report waiting
// (report.json.pending) and the other's out: --resume of the finished run publishes the waiting
// one on that rank and exits 0 on every rank, whichever rank was behind. With every report out
// already, the run is refused as finished (exit 2).
TEST_F(Fault, AFinishedZeroRunWithOneRanksReportWaitingResumes) {
    std::string why;
    if (!have_mpi(&why)) GTEST_SKIP() << why;
    const fs::path run = dir_ / "z1";
    const std::string mpi =
        kMpiEnv + kLongTimeout + std::string(NAPKIN_MPIEXEC) + " -n 2 --oversubscribe ";
    ASSERT_EQ(napkin("train --steps 2 --micro-batch 2 --seq-len 16 --quiet --zero 1 --out " +
                         run.string(),
                     mpi)
                  .rc,
              0);
    for (const char* behind : {"report.json", "rank1/report.json"}) {
        const fs::path report = run / behind, pending = run / (std::string(behind) + ".pending");
        const std::string want = slurp(report.string());
        fs::rename(report, pending);
        const CliRun r = napkin("train --quiet --zero 1 --resume " + run.string(), mpi);
        ASSERT_EQ(r.rc, 0) << behind << " waiting:\n" << r.err;
        EXPECT_EQ(slurp(report.string()), want) << behind;
        EXPECT_FALSE(fs::exists(pending)) << behind;
        EXPECT_TRUE(fs::exists(run / "report.json") && fs::exists(run / "rank1/report.json"));
    }
    const CliRun again = napkin("train --quiet --zero 1 --resume " + run.string(), mpi);
    EXPECT_EQ(again.rc, 2) << again.err;
    EXPECT_NE(again.err.find("the run already finished its 2 steps"), std::string::npos)
        << again.err;
}

}  // namespace
