// The fault suite's shared pieces (tests/fault/*_test.cpp): napkin under test, the time limit
// that turns a hang into a failure, and a fixture with a scratch folder per case.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {
std::string napkin_under_test() {
    const char* env = std::getenv("NAPKIN_UNDER_TEST");
    return env != nullptr && *env != '\0' ? std::string(env) : std::string(NAPKIN_BINARY_PATH);
}
}  // namespace
#define NAPKIN_BINARY napkin_under_test()
#include "../cli/cli_util.h"
#include "../cli/mpi_util.h"

namespace fs = std::filesystem;

namespace {

// A hang is a failure: 20 s is far above any case's own time (a second or two each).
const std::string kTimeout = "timeout -s KILL 20 ";
// For a command that measures the machine (napkin calibrate), a few seconds alone and many times
// that on a machine loaded by other tests.
const std::string kLongTimeout = "timeout -s KILL 60 ";
const std::string kTinyRun = " --steps 1 --micro-batch 2 --seq-len 16 --quiet";

class Fault : public testing::Test {
protected:
    void SetUp() override {
        std::string name = testing::UnitTest::GetInstance()->current_test_info()->name();
        std::replace(name.begin(), name.end(), '/', '_');  // parameterized: "Stage/2"
        dir_ = fs::path(testing::TempDir()) /
               ("napkin_fault_" + std::to_string(getpid()) + "_" + name);
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path fifo(const std::string& name) {
        const fs::path p = dir_ / name;
        EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
        return p;
    }
    // A run's exit code 1 or 2 with one line naming `path` and containing `what`.
    static void expect_refused(const CliRun& r, const std::string& path, const std::string& what) {
        EXPECT_TRUE(r.rc == 1 || r.rc == 2) << "rc " << r.rc << "\n" << r.err;
        EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
    }

    fs::path dir_;
};

// The DurableFile temporaries anywhere under `dir` (core/durable_file.h): a finished or failed
// writer leaves none.
inline std::vector<std::string> temporaries_under(const fs::path& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
         it.increment(ec)) {
        if (napkin::is_durable_temporary(it->path().filename().string()))
            found.push_back(it->path().string());
    }
    return found;
}

// A token file in llm.c's format (docs/ENGINE.md): 256 int32 (magic 20240520, version 1, the
// count), then the tokens as uint16, here below the tiny model's vocabulary of 256.
inline void write_token_file(const fs::path& file, std::int32_t tokens) {
    std::int32_t header[256] = {20240520, 1, tokens};
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (std::int32_t i = 0; i < tokens; ++i) {
        const auto t =
            static_cast<std::uint16_t>((static_cast<std::uint32_t>(i) * 2654435761u) >> 24);
        out.write(reinterpret_cast<const char*>(&t), 2);
    }
}

}  // namespace
