// Data parallelism over real MPI ranks: `mpirun -n N napkin train --zero S` against one process
// accumulating the same global batch (N = 2 and 4, oversubscribed on any core count). Per rank:
// losses step for step, peak bytes of parameters, master weights, gradients and optimizer
// state equal to the estimator's prediction exactly, and bytes sent/received equal to the
// predicted communication exactly. Also: ranks started with different options are refused,
// a rank killed mid-run ends the job within a bounded time, so does a hung rank (after
// --comm-timeout), and sharded checkpoints resume bit
// for bit (after a killed rank too) and consolidate into a file any world size continues from.
// Skips without mpirun or without the MPI backend. Labelled slow; not run under the sanitizers
// (docs/ZERO.md).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/cli/mpi_util.h"

namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_MPI()                          \
    do {                                            \
        std::string why_;                           \
        if (!have_mpi(&why_)) GTEST_SKIP() << why_; \
    } while (0)

CliRun shell(const std::string& cmd) {
    const std::string stem = testing::TempDir() + "/napkin_zero_sh_" + std::to_string(getpid());
    const int status = std::system((cmd + " >" + stem + ".out 2>" + stem + ".err").c_str());
    CliRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(stem + ".out");
    r.err = slurp(stem + ".err");
    return r;
}

std::string mpirun(int n) {
    return kMpiEnv + NAPKIN_MPIEXEC + " -n " + std::to_string(n) + " --oversubscribe ";
}

const std::string kRun = "train --steps 3 --micro-batch 2 --seq-len 32 --grad-clip 0.5 --quiet ";
constexpr int kGlobalMicroBatches = 4;

// One rank accumulating all micro-batches, then N ranks at each stage: the same losses, and
// every rank's measured model states, temporaries and traffic equal to the prediction.
// tol: relative, on losses and gradient norms.
void check_stages(int n, const std::string& extra, double tol) {
    const fs::path base = fresh_dir("base" + std::to_string(n));
    const CliRun b = napkin(kRun + extra + " --grad-accum " + std::to_string(kGlobalMicroBatches) +
                            " --out " + base.string());
    ASSERT_EQ(b.rc, 0) << b.err;
    const auto ref = read_json(base / "report.json")["steps"];
    for (int zero = 0; zero <= 3; ++zero) {
        SCOPED_TRACE("N = " + std::to_string(n) + ", ZeRO-" + std::to_string(zero) + " " + extra);
        const fs::path out = fresh_dir("z" + std::to_string(zero) + "n" + std::to_string(n));
        const CliRun r = shell(mpirun(n) + NAPKIN_BINARY + " " + kRun + extra + " --grad-accum " +
                               std::to_string(kGlobalMicroBatches / n) + " --zero " +
                               std::to_string(zero) + " --out " + out.string());
        ASSERT_EQ(r.rc, 0) << r.out << r.err;
        for (int rank = 0; rank < n; ++rank) {
            const fs::path dir = rank == 0 ? out : out / ("rank" + std::to_string(rank));
            const auto j = read_json(dir / "report.json");
            ASSERT_EQ(j["steps"].size(), ref.size());
            for (std::size_t s = 0; s < ref.size(); ++s) {
                EXPECT_NEAR(j["steps"][s]["loss"].get<double>(), ref[s]["loss"].get<double>(),
                            tol * ref[s]["loss"].get<double>())
                    << "step " << s;
                EXPECT_NEAR(j["steps"][s]["grad_norm"].get<double>(),
                            ref[s]["grad_norm"].get<double>(),
                            10 * tol * ref[s]["grad_norm"].get<double>());
            }
            // The model states by the estimator's layout; the temporaries by its buffers (ZeRO's
            // buckets and gathered units are the `communication` category, measured only).
            for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state", "temporaries"}) {
                EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(),
                          j["predicted"][k].get<double>())
                    << "rank " << rank << " " << k;
            }
            const auto& c = j["communication"];
            EXPECT_EQ(c["world"], n);
            EXPECT_EQ(c["rank"], rank);
            EXPECT_EQ(c["measured_per_step"]["state_sent_bytes_min"],
                      c["measured_per_step"]["state_sent_bytes_max"]);
            EXPECT_EQ(c["measured_per_step"]["state_sent_bytes"].get<double>(),
                      c["predicted_per_step"]["sent_bytes"].get<double>());
            EXPECT_EQ(c["measured_per_step"]["state_received_bytes"].get<double>(),
                      c["predicted_per_step"]["received_bytes"].get<double>());
            EXPECT_GT(c["measured_per_step"]["state_sent_bytes"].get<double>(), 0);
        }
    }
}

TEST(ZeroMpi, TwoRanksFollowGradientAccumulation) {
    SKIP_WITHOUT_MPI();
    check_stages(2, "", 4e-6);  // fp32 sums in another order: a few ulps
}

// With dropout too: every rank draws the masks of its global micro-batches, as the one rank
// accumulating them all does (kernels/dropout.h's seeds), and recomputation draws them again.
TEST(ZeroMpi, FourRanksWithCheckpointingAndDropout) {
    SKIP_WITHOUT_MPI();
    check_stages(4, "--checkpointing full --dropout 0.1 --attention naive", 4e-6);
}

// Fine-tuning: the ranks shard the adapters' states (stages 1-3) and, at stage 3, the frozen
// base too (FSDP + QLoRA: NF4 bytes in bf16 storage, gathered per block); below it the base is
// whole on every rank.
TEST(ZeroMpi, TwoRanksFineTuneAdapters) {
    SKIP_WITHOUT_MPI();
    check_stages(2, "--finetune lora --lora-rank 4", 4e-6);
    check_stages(2, "--finetune qlora --lora-rank 4 --precision bf16-amp", 2e-3);
}

// adamw-8bit: block-aligned shards, so the update is the single process's (fp32: a few ulps
// from the gradients' sum order at most).
TEST(ZeroMpi, TwoRanksEightBitStates) {
    SKIP_WITHOUT_MPI();
    check_stages(2, "--optimizer adamw-8bit", 4e-6);
}

TEST(ZeroMpi, TwoRanksInBf16) {
    SKIP_WITHOUT_MPI();
    // bf16 gradients summed over ranks (a user-defined MPI_Op) round differently from bf16
    // gradients accumulated in place: about 2^-8 relative.
    check_stages(2, "--precision bf16-amp", 2e-3);
}

// fp8-amp with delayed scaling (the default, H 16): the ranks reduce their amaxes to the maximum
// each step, so they scale as one process accumulating the global batch does; its losses within
// bf16's 2e-3 (the gradient sums), and the amax all-reduce among the predicted bytes.
// tests/engine/gpt_fp8_ranks_test.cpp checks the ranks' scales bit for bit.
TEST(ZeroMpi, TwoRanksFp8Delayed) {
    SKIP_WITHOUT_MPI();
    check_stages(2, "--precision fp8-amp", 2e-3);
}

// --overlap changes when collectives run, not what they compute: on 2 ranks at every stage the
// losses, gradient norms and model-state peaks are bit for bit those of --overlap off, the
// bytes are the same, and a profiled step shows the collectives started inside the backward
// (and, at ZeRO-3, parameter gathers started ahead of the region that needs them) and waited
// for later.
TEST(ZeroMpi, OverlapChangesTheScheduleNotTheNumbers) {
    SKIP_WITHOUT_MPI();
    for (int zero = 0; zero <= 3; ++zero) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        nlohmann::json rep[2];
        for (int on = 0; on <= 1; ++on) {
            const fs::path out = fresh_dir("overlap" + std::to_string(zero) + std::to_string(on));
            const CliRun r = shell(mpirun(2) + NAPKIN_BINARY + " " + kRun + "--grad-accum 2 --zero " +
                                   std::to_string(zero) + " --overlap " + (on ? "on" : "off") +
                                   " --profile steps:1-1 --out " + out.string());
            ASSERT_EQ(r.rc, 0) << r.out << r.err;
            rep[on] = read_json(out / "report.json");
            std::ifstream f(out / "trace.json");
            const auto trace = nlohmann::json::parse(f);
            std::vector<std::pair<double, double>> backwards;  // [ts, ts + dur)
            int started_in_backward = 0, waits = 0, prefetches = 0;
            std::vector<std::pair<double, std::string>> ranges;
            for (const auto& e : trace["traceEvents"]) {
                if (e.value("ph", "") != "X") continue;
                const std::string name = e["name"];
                const double ts = e["ts"].get<double>();
                if (name == "backward") backwards.emplace_back(ts, ts + e["dur"].get<double>());
                ranges.emplace_back(ts, name);
            }
            auto in_backward = [&](double ts) {
                for (const auto& [a, b] : backwards) {
                    if (ts >= a && ts <= b) return true;
                }
                return false;
            };
            for (const auto& [ts, name] : ranges) {
                if (name.rfind("start ", 0) == 0 && name.find("gradients") != std::string::npos &&
                    in_backward(ts))
                    ++started_in_backward;
                if (name.rfind("wait ", 0) == 0) ++waits;
                if (name.rfind("start all_gather h.", 0) == 0) ++prefetches;
            }
            if (on == 1) {
                EXPECT_GT(started_in_backward, 0) << "no gradient collective started in the backward";
                EXPECT_GT(waits, 0);
                if (zero == 3) {
                    EXPECT_GT(prefetches, 0) << "no ZeRO-3 gather started ahead";
                }
            } else {
                EXPECT_EQ(started_in_backward + waits + prefetches, 0);
            }
        }
        ASSERT_EQ(rep[0]["steps"].size(), rep[1]["steps"].size());
        for (std::size_t s = 0; s < rep[0]["steps"].size(); ++s) {
            EXPECT_EQ(rep[0]["steps"][s]["loss"], rep[1]["steps"][s]["loss"]) << "step " << s;
            EXPECT_EQ(rep[0]["steps"][s]["grad_norm"], rep[1]["steps"][s]["grad_norm"]) << "step " << s;
        }
        for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state"})
            EXPECT_EQ(rep[0]["measured"]["peak_bytes"][k], rep[1]["measured"]["peak_bytes"][k]) << k;
        EXPECT_EQ(rep[0]["communication"]["measured_per_step"]["state_sent_bytes"],
                  rep[1]["communication"]["measured_per_step"]["state_sent_bytes"]);
    }
}

TEST(ZeroMpi, RanksWithOtherOptionsAreRefused) {
    SKIP_WITHOUT_MPI();
    const fs::path out = fresh_dir("mismatch");
    const std::string bin =
        std::string(NAPKIN_BINARY) + " " + kRun + "--zero 1 --out " + out.string();
    const CliRun r = shell(kMpiEnv + NAPKIN_MPIEXEC + " --oversubscribe -n 1 " + bin + " : -n 1 " +
                           bin + " --lr 1e-4");
    EXPECT_EQ(r.rc, 2) << r.out << r.err;
    // Every rank refuses; which line mpirun shows first depends on which rank exits first (it
    // kills the others then): rank 0's "(this rank has rank 0's)" or rank 1's "(this rank: ...".
    EXPECT_NE(r.err.find(" of 2: --lr differs between the ranks (this rank"), std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(out / "report.json"));
}

// Non-finite gradients stop every rank in the same step (the gradients are summed first): each
// writes its report with the step before and "diverged", then exits 1; no rank is cut short.
TEST(ZeroMpi, NonFiniteGradientsStopEveryRankWithItsReport) {
    SKIP_WITHOUT_MPI();
    const fs::path out = fresh_dir("diverged");
    const CliRun r = shell(mpirun(2) + NAPKIN_BINARY +
                           " train --steps 5 --micro-batch 2 --seq-len 32 --lr 1e30 --zero 2 "
                           "--quiet --out " +
                           out.string());
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("error: step 2: the gradients are not finite (NaN or inf); training "
                         "stopped; "),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("ending every rank"), std::string::npos) << r.err;
    for (const fs::path& report : {out / "report.json", out / "rank1" / "report.json"}) {
        ASSERT_TRUE(fs::exists(report)) << report << "\n" << r.err;
        const auto j = read_json(report);
        EXPECT_EQ(j["diverged"]["step"], 1) << report;
        EXPECT_EQ(j["steps"].size(), 1u) << report;
    }
}

TEST(ZeroMpi, KilledRankEndsTheJob) {
    SKIP_WITHOUT_MPI();
    const fs::path out = fresh_dir("killed");
    // Start a long run, find rank 1 among mpirun's children by its environment, kill it, and
    // time how long mpirun takes to end the others.
    const std::string script =
        "set -u; " + mpirun(2) + NAPKIN_BINARY +
        " train --steps 1000000 --micro-batch 2 --seq-len 32 --quiet --zero 2 --out " +
        out.string() +
        " & M=$!; for i in $(seq 100); do sleep 0.2; for p in $(pgrep -P $M); do "
        "if tr '\\0' '\\n' </proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then "
        "R=$p; fi; done; "
        "[ -n \"${R:-}\" ] && break; done; sleep 2; kill -9 $R; wait $M; echo \"mpirun status $?\"";
    const auto t0 = std::chrono::steady_clock::now();
    const CliRun r = shell("bash -c '" + [&] {
        std::string s;
        for (char ch : script)
            s += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
        return s;
    }() + "'");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 60.0) << r.out << r.err;
    EXPECT_NE(r.out.find("mpirun status"), std::string::npos) << r.out << r.err;
    EXPECT_EQ(r.out.find("mpirun status 0"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.err.find("exited on signal 9"), std::string::npos) << r.err;
}

// Rank 1 hangs without dying (test-only fault injection: it sleeps forever once 2 steps are
// done, outside any collective). Rank 0's next collective outlasts --comm-timeout 3: it prints
// one line naming the collective and ends the job, well within 60 s and non-zero. `timeout 120`
// guards the test itself should the timeout not work.
// overlap: with --overlap on the healthy rank waits in a started collective's wait(), whose
// deadline counts from the wait.
void expect_hung_rank_ends_the_job(const std::string& overlap) {
    SCOPED_TRACE("--overlap " + overlap);
    const fs::path out = fresh_dir("hung" + overlap);
    const auto t0 = std::chrono::steady_clock::now();
    const CliRun r =
        shell(kMpiEnv + "timeout 120 " + NAPKIN_MPIEXEC +
              " -n 2 --oversubscribe -x NAPKIN_TEST_HANG_RANK_AT_STEP=1:2 " + NAPKIN_BINARY +
              " train --steps 6 --micro-batch 2 --seq-len 32 --quiet --zero 2 "
              "--comm-timeout 3 --overlap " + overlap + " --out " +
              out.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 60.0) << r.out << r.err;
    EXPECT_GE(seconds, 3.0) << r.out << r.err;
    EXPECT_NE(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.rc, 124) << "timeout 120 ended it, not --comm-timeout: " << r.out << r.err;
    EXPECT_NE(r.err.find("napkin: rank 0 of 2: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" did not complete within 3 s (--comm-timeout); another rank is stuck "
                         "or gone; ending every rank\n"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(out / "report.json"));
}

TEST(ZeroMpi, HungRankEndsTheJobAfterTheCommTimeout) {
    SKIP_WITHOUT_MPI();
    expect_hung_rank_ends_the_job("off");
    expect_hung_rank_ends_the_job("on");
}

// ---- Sharded checkpoints (docs/ZERO.md, "Checkpoints") ----

const std::string kCkptRun =
    "train --steps 6 --micro-batch 2 --seq-len 32 --grad-accum 2 --grad-clip 0.5 --quiet ";

nlohmann::json steps_of(const fs::path& run_dir) {
    return read_json(run_dir / "report.json")["steps"];
}

// Resumed steps against the uninterrupted run's last ones: bitwise, or within tol (relative).
void expect_losses_follow(const nlohmann::json& resumed, const nlohmann::json& ref, double tol) {
    ASSERT_LE(resumed.size(), ref.size());
    const std::size_t first = ref.size() - resumed.size();
    for (std::size_t i = 0; i < resumed.size(); ++i) {
        EXPECT_EQ(resumed[i]["step"], ref[first + i]["step"]);
        const double got = resumed[i]["loss"].get<double>(), want = ref[first + i]["loss"].get<double>();
        if (tol == 0) EXPECT_EQ(got, want) << "step " << first + i + 1;
        else EXPECT_NEAR(got, want, tol * want) << "step " << first + i + 1;
    }
}

// Stop after step 4 at every stage, resume with the same world size and stage: steps 5-6 have
// bitwise the losses of the uninterrupted run, on every rank.
TEST(ZeroMpi, ShardedCheckpointResumesBitForBit) {
    SKIP_WITHOUT_MPI();
    for (int zero = 0; zero <= 3; ++zero) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        const std::string z = "--zero " + std::to_string(zero) + " ";
        const fs::path full = fresh_dir("full" + std::to_string(zero));
        const fs::path part = fresh_dir("part" + std::to_string(zero));
        const CliRun a = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + z + "--out " + full.string());
        ASSERT_EQ(a.rc, 0) << a.out << a.err;
        const CliRun b = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + z +
                               "--save-every 2 --stop-after 4 --out " + part.string());
        ASSERT_EQ(b.rc, 0) << b.out << b.err;
        EXPECT_TRUE(fs::exists(part / "checkpoints" / "step-00000004" / "manifest.json"));
        EXPECT_FALSE(fs::exists(part / "checkpoints" / "step-00000002")) << "older checkpoints go";
        const CliRun c = shell(mpirun(2) + NAPKIN_BINARY + " train --quiet " + z + "--resume " +
                               part.string());
        ASSERT_EQ(c.rc, 0) << c.out << c.err;
        EXPECT_NE(c.out.find("resumed " + (part / "checkpoints" / "step-00000004").string()),
                  std::string::npos)
            << c.out;
        expect_losses_follow(steps_of(part), steps_of(full), 0);
        expect_losses_follow(steps_of(part / "rank1"), steps_of(full / "rank1"), 0);
    }
}

// State beside the units' weights and moments: a fine-tuning run's frozen base (NF4 codes and
// scales; sharded at ZeRO-3), adamw-8bit's block absmax (whole at stage 0, sharded at 1-3) and
// fp8-amp's amax histories and scales (whole, in rank 0's file at every stage; resumed here at
// ZeRO-3, which shards the most).
// Resumed on 2 ranks the run is bit for bit the uninterrupted one; consolidated, one process
// and 2 ranks at ZeRO-3 continue it.
TEST(ZeroMpi, AdapterAndEightBitCheckpointsResume) {
    SKIP_WITHOUT_MPI();
    for (const auto& [recipe, tol] : {std::pair<std::string, double>{"--finetune qlora --lora-rank 4 "
                                                                     "--precision bf16-amp --zero 3 ", 2e-3},
                                      std::pair<std::string, double>{"--optimizer adamw-8bit --zero 0 ", 4e-6},
                                      std::pair<std::string, double>{"--optimizer adamw-8bit --zero 2 ", 4e-6},
                                      std::pair<std::string, double>{"--precision fp8-amp --zero 3 ", 2e-3}}) {
        SCOPED_TRACE(recipe);
        const std::string tag = std::to_string(recipe.size());
        const fs::path full = fresh_dir("afull" + tag), part = fresh_dir("apart" + tag);
        const CliRun a = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + recipe + "--out " + full.string());
        ASSERT_EQ(a.rc, 0) << a.out << a.err;
        const CliRun b = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + recipe +
                               "--save-every 2 --stop-after 4 --out " + part.string());
        ASSERT_EQ(b.rc, 0) << b.out << b.err;
        const fs::path file = fresh_dir("awhole" + tag) += ".safetensors";
        const CliRun c = napkin("ckpt consolidate " + part.string() + " -o " + file.string());
        ASSERT_EQ(c.rc, 0) << c.out << c.err;
        const std::string zero = recipe.substr(recipe.find("--zero"));
        const CliRun d = shell(mpirun(2) + NAPKIN_BINARY + " train --quiet " + zero + "--resume " + part.string());
        ASSERT_EQ(d.rc, 0) << d.out << d.err;
        expect_losses_follow(steps_of(part), steps_of(full), 0);
        const fs::path one = fresh_dir("aone" + tag);
        const CliRun e = napkin("train --quiet --resume " + file.string() + " --out " + one.string());
        ASSERT_EQ(e.rc, 0) << e.out << e.err;
        expect_losses_follow(steps_of(one), steps_of(full), tol);
        // The whole-state file into 2 ranks at ZeRO-3: each rank loads its shards of it (the
        // frozen storage's, the 8-bit absmax blocks').
        const fs::path two = fresh_dir("atwo" + tag);
        const CliRun f = shell(mpirun(2) + NAPKIN_BINARY + " train --quiet --zero 3 --resume " + file.string() +
                               " --out " + two.string());
        ASSERT_EQ(f.rc, 0) << f.out << f.err;
        expect_losses_follow(steps_of(two), steps_of(full), tol);
    }
}

// The acceptance: rank 1 SIGKILLs itself after step 5 (test-only fault injection), with
// complete checkpoints after steps 2 and 4; the job ends within a bounded time and non-zero.
// A later step folder with a shard but no manifest (a rank died while writing) is ignored;
// resuming from the last complete checkpoint repeats the uninterrupted run's steps 5-6.
TEST(ZeroMpi, KilledRankResumesFromTheLastCompleteCheckpoint) {
    SKIP_WITHOUT_MPI();
    const fs::path full = fresh_dir("kfull"), run = fresh_dir("killed_ckpt");
    const CliRun a = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + "--zero 3 --out " + full.string());
    ASSERT_EQ(a.rc, 0) << a.out << a.err;

    const auto t0 = std::chrono::steady_clock::now();
    const CliRun k = shell(mpirun(2) + "-x NAPKIN_TEST_KILL_RANK_AT_STEP=1:5 " + NAPKIN_BINARY +
                           " " + kCkptRun + "--zero 3 --save-every 2 --out " + run.string());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 60.0) << k.out << k.err;
    EXPECT_NE(k.rc, 0) << k.out << k.err;
    EXPECT_NE(k.err.find("signal 9"), std::string::npos) << k.err;
    EXPECT_FALSE(fs::exists(run / "report.json"));
    const fs::path ckpts = run / "checkpoints";
    ASSERT_TRUE(fs::exists(ckpts / "step-00000004" / "manifest.json")) << k.out << k.err;

    fs::create_directories(ckpts / "step-00000006");
    fs::copy_file(ckpts / "step-00000004" / "rank0.safetensors",
                  ckpts / "step-00000006" / "rank0.safetensors");
    const CliRun r = shell(mpirun(2) + NAPKIN_BINARY + " train --quiet --zero 3 --resume " +
                           run.string());
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("resumed " + (ckpts / "step-00000004").string() + " at step 4 of 6"),
              std::string::npos)
        << r.out;
    const auto resumed = steps_of(run);
    ASSERT_EQ(resumed.size(), 2u);
    expect_losses_follow(resumed, steps_of(full), 0);
    EXPECT_TRUE(fs::exists(ckpts / "step-00000006" / "manifest.json"));
}

// At ZeRO-0 every rank holds the same state: rank 0's shard alone carries it, rank 1's only its
// metadata, so the checkpoint is about one model state on disk (the single-process file of the
// same run, plus a few kB of headers), not two. It still resumes bit for bit (ShardedResume
// above) and consolidates into a file that one process continues from.
TEST(ZeroMpi, StageZeroCheckpointHoldsOneModelState) {
    SKIP_WITHOUT_MPI();
    // One process accumulating the 2 ranks' global batch of 4 micro-batches.
    const std::string single = "train --steps 6 --micro-batch 2 --seq-len 32 --grad-accum 4 "
                               "--grad-clip 0.5 --quiet ";
    const fs::path one = fresh_dir("z0one"), two = fresh_dir("z0two");
    const CliRun a = napkin(single + "--stop-after 4 --out " + one.string());
    ASSERT_EQ(a.rc, 0) << a.out << a.err;
    const CliRun b = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun +
                           "--zero 0 --stop-after 4 --out " + two.string());
    ASSERT_EQ(b.rc, 0) << b.out << b.err;
    const auto whole = static_cast<double>(fs::file_size(one / "checkpoint.safetensors"));
    const fs::path step = two / "checkpoints" / "step-00000004";
    const auto rank0 = static_cast<double>(fs::file_size(step / "rank0.safetensors"));
    const auto rank1 = static_cast<double>(fs::file_size(step / "rank1.safetensors"));
    EXPECT_LT(rank1, 64e3) << "rank 1 wrote model state";
    EXPECT_LT(rank0 + rank1, 1.05 * whole) << "more than one model state on disk";
    EXPECT_GT(rank0, 0.95 * whole) << "rank 0 did not write the model state";

    const fs::path file = two / "whole.safetensors";
    const CliRun c = napkin("ckpt consolidate " + two.string() + " -o " + file.string());
    ASSERT_EQ(c.rc, 0) << c.out << c.err;
    const fs::path cont = fresh_dir("z0cont");
    const CliRun r = napkin("train --quiet --resume " + file.string() + " --out " + cont.string());
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    const fs::path full = fresh_dir("z0full");
    ASSERT_EQ(napkin(single + "--out " + full.string()).rc, 0);
    expect_losses_follow(steps_of(cont), steps_of(full), 4e-6);
}

// A new 2-rank run started in an old run's folder and killed before its first save: the earlier
// run's sharded checkpoints were moved aside (RUN_DIR/checkpoints.previous) by rank 0 before any
// step, so --resume finds no checkpoint rather than the earlier run's.
TEST(ZeroMpi, NewRunInAnOldFolderSetsTheOldCheckpointsAside) {
    SKIP_WITHOUT_MPI();
    const fs::path run = fresh_dir("stale");
    const std::string two = mpirun(2) + NAPKIN_BINARY + " ";
    const CliRun a = shell(two + kCkptRun + "--zero 1 --stop-after 2 --out " + run.string());
    ASSERT_EQ(a.rc, 0) << a.out << a.err;
    ASSERT_TRUE(fs::exists(run / "checkpoints" / "step-00000002" / "manifest.json"));

    const CliRun k = shell(mpirun(2) + "-x NAPKIN_TEST_KILL_RANK_AT_STEP=1:1 " + NAPKIN_BINARY +
                           " " + kCkptRun + "--zero 1 --seed 7 --out " + run.string());
    EXPECT_NE(k.rc, 0) << k.out << k.err;
    EXPECT_NE(k.out.find("held an earlier run's checkpoint: moved checkpoints to checkpoints.previous"),
              std::string::npos)
        << k.out;
    EXPECT_FALSE(fs::exists(run / "checkpoints"));
    EXPECT_TRUE(fs::exists(run / "checkpoints.previous" / "step-00000002" / "manifest.json"));
    const CliRun r = shell(two + "train --quiet --zero 1 --resume " + run.string());
    EXPECT_NE(r.rc, 0) << r.out << r.err;  // each rank's usage error (exit 2)
    EXPECT_NE(r.err.find("--resume: no checkpoint at"), std::string::npos) << r.err;
}

// A sharded checkpoint resumes only at its own world size and stage; consolidated into one file
// it continues at one process (within fp32 reduction-order rounding) and at two ranks of any
// stage (bitwise at its own stage).
TEST(ZeroMpi, ConsolidatedCheckpointContinuesAtAnyWorldSize) {
    SKIP_WITHOUT_MPI();
    const fs::path full = fresh_dir("cfull"), part = fresh_dir("cpart");
    ASSERT_EQ(shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun + "--zero 3 --out " + full.string()).rc, 0);
    const CliRun b = shell(mpirun(2) + NAPKIN_BINARY + " " + kCkptRun +
                           "--zero 3 --stop-after 4 --out " + part.string());
    ASSERT_EQ(b.rc, 0) << b.out << b.err;
    const auto ref = steps_of(full);

    const CliRun other = napkin("train --quiet --zero 1 --resume " + part.string());
    EXPECT_EQ(other.rc, 2) << other.out << other.err;
    EXPECT_NE(other.err.find("was written by 2 ranks at ZeRO-3, this run has 1 rank at ZeRO-1"),
              std::string::npos)
        << other.err;
    EXPECT_NE(other.err.find("napkin ckpt consolidate " + part.string()), std::string::npos)
        << other.err;
    EXPECT_EQ(other.err.find('\n'), other.err.size() - 1) << other.err;

    const fs::path file = part / "whole.safetensors";
    const CliRun c = napkin("ckpt consolidate " + part.string() + " -o " + file.string());
    ASSERT_EQ(c.rc, 0) << c.out << c.err;
    EXPECT_NE(c.out.find("step 4"), std::string::npos) << c.out;

    const fs::path one = fresh_dir("cone");
    const CliRun r1 = napkin("train --quiet --resume " + file.string() + " --out " + one.string());
    ASSERT_EQ(r1.rc, 0) << r1.out << r1.err;
    expect_losses_follow(steps_of(one), ref, 4e-6);

    for (int zero : {3, 1}) {
        SCOPED_TRACE("two ranks, ZeRO-" + std::to_string(zero));
        const fs::path two = fresh_dir("ctwo" + std::to_string(zero));
        const CliRun r2 = shell(mpirun(2) + NAPKIN_BINARY + " train --quiet --zero " +
                                std::to_string(zero) + " --resume " + file.string() + " --out " +
                                two.string());
        ASSERT_EQ(r2.rc, 0) << r2.out << r2.err;
        expect_losses_follow(steps_of(two), ref, zero == 3 ? 0 : 4e-6);
    }
}

}  // namespace
