// Device profiles (estimator/device_profile.h, profile_catalog.h): the reader and writer agree,
// a malformed or newer profile is one line naming the field, another device's profile is refused
// unless forced, and the tables interpolate as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "estimator/device_profile.h"
#include "estimator/hardware.h"
#include "estimator/profile_catalog.h"

namespace napkin {
namespace {

template <class F>
std::string error_of(F f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

DeviceProfile h200() {
    return datasheet_profile(*find_gpu("h200"));
}

TEST(DeviceProfile, WritesAndReadsBackTheSame) {
    const DeviceProfile p = h200();
    const nlohmann::json j = to_json(p);
    const DeviceProfile back = parse_device_profile(j.dump());
    EXPECT_EQ(to_json(back), j);
    EXPECT_EQ(back.device.gpu, "h200");
    EXPECT_EQ(back.peak_for(DType::bf16), p.peak_for(DType::bf16));

    DeviceIdentity cpu;
    cpu.name = "Test CPU";
    cpu.logical_cpus = 2;
    cpu.memory_bytes = 8e9;
    const DeviceProfile c = cpu_roofline_profile(cpu, 1e11, 1e10, 2);
    const auto path = std::filesystem::temp_directory_path() / "napkin_profile_test.json";
    write_device_profile(c, path.string());
    EXPECT_EQ(to_json(read_device_profile(path.string())), to_json(c));
    std::filesystem::remove(path);
}

TEST(DeviceProfile, AMalformedOrNewerProfileIsOneLineNamingTheField) {
    const nlohmann::json good = to_json(h200());
    auto error_after = [&](auto edit) {
        nlohmann::json j = good;
        edit(j);
        const std::string e = error_of([&] { parse_device_profile(j.dump()); });
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        return e;
    };
    EXPECT_EQ(error_after([](nlohmann::json& j) { j["schema"] = "napkin-device-profile/2"; }),
              "schema: expected napkin-device-profile/1, got \"napkin-device-profile/2\" (newer "
              "than this napkin reads: update napkin)");
    EXPECT_EQ(error_after([](nlohmann::json& j) { j["compute"][0]["gemm"][1]["points"] = "x"; }),
              "compute[0].gemm[1].points: expected an array, got \"x\"");
    EXPECT_EQ(error_after([](nlohmann::json& j) { j["memory_bytes_per_s"] = -1; }),
              "memory_bytes_per_s: expected a positive number, got -1");
    EXPECT_EQ(
        error_after([](nlohmann::json& j) { j["peak_flops_per_s"] = nlohmann::json::object(); }),
        "peak_flops_per_s: expected a peak for some dtype, got an object");
    EXPECT_EQ(error_after([](nlohmann::json& j) { j["compute"] = nlohmann::json::array(); }),
              "compute: expected at least one section, got an array");
    EXPECT_EQ(error_after([](nlohmann::json& j) { j["device"].erase("name"); }),
              "device.name: expected a string, got nothing");
    EXPECT_EQ(error_of([] { parse_device_profile("{\"schema\": "); }).rfind("not valid JSON (", 0),
              0u);
    EXPECT_EQ(error_of([] { read_device_profile("/nonexistent/p.json"); }),
              "/nonexistent/p.json: cannot open (No such file or directory)");
}

TEST(DeviceProfile, AnotherDevicesProfileIsRefusedUnlessForced) {
    const DeviceProfile p = h200();
    const DeviceIdentity h100 = gpu_identity(*find_gpu("h100-sxm"));
    EXPECT_EQ(profile_mismatch(p, p.device), "");
    EXPECT_NE(profile_mismatch(p, h100), "");
    const auto path = std::filesystem::temp_directory_path() / "napkin_profile_h200.json";
    write_device_profile(p, path.string());
    auto fallback = [] { return h200(); };
    const std::string e =
        error_of([&] { choose_profile(path.string(), h100, false, "--device-profile", fallback); });
    EXPECT_EQ(e.rfind("--device-profile " + path.string() + ": measured on ", 0), 0u) << e;
    EXPECT_NE(e.find("(profile_force uses it anyway)"), std::string::npos) << e;
    const ChosenProfile forced =
        choose_profile(path.string(), h100, true, "--device-profile", fallback);
    EXPECT_NE(forced.origin.find("forced"), std::string::npos);
    EXPECT_FALSE(forced.fallback);
    std::filesystem::remove(path);
    // No file and nothing shipped for it: the datasheet at the default efficiencies, said so.
    const ChosenProfile none = choose_profile("", h100, false, "--device-profile", fallback);
    EXPECT_TRUE(none.fallback);
    EXPECT_NE(none.origin.find("default efficiencies"), std::string::npos);
}

// --merge: a second calibration's recipes join the first's tables (a GPU profile measured in
// bf16 gains fp32's), a table measured again is replaced, the first's overheads stay, and a
// section for other threads is added beside.
TEST(DeviceProfile, MergeAddsTablesByTheirKeys) {
    auto section = [](int threads, std::initializer_list<DType> dtypes, double rate, double op_s) {
        ComputeSection c;
        c.threads = threads;
        for (DType d : dtypes) {
            c.gemm.push_back({d, GemmPass::forward, {{64, 64, 64, rate}}});
            c.attention.push_back(
                {AttentionImpl::flash, d, true, Direction::forward, {{128, 64, 8, rate}}});
            c.streaming.push_back({StreamOp::norm_forward, d, {{1e6, rate}}});
        }
        c.overhead = {op_s, 1e-4};
        return c;
    };
    DeviceProfile old = h200(), now = h200();
    old.compute = {section(0, {DType::bf16, DType::f16}, 1e12, 5e-6)};
    now.compute = {section(0, {DType::f32, DType::bf16}, 2e12, 9e-6),
                   section(8, {DType::f32}, 3e12, 1e-6)};
    const DeviceProfile m = merge_profiles(old, now);
    ASSERT_EQ(m.compute.size(), 2u);  // largest threads first
    EXPECT_EQ(m.compute[0].threads, 8);
    EXPECT_EQ(m.compute[0].gemm.size(), 1u);
    const ComputeSection& gpu = m.compute[1];
    EXPECT_EQ(gpu.threads, 0);
    EXPECT_EQ(gpu.gemm.size(), 3u);  // fp16 kept, bf16 measured again, fp32 added
    EXPECT_EQ(gpu.attention.size(), 3u);
    EXPECT_EQ(gpu.streaming.size(), 3u);
    for (const GemmTable& t : gpu.gemm) {
        EXPECT_EQ(t.points.at(0).flops_per_s, t.dtype == DType::f16 ? 1e12 : 2e12)
            << static_cast<int>(t.dtype);
    }
    EXPECT_EQ(gpu.overhead.op_seconds, 5e-6);
}

// The shipped H200 profile is what merge_profiles makes of the two calibrations it came from
// (estimator/profiles/README.md): the first call's tables with the second's fp32 tables added.
// Its origin (`made`) says how it was joined, so only it may differ.
TEST(DeviceProfile, ShippedH200IsTheMergeOfItsSources) {
    const std::string root = NAPKIN_SOURCE_DIR;
    const std::string results = root + "/bench/results/2026-11-27-h200/";
    const DeviceProfile first = read_device_profile(results + "predict/profile-h200.json");
    const DeviceProfile second =
        read_device_profile(results + "second-call/profile-h200-after-broken-merge.json");
    DeviceProfile merged = merge_profiles(first, second);
    DeviceProfile shipped = read_device_profile(root + "/estimator/profiles/h200.json");
    merged.made = shipped.made = ProfileOrigin{};
    EXPECT_EQ(to_json(merged).dump(1), to_json(shipped).dump(1));
}

// The development VM's shipped profile is the calibration its accuracy runs used, unedited
// (bench/results/2026-11-29-devvm-time-accuracy).
TEST(DeviceProfile, ShippedDevVmIsTheCalibrationOfItsRun) {
    const std::string root = NAPKIN_SOURCE_DIR;
    const DeviceProfile run = read_device_profile(
        root + "/bench/results/2026-11-29-devvm-time-accuracy/run1_profile.json");
    const DeviceProfile shipped =
        read_device_profile(root + "/estimator/profiles/devvm-epyc-2cpu.json");
    EXPECT_EQ(to_json(run).dump(1), to_json(shipped).dump(1));
    EXPECT_EQ(shipped.device.name, "AMD EPYC");
    EXPECT_EQ(shipped.device.logical_cpus, 2);
}

// Every profile napkin ships reads, says how it was made (measured, by which command, build and
// date), and is the only one for its device: the catalog takes the first that matches.
TEST(DeviceProfile, EveryShippedProfileIsMeasuredAndAloneForItsDevice) {
    std::vector<DeviceProfile> all;
    for (const ShippedProfile& s : shipped_profiles()) {
        SCOPED_TRACE(std::string(s.file));
        const DeviceProfile p = parse_device_profile(s.text);
        EXPECT_EQ(p.made.source, "measured");
        EXPECT_EQ(p.made.command.rfind("napkin calibrate", 0), 0u) << p.made.command;
        EXPECT_FALSE(p.made.build.empty());
        EXPECT_FALSE(p.made.date.empty());
        EXPECT_FALSE(p.compute.empty());
        for (const DeviceProfile& q : all)
            EXPECT_NE(profile_mismatch(q, p.device), "") << "two shipped profiles for one device";
        const std::optional<DeviceProfile> chosen = shipped_profile_for(p.device);
        ASSERT_TRUE(chosen.has_value());
        EXPECT_EQ(to_json(*chosen).dump(), to_json(p).dump());
        all.push_back(p);
    }
    EXPECT_GE(all.size(), 2u);  // h200.json and the development VM's
}

TEST(DeviceProfile, TablesInterpolate) {
    GemmTable g{
        DType::bf16, GemmPass::forward, {{1024, 1024, 1024, 1e14}, {4096, 4096, 4096, 4e14}}};
    // At a point, its own rate (through exp(log), to rounding).
    EXPECT_NEAR(g.flops_per_s(1024, 1024, 1024), 1e14, 1e14 * 1e-12);
    EXPECT_NEAR(g.flops_per_s(4096, 4096, 4096), 4e14, 4e14 * 1e-12);
    const double mid = g.flops_per_s(2048, 2048, 2048);
    EXPECT_GT(mid, 1e14);
    EXPECT_LT(mid, 4e14);
    // Streaming: log-log linear between points, flat past either end.
    StreamTable s{StreamOp::norm_forward, DType::f32, {{1e3, 1e9}, {1e6, 1e10}}};
    EXPECT_NEAR(s.bytes_per_s(10), 1e9, 1e9 * 1e-12);
    EXPECT_NEAR(s.bytes_per_s(1e9), 1e10, 1e10 * 1e-12);
    EXPECT_NEAR(s.bytes_per_s(std::sqrt(1e3 * 1e6)), std::sqrt(1e9 * 1e10), 1e3);
}

// seconds = latency + bytes / bandwidth, recovered from points on the line.
TEST(DeviceProfile, FitsCollectivesToLatencyAndBandwidth) {
    std::vector<std::pair<double, double>> points;
    for (double bytes : {1e3, 1e5, 1e7})
        points.emplace_back(bytes, 20e-6 + bytes / 5e9);
    const CollectiveTable t = fit_collective(Collective::all_reduce, 2, points);
    EXPECT_NEAR(t.latency_seconds, 20e-6, 1e-9);
    EXPECT_NEAR(t.bytes_per_s, 5e9, 1e3);
    EXPECT_EQ(t.points.size(), 3u);
}

}  // namespace
}  // namespace napkin
