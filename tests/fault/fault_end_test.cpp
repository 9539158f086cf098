// The fault suite at the end of a run and in the middle of a write: an exception while the trace
// or the report is written keeps the steps' work (issue 24 #4: "any exception at the end must not
// throw away a finished run"), and a signal that ends a writer mid-write leaves no temporary
// behind (#10: "a 0-byte .tmp after SIGTERM during export", "a partial checkpoint .tmp after a
// second Ctrl-C"). Like the rest of the suite, NAPKIN_UNDER_TEST runs it against another build.
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include "fault_util.h"

namespace {

class FaultEnd : public Fault {};

// The files under `dir` whose name holds ".tmp": a DurableFile's temporary, or the fixed
// "NAME.tmp" of the writers before it.
std::vector<std::string> tmp_files_under(const fs::path& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        if (it->path().filename().string().find(".tmp") != std::string::npos)
            found.push_back(it->path().string());
    }
    return found;
}

struct SignalledRun {
    int status = -1;         // waitpid's
    bool signalled = false;  // a temporary was seen and the signals sent
};

// Runs napkin with `args` and, as soon as a file of `dir` whose name starts with `target` and holds
// ".tmp" exists (the writer is mid-write), sends it `signals`, 20 ms apart. Killed at 20 s.
SignalledRun signal_mid_write(const std::string& args, const fs::path& dir,
                              const std::string& target, const std::vector<int>& signals) {
    const std::string cmd = "exec " + napkin_under_test() + " " + args + " >/dev/null 2>&1";
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    SignalledRun r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (::waitpid(pid, &r.status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) ::kill(pid, SIGKILL);
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            const std::string name = e.path().filename().string();
            r.signalled = r.signalled ||
                          (name.rfind(target, 0) == 0 && name.find(".tmp") != std::string::npos);
        }
        if (!r.signalled) continue;
        for (const int sig : signals) {
            ::kill(pid, sig);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        ::waitpid(pid, &r.status, 0);
        break;
    }
    return r;
}

// A run whose trace or report cannot be written (an exception of the JSON library, injected with
// NAPKIN_TEST_THROW_AT_END) exits 1 with one line naming the failure and what was written all the
// same: the final checkpoint, the uninterrupted run's byte for byte, and the report when it was
// the trace that failed. Nothing half-written, and --resume says the run finished.
TEST_F(FaultEnd, AnExceptionAtTheEndKeepsTheFinishedRun) {
    const std::string run = " --steps 3 --micro-batch 2 --seq-len 16 --quiet --profile all --out ";
    const fs::path ref = dir_ / "ref";
    ASSERT_EQ(napkin("train" + run + ref.string(), kTimeout).rc, 0);
    const std::string want = slurp((ref / "checkpoint.safetensors").string());
    for (const std::string where : {"trace", "report"}) {
        const fs::path out = dir_ / where;
        const CliRun r = napkin("train" + run + out.string(),
                                "NAPKIN_TEST_THROW_AT_END=" + where + " " + kTimeout);
        EXPECT_EQ(r.rc, 1) << where << ": " << r.err;
        EXPECT_NE(r.err.find("[json.exception.type_error.316] invalid UTF-8 byte"),
                  std::string::npos)
            << r.err;
        EXPECT_NE(
            r.err.find("written all the same (" + (out / "checkpoint.safetensors").string() + ")"),
            std::string::npos)
            << where << ": " << r.err;
        ASSERT_TRUE(fs::exists(out / "checkpoint.safetensors")) << where << ": the run was lost";
        EXPECT_TRUE(slurp((out / "checkpoint.safetensors").string()) == want) << where;
        if (where == "trace") {
            EXPECT_EQ(nlohmann::json::parse(slurp((out / "report.json").string()))["steps"].size(),
                      3u);
        } else {
            EXPECT_FALSE(fs::exists(out / "report.json"));
        }
        EXPECT_FALSE(fs::exists(out / "report.json.pending")) << where;
        EXPECT_TRUE(tmp_files_under(out).empty()) << where << ": " << tmp_files_under(out).front();
        const CliRun again = napkin("train --resume " + out.string() + " --quiet", kTimeout);
        EXPECT_EQ(again.rc, 2) << again.err;
        EXPECT_NE(again.err.find("the run already finished its 3 steps"), std::string::npos)
            << again.err;
    }
}

// SIGTERM while napkin export writes its merged trace (a 14 MB one: the write is under way for a
// good part of a second): the process ends of the signal as before, and its temporary goes with it.
TEST_F(FaultEnd, SigtermDuringAnExportLeavesNoTemporary) {
    const fs::path trace = dir_ / "trace.json", out = dir_ / "out";
    {
        std::ofstream f(trace);
        f << "{\"traceEvents\":[\n";
        for (int i = 0; i < 200000; ++i) {
            f << (i ? ",\n" : "") << "{\"name\":\"k" << i % 50 << "\",\"ph\":\"X\",\"ts\":" << i
              << ",\"dur\":1,\"pid\":1,\"tid\":1}";
        }
        f << "]}\n";
    }
    fs::create_directories(out);
    int ended = 0;
    for (int trial = 0; trial < 3; ++trial) {
        fs::remove(out / "merged.json");
        const SignalledRun r =
            signal_mid_write("export " + trace.string() + " -o " + (out / "merged.json").string(),
                             out, "merged.json", {SIGTERM});
        EXPECT_TRUE(tmp_files_under(out).empty()) << tmp_files_under(out).front();
        if (!r.signalled || !WIFSIGNALED(r.status)) continue;  // done first: not this question
        ++ended;
        EXPECT_EQ(WTERMSIG(r.status), SIGTERM);
        EXPECT_FALSE(fs::exists(out / "merged.json"));
    }
    EXPECT_GT(ended, 0) << "no trial caught the export mid-write";
}

// A second Ctrl-C while napkin train writes its final checkpoint (a 150 MB one, of a 12.8M-param
// model) ends it at once, without waiting for the save, and the partial checkpoint goes with it.
// A trial whose save ended first, or whose two signals arrived as one (a pending signal is not
// queued twice), finishes the run: no temporary either, but it does not count.
TEST_F(FaultEnd, ASecondCtrlCDuringASaveLeavesNoTemporary) {
    const fs::path config = dir_ / "mid.json", out = dir_ / "run";
    std::ofstream(config) << R"({"format": "napkin-model", "name": "mid", "vocab_size": 256,
        "context_length": 128, "n_layers": 4, "d_model": 512, "n_heads": 4, "n_kv_heads": 4,
        "d_ff": 2048, "norm": "layernorm", "positions": "learned", "mlp": "gelu", "bias": true,
        "tied_embeddings": true, "dropout": 0.0})";
    int ended = 0;
    for (int trial = 0; trial < 5 && ended == 0; ++trial) {
        fs::remove_all(out);
        fs::create_directories(out);
        const SignalledRun r = signal_mid_write("train --config " + config.string() +
                                                    " --steps 1 --micro-batch 1 --seq-len 16 "
                                                    "--quiet --out " +
                                                    out.string(),
                                                out, "checkpoint.safetensors", {SIGINT, SIGINT});
        EXPECT_TRUE(tmp_files_under(out).empty()) << tmp_files_under(out).front();
        if (r.signalled && WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGINT) ++ended;
    }
    EXPECT_GT(ended, 0) << "no trial's second Ctrl-C ended the save";
}

}  // namespace
