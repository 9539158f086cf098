// Runs the napkin binary as a user would and captures its exit status, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"

#ifndef NAPKIN_BINARY
#error "NAPKIN_BINARY must name the napkin executable"
#endif

namespace {

struct CliRun {
    int rc = -1;
    std::string out, err;
};

// Whether a DurableFile temporary of `target` ("<name>.tmp-<pid>-<random>", core/durable_file.h)
// is left beside it: a failed or finished write must remove its own.
inline bool durable_temporary_of(const std::filesystem::path& target) {
    const std::string prefix = target.filename().string() + ".tmp-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(target.parent_path(), ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(prefix, 0) == 0 && napkin::is_durable_temporary(name)) return true;
    }
    return false;
}

// A run folder of this test's own, removed first: <TempDir>/napkin_<name>_<pid> (ctest runs tests
// as parallel processes).
inline std::filesystem::path fresh_dir(const std::string& name) {
    const std::filesystem::path d = std::filesystem::path(testing::TempDir()) /
                                    ("napkin_" + name + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(d);
    return d;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream f(p);
    return nlohmann::json::parse(f);
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// `shell_prefix` goes before the binary in the shell's command line ("ulimit -v 3000000; ").
CliRun napkin(const std::string& args, const std::string& shell_prefix = "") {
    // CTest runs each test in its own process, in parallel: name the files by process.
    static int calls = 0;
    const std::string stem = testing::TempDir() + "/napkin_cli_" + std::to_string(getpid()) + "_" +
                             std::to_string(calls++);
    const std::string out = stem + ".out", err = stem + ".err";
    const std::string cmd = shell_prefix + NAPKIN_BINARY + " " + args + " >" + out + " 2>" + err;
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    std::remove(out.c_str());
    std::remove(err.c_str());
    return r;
}

// fp8-amp's delayed-scaling state as `napkin train --device <device>` allocates it (the live
// allocations "fp8.amax_history" and "fp8.scales" at the memory peak of memory.json) against
// `napkin estimate`'s fp8_history for the same model, batch and --fp8-amax-history: equal to the
// byte; 0 for current scaling.
inline void expect_fp8_history_as_estimated(const std::string& device, int history,
                                            const std::filesystem::path& out) {
    const std::string shape =
        " --model tiny --micro-batch 2 --seq-len 32 --precision fp8-amp "
        "--fp8-amax-history " +
        std::to_string(history);
    const CliRun t = napkin("train --quiet --steps 2 --profile all --device " + device + shape +
                            " --out " + out.string());
    ASSERT_EQ(t.rc, 0) << t.err;
    const CliRun e = napkin("estimate --json" + shape);
    ASSERT_EQ(e.rc, 0) << e.err;
    const auto predicted =
        nlohmann::json::parse(e.out)["memory"]["gpu"]["temporaries_detail"]["fp8_history"]
            .get<double>();
    double measured = 0;
    const nlohmann::json memory = read_json(out / "memory.json");
    for (const auto& a : memory["peak"]["live"]) {
        if (a["name"] == "fp8.amax_history" || a["name"] == "fp8.scales")
            measured += a["bytes"].get<double>();
    }
    EXPECT_EQ(measured, predicted) << device << ", H " << history;
    // 2 layers x 4 block GEMMs x 3 cast sites, (H + 8) floats each; none without a history.
    EXPECT_EQ(predicted, history > 0 ? 24.0 * (history + 8) * 4 : 0.0) << "H " << history;
    EXPECT_EQ(read_json(out / "report.json")["run"]["fp8_amax_history"], history);
}

}  // namespace
