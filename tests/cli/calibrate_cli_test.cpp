// napkin calibrate as a user runs it: a short calibration writes a device profile (through
// core/durable_file) that the reader accepts and napkin estimate's performance model uses; bad
// flags are one-line usage errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "estimator/device_profile.h"
#include "tests/cli/cli_util.h"

namespace {

TEST(Calibrate, AQuickCalibrationIsAProfileTheModelUses) {
    const std::string dir = testing::TempDir() + "/napkin_calibrate_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/cpu.json";
    const CliRun r = napkin("calibrate --quick --steps 1 --warmup 1 --precisions fp32 -o " + path);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(" 1/4] C=64"), std::string::npos) << "no progress: " << r.out;
    EXPECT_NE(r.out.find("wrote " + path), std::string::npos) << r.out;
    EXPECT_FALSE(durable_temporary_of(path));

    const napkin::DeviceProfile p = napkin::read_device_profile(path);
    EXPECT_EQ(p.device.kind, napkin::DeviceKind::cpu);
    ASSERT_EQ(p.compute.size(), 1u);
    EXPECT_FALSE(p.compute[0].gemm.empty());
    EXPECT_FALSE(p.compute[0].attention.empty());
    EXPECT_FALSE(p.compute[0].streaming.empty());
    EXPECT_EQ(p.made.source, "measured");
    EXPECT_NE(p.made.command.find("napkin calibrate"), std::string::npos) << p.made.command;

    const CliRun e = napkin(
        "estimate --model tiny --precision fp32 --seq-len 64 --micro-batch 4 "
        "--device-profile " +
        path + " --json");
    ASSERT_EQ(e.rc, 0) << e.err;
    const nlohmann::json j = nlohmann::json::parse(e.out);
    EXPECT_EQ(j["time"]["basis"], "predicted");
    EXPECT_NE(j["time"]["model"]["profile"].get<std::string>().find("cpu.json"), std::string::npos);
    EXPECT_GT(j["time"]["step_seconds"].get<double>(), 0);
    std::filesystem::remove_all(dir);
}

TEST(Calibrate, BadFlagsAreUsageErrors) {
    const std::pair<const char*, const char*> cases[] = {
        {"calibrate", "--out"},
        {"calibrate --device tpu -o x.json", "--device"},
        {"calibrate --steps -1 -o x.json", "--steps"},
        {"calibrate --warmup -2 -o x.json", "--warmup"},
        {"calibrate --precisions fp64 -o x.json", "fp64"},
    };
    for (const auto& [args, needle] : cases) {
        const CliRun r = napkin(args);
        EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << args << ": " << r.err;
        EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ", not one line: " << r.err;
    }
}

}  // namespace
