// The fault-injection suite (CTest label `fault`, run by scripts/test.sh within its time budget):
// napkin run as a hostile or unlucky user would, each case one defect of issue 24 that must stay
// fixed. Every command runs under `timeout`, so that a hang fails the case instead of the suite.
// NAPKIN_UNDER_TEST=/path/to/napkin runs the cases against another build (the frozen one before
// the fixes fails them).
#include <nlohmann/json.hpp>

#include "fault_util.h"

namespace {

// ---- 7. Non-regular files and unbounded reads --------------------------------------------------

TEST_F(Fault, FifoAsConfigIsRefusedNotWaitedOn) {
    const fs::path f = fifo("config.json");
    const CliRun r = napkin(
        "train --config " + f.string() + kTinyRun + " --out " + (dir_ / "run").string(), kTimeout);
    expect_refused(r, f.string(), "not a regular file (a FIFO)");
    EXPECT_FALSE(fs::exists(dir_ / "run"));
}

TEST_F(Fault, DeviceAsConfigIsRefusedNotReadForever) {
    // The address-space limit keeps a build that reads it (1 GB a second) from taking the machine.
    const CliRun r =
        napkin("train --config /dev/zero" + kTinyRun + " --out " + (dir_ / "run").string(),
               "ulimit -v 4000000; " + kTimeout);
    expect_refused(r, "/dev/zero", "not a regular file (a character device)");
}

TEST_F(Fault, ConfigPastTheSizeLimitIsRefusedWithTheLimit) {
    const fs::path f = dir_ / "huge.json";
    { std::ofstream(f) << "{"; }
    fs::resize_file(f, (16u << 20) + 1);  // sparse: 16 MiB + 1 byte
    const CliRun r = napkin("train --config " + f.string() + kTinyRun, kTimeout);
    expect_refused(r, f.string(), "16777217 bytes, over the limit of 16777216 bytes");
}

TEST_F(Fault, FifoAsDataIsRefusedNotWaitedOn) {
    const fs::path f = fifo("tokens.bin");
    const CliRun r = napkin(
        "train --data " + f.string() + kTinyRun + " --out " + (dir_ / "run").string(), kTimeout);
    expect_refused(r, f.string(), "not a regular file");
}

TEST_F(Fault, FifoAsReportIsRefusedNotWaitedOn) {
    const fs::path run = dir_ / "run";
    fs::create_directories(run);
    const fs::path f = run / "report.json";
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    expect_refused(napkin("report " + run.string(), kTimeout), f.string(), "not a regular file");
}

TEST_F(Fault, FifoAsManifestIsRefusedNotWaitedOn) {
    const fs::path step = dir_ / "run" / "checkpoints" / "step-1";
    fs::create_directories(step);
    const fs::path f = step / "manifest.json";
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    // A FIFO does not count as a manifest (a step folder is complete once a regular one exists);
    // the reader refuses one that took the manifest's place after that check.
    expect_refused(napkin("ckpt consolidate " + (dir_ / "run").string(), kTimeout),
                   (dir_ / "run" / "checkpoints").string(), "no complete sharded checkpoint");
}

TEST_F(Fault, FifoAsCheckpointAndInitFromIsRefused) {
    const fs::path f = fifo("checkpoint.safetensors");
    expect_refused(napkin("train --init-from " + f.string() + kTinyRun, kTimeout), f.string(),
                   "not a regular file");
    expect_refused(napkin("train --resume " + f.string() + " --quiet", kTimeout), f.string(),
                   "no checkpoint at");
}

// The device profile (estimate, train, calibrate --merge) and generate's prompt file: read as
// the config is, so a FIFO or a device is refused at once (calibrate's before its probes run).
TEST_F(Fault, FifosAsProfilesAndPromptsAreRefusedNotWaitedOn) {
    const fs::path f = fifo("profile.json");
    expect_refused(napkin("estimate --model gpt2 --device-profile " + f.string(), kTimeout),
                   f.string(), "not a regular file (a FIFO)");
    expect_refused(napkin("train --device-profile " + f.string() + kTinyRun + " --out " +
                              (dir_ / "run").string(),
                          kTimeout),
                   f.string(), "not a regular file (a FIFO)");
    EXPECT_FALSE(fs::exists(dir_ / "run"));
    expect_refused(napkin("calibrate --quick --merge -o " + f.string(), kTimeout), f.string(),
                   "not a regular file (a FIFO)");
    expect_refused(napkin("estimate --model gpt2 --device-profile /dev/zero", kTimeout),
                   "/dev/zero", "not a regular file (a character device)");
    expect_refused(napkin("generate --model tiny --max-new-tokens 1 --prompt-file " + f.string() +
                              " -o " + (dir_ / "gen").string(),
                          kTimeout),
                   f.string(), "not a regular file (a FIFO)");
    EXPECT_FALSE(fs::exists(dir_ / "gen"));
}

// An output file that is a folder, or in a folder that does not exist: refused before the work
// (calibrate's probes, export's merge), not found at the final rename.
TEST_F(Fault, OutputsThatCannotBeWrittenAreRefusedBeforeTheWork) {
    const fs::path run = dir_ / "run", zrun = dir_ / "zrun", nowhere = dir_ / "no" / "out.json";
    ASSERT_EQ(napkin("train" + kTinyRun + " --profile all --out " + run.string(), kTimeout).rc, 0);
    ASSERT_EQ(napkin("train" + kTinyRun + " --zero 2 --out " + zrun.string(), kTimeout).rc, 0);
    const std::vector<std::string> commands = {"calibrate --quick -o ",
                                               "export " + run.string() + " -o ",
                                               "ckpt consolidate " + zrun.string() + " -o "};
    for (const std::string& command : commands) {
        SCOPED_TRACE(command);
        const CliRun folder = napkin(command + dir_.string(), kTimeout);
        EXPECT_EQ(folder.rc, 2) << folder.err;
        EXPECT_NE(folder.err.find("-o " + dir_.string() + ": is a folder, expected a file name"),
                  std::string::npos)
            << folder.err;
        EXPECT_EQ(folder.out, "") << "the work ran before the refusal";
        const CliRun missing = napkin(command + nowhere.string(), kTimeout);
        EXPECT_EQ(missing.rc, 2) << missing.err;
        EXPECT_NE(
            missing.err.find(": the folder " + nowhere.parent_path().string() + " does not exist"),
            std::string::npos)
            << missing.err;
        EXPECT_EQ(missing.out, "") << "the work ran before the refusal";
    }
}

// A FIFO as a run's trace or as a shard, a device as a checkpoint, a link to a device: refused at
// once. A link to a good file is followed: a correct load.
TEST_F(Fault, FifosDevicesAndLinksAsInputs) {
    const fs::path run = dir_ / "run", zrun = dir_ / "zrun";
    ASSERT_EQ(napkin("train" + kTinyRun + " --profile all --out " + run.string(), kTimeout).rc, 0);
    ASSERT_EQ(napkin("train" + kTinyRun + " --zero 2 --out " + zrun.string(), kTimeout).rc, 0);
    fs::remove(run / "trace.json");
    ASSERT_EQ(::mkfifo((run / "trace.json").c_str(), 0600), 0);
    expect_refused(napkin("export " + run.string() + " -o " + (dir_ / "m.json").string(), kTimeout),
                   (run / "trace.json").string(), "not a regular file");
    const fs::path shard = zrun / "checkpoints" / "step-00000001" / "rank0.safetensors";
    const fs::path kept = dir_ / "rank0.safetensors";
    fs::rename(shard, kept);
    ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
    expect_refused(napkin("ckpt consolidate " + zrun.string(), kTimeout), shard.string(),
                   "not a regular file");
    expect_refused(napkin("train --quiet --zero 2 --resume " + zrun.string(), kTimeout),
                   shard.string(), "not a regular file");
    expect_refused(napkin("train --init-from /dev/null" + kTinyRun, kTimeout), "/dev/null",
                   "not a regular file");
    fs::create_symlink("/dev/zero", dir_ / "config.json");
    expect_refused(napkin("train --config " + (dir_ / "config.json").string() + kTinyRun, kTimeout),
                   (dir_ / "config.json").string(), "not a regular file");
    // The shard back behind a link: followed, and the consolidation is the one without it.
    fs::remove(shard);
    fs::create_symlink(kept, shard);
    EXPECT_EQ(
        napkin("ckpt consolidate " + zrun.string() + " -o " + (dir_ / "one.safetensors").string(),
               kTimeout)
            .rc,
        0);
}

// ---- 3. --init-from verifies the checksum ------------------------------------------------------

TEST_F(Fault, InitFromACorruptCheckpointIsRefused) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train" + kTinyRun + " --out " + run.string(), kTimeout).rc, 0);
    const fs::path ckpt = run / "checkpoint.safetensors";
    ASSERT_TRUE(fs::exists(ckpt));
    {
        // One bit of the last tensor's last byte: a weight or moment changed, the header intact.
        std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(-1, std::ios::end);
        const char c = static_cast<char>(f.get() ^ 0x40);
        f.seekp(-1, std::ios::end);
        f.put(c);
    }
    const CliRun r = napkin(
        "train --init-from " + ckpt.string() + kTinyRun + " --out " + (dir_ / "next").string(),
        kTimeout);
    expect_refused(r, ckpt.string(), "checksum mismatch");
}

// ---- 5. The checksum covers the header ---------------------------------------------------------

// Replaces the first `from` in the checkpoint's header with `to` (of the same length), in place.
void edit_header(const fs::path& ckpt, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    std::string bytes = slurp(ckpt.string());
    const std::size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bytes.replace(at, from.size(), to);
    std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_F(Fault, AnEditedHeaderValueIsRefused) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train --steps 4 --stop-after 1 --micro-batch 2 --seq-len 16 --quiet --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    const fs::path ckpt = run / "checkpoint.safetensors";
    const std::string pristine = slurp(ckpt.string());
    // One bit of the step ('1' ^ 0x02 = '3'), then the optimizer's epsilon and the seed.
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{"\"step\":\"1\"", "\"step\":\"3\""},
          {"\"seed\":\"1337\"", "\"seed\":\"1336\""}}) {
        std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << pristine;
        edit_header(ckpt, from, to);
        const CliRun r = napkin("train --resume " + run.string() + " --quiet", kTimeout);
        expect_refused(r, ckpt.string(), "header checksum mismatch");
    }
    std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << pristine;
    EXPECT_EQ(napkin("train --resume " + run.string() + " --quiet", kTimeout).rc, 0);
}

// ---- 9. A resumed run's report keeps every step ------------------------------------------------

TEST_F(Fault, AResumedRunsReportKeepsTheEarlierSteps) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train --steps 5 --stop-after 2 --micro-batch 2 --seq-len 16 --quiet --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    const auto first = nlohmann::json::parse(slurp((run / "report.json").string()));
    ASSERT_EQ(first["steps"].size(), 2u);
    ASSERT_EQ(napkin("train --resume " + run.string() + " --quiet", kTimeout).rc, 0);
    const auto whole = nlohmann::json::parse(slurp((run / "report.json").string()));
    ASSERT_EQ(whole["steps"].size(), 5u);
    for (int s = 0; s < 5; ++s)
        EXPECT_EQ(whole["steps"][s]["step"], s);
    EXPECT_EQ(whole["steps"][0], first["steps"][0]);  // the earlier process's entries, unchanged
    EXPECT_EQ(whole["steps"][1], first["steps"][1]);
    EXPECT_EQ(whole["run"]["first_step"], 2);  // this process's own first step
}

// ---- 2. One writer per run folder --------------------------------------------------------------

TEST_F(Fault, ASecondRunIntoTheSameFolderIsRefusedNamingTheHolder) {
    const fs::path run = dir_ / "run", pid_file = dir_ / "pid";
    // The first run trains long enough to be caught in the act; it is killed once checked.
    const std::string first = NAPKIN_BINARY +
                              " train --steps 100000 --micro-batch 1 --seq-len 8 "
                              "--quiet --out " +
                              run.string() + " >/dev/null 2>&1 & echo $! > " + pid_file.string();
    ASSERT_EQ(std::system(first.c_str()), 0);
    long pid = 0;
    for (int i = 0; i < 200 && pid == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        std::ifstream(pid_file) >> pid;
    }
    ASSERT_GT(pid, 0);
    // The first run holds the folder once its first step is printed... or at least once the
    // folder exists and a moment has passed: poll the second run until it is refused.
    CliRun r;
    for (int i = 0; i < 100; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!fs::exists(run)) continue;
        r = napkin("train" + kTinyRun + " --out " + run.string(), kTimeout);
        if (r.rc != 0) break;
    }
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    expect_refused(r, run.string(), "in use by another napkin train (pid " + std::to_string(pid));
    EXPECT_EQ(r.rc, 2);
    // The kernel released the dead holder's lock: the folder is usable again.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(napkin("train" + kTinyRun + " --out " + run.string(), kTimeout).rc, 0);
}

// ---- 4. Paths that JSON cannot hold ------------------------------------------------------------

TEST_F(Fault, NonUtf8PathsAreRefusedBeforeTheRun) {
    // Bytes \xe9\xff: a Latin-1 name, not UTF-8. Refused at once, not after training every step.
    const std::string bad = (dir_ / "run\xe9\xff").string();
    for (const std::string flag : {"--out ", "--data "}) {
        const CliRun r = napkin("train" + kTinyRun + " " + flag + "'" + bad + "'", kTimeout);
        EXPECT_EQ(r.rc, 2) << flag << r.err;
        EXPECT_NE(r.err.find(flag.substr(0, flag.size() - 1) + ": the path is not valid UTF-8"),
                  std::string::npos)
            << r.err;
    }
    EXPECT_FALSE(fs::exists(bad));
}

// ---- 10. Leftovers ----------------------------------------------------------------------------

TEST_F(Fault, ARunRemovesTheTemporariesOfAKilledWriter) {
    const fs::path run = dir_ / "run";
    fs::create_directories(run);
    // A writer that is gone (no pid is that large) and one that runs (this test).
    const fs::path dead = run / "checkpoint.safetensors.tmp-999999999-0123456789abcdef";
    const fs::path live =
        run / ("report.json.tmp-" + std::to_string(getpid()) + "-0123456789abcdef");
    // A rank killed while writing its shard of a sharded checkpoint.
    const fs::path step = run / "checkpoints" / "step-00000006";
    fs::create_directories(step);
    const fs::path shard = step / "rank0.safetensors.tmp-999999999-0123456789abcdef";
    std::ofstream(dead) << "half";
    std::ofstream(live) << "in progress";
    std::ofstream(shard) << "half";
    ASSERT_EQ(napkin("train" + kTinyRun + " --out " + run.string(), kTimeout).rc, 0);
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_TRUE(temporaries_under(run / "checkpoints").empty());
    EXPECT_TRUE(temporaries_under(run / "checkpoints.previous").empty());
}

// An export killed mid-write (SIGTERM's default action, kill -9) leaves its temporary; the next
// export into that folder removes it.
TEST_F(Fault, AnExportRemovesTheTemporariesOfAKilledExport) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train" + kTinyRun + " --profile all --out " + run.string(), kTimeout).rc, 0);
    const fs::path dead = dir_ / "merged.json.tmp-999999999-0123456789abcdef";
    std::ofstream(dead) << "";
    ASSERT_EQ(
        napkin("export " + run.string() + " -o " + (dir_ / "merged.json").string(), kTimeout).rc,
        0);
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(dir_ / "merged.json"));
}

// ---- Kill -9 and signals at points spread over a run ------------------------------------------

// A run with a checkpoint every step is killed (SIGKILL, or SIGTERM: stop and write) at points
// spread over its life, setup and saves included, then finished by --resume (or anew when no
// checkpoint was left): every trial ends with the uninterrupted run's final checkpoint, byte for
// byte, and no temporary left in the folder.
TEST_F(Fault, KillsAndSignalsAtEveryPhaseResumeBitForBit) {
    const std::string run = " --steps 4 --save-every 1 --micro-batch 2 --seq-len 16 --quiet --out ";
    const fs::path ref = dir_ / "ref";
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(napkin("train" + run + ref.string(), kTimeout).rc, 0);
    const double run_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string want = slurp((ref / "checkpoint.safetensors").string());
    constexpr int kTrials = 8;
    for (int i = 0; i < kTrials; ++i) {
        const fs::path out = dir_ / std::string("t").append(std::to_string(i));
        const char* sig = i % 2 == 0 ? "KILL" : "TERM";
        const double delay_s = run_s * (i + 0.5) / kTrials;  // spread over setup, steps, saves
        const std::string cmd = napkin_under_test() + " train" + run + out.string() +
                                " >/dev/null 2>&1 & p=$!; sleep " + std::to_string(delay_s) +
                                "; kill -" + sig + " $p 2>/dev/null; wait $p; exit $?";
        const int status = std::system(cmd.c_str());
        ASSERT_TRUE(WIFEXITED(status));
        const int rc = WEXITSTATUS(status);
        EXPECT_TRUE(rc == 0 || rc == 128 + 9 || rc == 128 + 15)
            << sig << " at " << delay_s << " s: rc " << rc;
        if (rc == 128 + 15) {  // stopped in order: nothing half-written
            EXPECT_FALSE(durable_temporary_of(out / "checkpoint.safetensors")) << delay_s;
            EXPECT_FALSE(durable_temporary_of(out / "report.json")) << delay_s;
        }
        if (rc != 0) {
            // Killed on the way out, once its report was written: the run is whole, and --resume
            // says that it finished.
            const bool saved = fs::exists(out / "checkpoint.safetensors");
            const bool reported = fs::exists(out / "report.json");
            const CliRun r = napkin(saved ? "train --resume " + out.string() + " --quiet"
                                          : "train" + run + out.string(),
                                    kTimeout);
            const bool finished =
                reported && r.rc == 2 &&
                r.err.find("the run already finished its 4 steps") != std::string::npos;
            ASSERT_TRUE(r.rc == 0 || finished) << sig << " at " << delay_s << " s: " << r.err;
        }
        EXPECT_TRUE(slurp((out / "checkpoint.safetensors").string()) == want)
            << sig << " at " << delay_s
            << " s: the final checkpoint differs from the uninterrupted run's";
        EXPECT_FALSE(durable_temporary_of(out / "checkpoint.safetensors"));
        EXPECT_TRUE(fs::exists(out / "report.json"));
    }
}

// A SIGTERM once the last step is trained stops nothing: the run writes everything and exits 0
// (it said "interrupted ... continue with --resume", which then said the run had finished). One
// a step earlier stops it after the step under way, to be resumed. A kill -9 just before the final
// save resumes from the step before. Each ends with the uninterrupted run's final checkpoint.
TEST_F(Fault, SignalsAroundTheLastStep) {
    const std::string run = " --steps 3 --save-every 1 --micro-batch 2 --seq-len 16 --quiet --out ";
    const fs::path ref = dir_ / "ref", late = dir_ / "late", early = dir_ / "early",
                   killed = dir_ / "killed";
    ASSERT_EQ(napkin("train" + run + ref.string(), kTimeout).rc, 0);
    const std::string want = slurp((ref / "checkpoint.safetensors").string());

    const CliRun l =
        napkin("train" + run + late.string(), "NAPKIN_TEST_TERM_RANK_AT_STEP=0:3 " + kTimeout);
    EXPECT_EQ(l.rc, 0) << l.err;
    EXPECT_TRUE(slurp((late / "checkpoint.safetensors").string()) == want);
    EXPECT_EQ(nlohmann::json::parse(slurp((late / "report.json").string()))["steps"].size(), 3u);

    const CliRun e =
        napkin("train" + run + early.string(), "NAPKIN_TEST_TERM_RANK_AT_STEP=0:1 " + kTimeout);
    EXPECT_EQ(e.rc, 128 + SIGTERM) << e.err;
    EXPECT_NE(e.err.find("interrupted after step 2 of 3; continue with: napkin train --resume"),
              std::string::npos)
        << e.err;
    EXPECT_EQ(napkin("train --resume " + early.string() + " --quiet", kTimeout).rc, 0);
    EXPECT_TRUE(slurp((early / "checkpoint.safetensors").string()) == want);

    const CliRun k =
        napkin("train" + run + killed.string(), "NAPKIN_TEST_KILL_RANK_AT_STEP=0:3 " + kTimeout);
    EXPECT_EQ(k.rc, 128 + SIGKILL) << k.err;
    EXPECT_FALSE(fs::exists(killed / "report.json"));
    EXPECT_EQ(napkin("train --resume " + killed.string() + " --quiet", kTimeout).rc, 0);
    EXPECT_TRUE(slurp((killed / "checkpoint.safetensors").string()) == want);
}

// ---- 8. A run that reads its data many times over ----------------------------------------------

TEST_F(Fault, ARunThatRepeatsItsDataIsWarnedAbout) {
    const fs::path data = dir_ / "small.bin";
    write_token_file(data, 1000);
    // 3 steps of B 2 x T 16 x G 20 = 640 tokens read 1920 of 1000: twice over, and more.
    const CliRun r = napkin("train --data " + data.string() +
                                " --steps 3 --micro-batch 2 --seq-len 16 --grad-accum 20 --quiet "
                                "--out " +
                                (dir_ / "run").string(),
                            kTimeout);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("napkin: warning: --data " + data.string() +
                         " holds 1000 tokens; 3 steps of 640 tokens (B 2 x T 16 x G 20 x 1 ranks) "
                         "read 1.92e+03, the data 1.92 times over"),
              std::string::npos)
        << r.err;
    // One step of 32 tokens: within the data, no warning.
    const CliRun once =
        napkin("train --data " + data.string() + kTinyRun + " --out " + (dir_ / "once").string(),
               kTimeout);
    EXPECT_EQ(once.rc, 0) << once.err;
    EXPECT_EQ(once.err.find("warning"), std::string::npos) << once.err;
}

// ---- 6. Ranks started with different flags ------------------------------------------------------

// Two ranks (an MPMD launch: one command per rank) that differ in what they write: refused at
// start-up on every rank, naming the flags, before either writes or falls out of step in MPI.
TEST_F(Fault, RanksWithDifferentFlagsAreRefusedNamingThem) {
    std::string why;
    if (!have_mpi(&why)) GTEST_SKIP() << why;
    const std::string rank =
        " -n 1 --oversubscribe " + napkin_under_test() + " train" + kTinyRun + " --zero 1";
    const std::string a = (dir_ / "a").string(), b = (dir_ / "b").string();
    for (const auto& [flags0, flags1, named] :
         {std::tuple<std::string, std::string, std::string>{" --out " + a, " --out " + b,
                                                            "--out differs"},
          {" --out " + a, " --out " + a + " --save-every 1", "--save-every differs"},
          {" --out " + a + " --stop-after 1", " --out " + a, "--stop-after differs"},
          {" --out " + a + " --resume " + b, " --out " + a, "--resume differs"}}) {
        const fs::path log = dir_ / "mpi.log";
        const std::string cmd = kMpiEnv + kTimeout + std::string(NAPKIN_MPIEXEC) + rank + flags0 +
                                " :" + rank + flags1 + " >" + log.string() + " 2>&1";
        const int status = std::system(cmd.c_str());
        ASSERT_TRUE(WIFEXITED(status));
        EXPECT_EQ(WEXITSTATUS(status), 2);
        const std::string out = slurp(log.string());
        // Both ranks refuse; mpirun shows whichever exits first (and then kills the other).
        EXPECT_NE(out.find(" of 2: " + named + " between the ranks (this rank"), std::string::npos)
            << out;
        EXPECT_NE(out.find("start every rank with the same flags"), std::string::npos) << out;
        EXPECT_FALSE(fs::exists(dir_ / "a" / "report.json"));
    }
}

// ---- 9. Outputs never overwrite inputs ---------------------------------------------------------

TEST_F(Fault, ExportRefusesToOverwriteItsInputs) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train --device cpu --steps 2 --micro-batch 1 --seq-len 16 --profile all "
                     "--quiet --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    for (const char* name : {"report.json", "trace.json"}) {
        const fs::path input = run / name;
        ASSERT_TRUE(fs::exists(input)) << input;
        const std::string before = slurp(input.string());
        const CliRun r = napkin("export " + run.string() + " -o " + input.string(), kTimeout);
        expect_refused(r, input.string(), "an input of this command");
        EXPECT_EQ(r.rc, 2);
        EXPECT_EQ(slurp(input.string()), before) << name << " was overwritten";
    }
    // Another name for the same file is the same file.
    fs::create_symlink(run / "trace.json", dir_ / "link.json");
    EXPECT_EQ(
        napkin("export " + run.string() + " -o " + (dir_ / "link.json").string(), kTimeout).rc, 2);
    EXPECT_EQ(
        napkin("export " + run.string() + " -o " + (dir_ / "merged.json").string(), kTimeout).rc,
        0);
}

TEST_F(Fault, ConsolidateRefusesToOverwriteItsInputs) {
    const fs::path run = dir_ / "run";
    ASSERT_EQ(napkin("train --steps 2 --micro-batch 2 --seq-len 16 --quiet --zero 2 --out " +
                         run.string(),
                     kTimeout)
                  .rc,
              0);
    const fs::path step = run / "checkpoints" / "step-00000002";
    for (const fs::path& input :
         {step / "manifest.json", step / "rank0.safetensors", run / "report.json"}) {
        ASSERT_TRUE(fs::exists(input)) << input;
        const std::string before = slurp(input.string());
        const CliRun r =
            napkin("ckpt consolidate " + run.string() + " -o " + input.string(), kTimeout);
        expect_refused(r, input.string(), "an input of this command");
        EXPECT_EQ(r.rc, 2);
        EXPECT_EQ(slurp(input.string()), before) << input << " was overwritten";
    }
    EXPECT_EQ(napkin("ckpt consolidate " + run.string(), kTimeout).rc, 0);
}

}  // namespace
