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

}  // namespace
