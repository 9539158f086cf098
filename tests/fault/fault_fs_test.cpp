// The fault suite on full and read-only file systems: every writer of napkin (checkpoint, report,
// trace, memory snapshot, export, ckpt consolidate, calibrate's profile) fails with one line
// naming its file and errno's text, and leaves no partial file and no temporary.
//
// The file systems are size-limited tmpfs mounts in a private mount namespace (`unshare -rm`: a
// user namespace in which the caller is root, so no root is needed where the kernel allows user
// namespaces; CI runs as root, where it always works). The mount vanishes with the namespace, so
// nothing is left mounted if a case dies. Where neither works the cases skip, saying why.
#include <nlohmann/json.hpp>
#include <vector>

#include "fault_util.h"

namespace {

struct TmpfsRun {
    int rc = -1;        // the last napkin command's exit code
    std::string err;    // its stderr
    fs::path contents;  // a copy of the mount's files once the commands ran
};

class FaultFs : public Fault {
protected:
    void SetUp() override {
        Fault::SetUp();
        const fs::path probe = dir_ / "probe";
        fs::create_directories(probe);
        const std::string cmd = "unshare -rm sh -c 'mount -t tmpfs -o size=4k tmpfs " +
                                probe.string() + "' >" + (dir_ / "probe.log").string() + " 2>&1";
        if (std::system(cmd.c_str()) != 0) {
            GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace (unshare -rm): "
                         << slurp((dir_ / "probe.log").string());
        }
    }

    // Runs `commands` (shell, napkin as $N, the mount as $M) with a tmpfs of `size` ("64k") on
    // $M, read-only when `mount_options` says "ro". With `fill`, a file takes all its free space
    // first (a full disk). The result is the last command's; calibrate's among them, under
    // kLongTimeout.
    TmpfsRun in_tmpfs(const std::string& mount_options, bool fill, const std::string& commands) {
        static int calls = 0;
        const std::string tag = std::to_string(calls++);
        const fs::path mnt = dir_ / ("mnt" + tag), seen = dir_ / ("seen" + tag);
        fs::create_directories(mnt);
        fs::create_directories(seen);
        const fs::path script = dir_ / ("script" + tag + ".sh"), err = dir_ / ("err" + tag);
        std::ofstream(script) << "M=" << mnt.string() << "; N=" << napkin_under_test() << "\n"
                              << "mount -t tmpfs -o " << mount_options << " tmpfs $M || exit 97\n"
                              << (fill ? "cat /dev/zero > $M/fill 2>/dev/null\n" : "") << "( "
                              << commands << " ) >/dev/null 2>" << err.string() << "\n"
                              << "rc=$?; rm -f $M/fill; cp -a $M/. " << seen.string()
                              << "; exit $rc\n";
        const int status =
            std::system(("unshare -rm " + kLongTimeout + "sh " + script.string()).c_str());
        TmpfsRun r;
        r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.err = slurp(err.string());
        r.contents = seen;
        return r;
    }

    // A failed write: exit code 1 or 2, one error line naming `file` and errno's `why`, no
    // temporary left.
    static void expect_failed_cleanly(const TmpfsRun& r, const std::string& file,
                                      const std::string& why) {
        EXPECT_TRUE(r.rc == 1 || r.rc == 2) << file << ": rc " << r.rc << "\n" << r.err;
        std::size_t lines = 0;
        for (std::size_t at = r.err.find("error"); at != std::string::npos;
             at = r.err.find("error", at + 1))
            ++lines;
        EXPECT_EQ(lines, 1u) << r.err;
        EXPECT_NE(r.err.find(file), std::string::npos) << "names " << file << ": " << r.err;
        EXPECT_NE(r.err.find("(" + why + ")"), std::string::npos) << r.err;
        const std::vector<std::string> left = temporaries_under(r.contents);
        EXPECT_TRUE(left.empty()) << file << ": " << left.front();
    }
};

std::uintmax_t pages(const fs::path& file) {
    return (fs::file_size(file) + 4095) / 4096;
}

// train's writers in the order they write: the trace, the memory snapshot, the report (as
// report.json.pending), the final checkpoint. A tmpfs that holds the ones before a writer and
// half of its file fails that writer. A failed checkpoint takes the pending report with it.
TEST_F(FaultFs, EachOfTrainsWritersOnAFullDiskFailsCleanly) {
    const std::string train =
        "$N train --steps 2 --micro-batch 2 --seq-len 16 --quiet --profile all --out $M/run";
    const fs::path ref = dir_ / "ref";
    ASSERT_EQ(napkin("train --steps 2 --micro-batch 2 --seq-len 16 --quiet --profile all --out " +
                         ref.string(),
                     kTimeout)
                  .rc,
              0);
    const std::string ckpt = slurp((ref / "checkpoint.safetensors").string());
    std::uintmax_t before = 0;
    for (const char* name :
         {"trace.json", "memory.json", "report.json", "checkpoint.safetensors"}) {
        const std::uintmax_t size = before + std::max<std::uintmax_t>(1, pages(ref / name) / 2);
        const TmpfsRun r = in_tmpfs("size=" + std::to_string(size * 4096), false, train);
        expect_failed_cleanly(r, "/run/" + std::string(name), "No space left on device");
        // What is there is whole: the checkpoint the uninterrupted run's, the JSON files parse.
        const fs::path run = r.contents / "run";
        if (fs::exists(run / "checkpoint.safetensors")) {
            EXPECT_TRUE(slurp((run / "checkpoint.safetensors").string()) == ckpt) << name;
        }
        for (const char* json : {"trace.json", "memory.json", "report.json"}) {
            if (!fs::exists(run / json)) continue;
            EXPECT_NO_THROW(std::ignore = nlohmann::json::parse(slurp((run / json).string())))
                << json << " after " << name << " failed";
        }
        EXPECT_FALSE(fs::exists(run / name)) << name;
        EXPECT_FALSE(fs::exists(run / "report.json.pending")) << name;
        before += pages(ref / name);
    }
    // With room for all four, the same run succeeds: the sizes above were the limit.
    EXPECT_EQ(in_tmpfs("size=" + std::to_string((before + 16) * 4096), false, train).rc, 0);
}

// The writers outside train, on a full disk and on a read-only one.
TEST_F(FaultFs, ExportConsolidateAndCalibrateFailCleanly) {
    const fs::path run = dir_ / "run", zrun = dir_ / "zrun";
    ASSERT_EQ(napkin("train" + kTinyRun + " --profile all --out " + run.string(), kTimeout).rc, 0);
    ASSERT_EQ(napkin("train" + kTinyRun + " --zero 2 --out " + zrun.string(), kTimeout).rc, 0);
    const std::vector<std::pair<std::string, std::string>> writers = {
        {"$N export " + run.string() + " -o $M/merged.json", "merged.json"},
        {"$N ckpt consolidate " + zrun.string() + " -o $M/one.safetensors", "one.safetensors"},
        {"$N calibrate --quick --steps 1 --warmup 1 --precisions fp32 -o $M/profile.json",
         "profile.json"}};
    for (const auto& [command, file] : writers) {
        const TmpfsRun full = in_tmpfs("size=64k", true, command);
        expect_failed_cleanly(full, "/" + file, "No space left on device");
        EXPECT_FALSE(fs::exists(full.contents / file));
        const TmpfsRun ro = in_tmpfs("size=64k,ro", false, command);
        expect_failed_cleanly(ro, "/" + file, "Read-only file system");
    }
}

// A run folder on a read-only file system is refused before the run, naming --out and why.
TEST_F(FaultFs, TrainIntoAReadOnlyFolderIsRefusedBeforeTheRun) {
    for (const std::string out : {"$M", "$M/run"}) {
        const TmpfsRun r = in_tmpfs("size=64k,ro", false, "$N train" + kTinyRun + " --out " + out);
        expect_failed_cleanly(r, "--out", "Read-only file system");
        EXPECT_EQ(r.rc, 2);
    }
}

}  // namespace
