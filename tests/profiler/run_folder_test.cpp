// run_folder: every way a run folder can be unusable gives one InputError naming the file and
// what was expected.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/check.h"
#include "profiler/run_folder.h"
#include "tests/profiler/error_of.h"
#include "tests/profiler/temp_dir.h"

namespace p = napkin::profiler;
namespace fs = std::filesystem;
using napkin::profiler::test::error_of;
using napkin::profiler::test::TempDir;

namespace {

void write(const fs::path& f, const std::string& text) {
    std::ofstream out(f, std::ios::binary);
    out << text;
}

}  // namespace

TEST(RunFolder, LoadsAReport) {
    TempDir d;
    fs::copy_file(fs::path(NAPKIN_SOURCE_DIR) / "traces/cpu-tiny/report.json",
                  d.path() / "report.json");
    const p::RankReport r = p::load_run_report(d.path());
    EXPECT_EQ(r.file, d.path() / "report.json");
    EXPECT_EQ(r.label, d.path().filename().string());
    EXPECT_EQ(r.report.model.name, "tiny");
    EXPECT_EQ(r.world, 1);
    // The file itself works too.
    EXPECT_EQ(p::load_run_report(d.path() / "report.json").dir, d.path());
}

TEST(RunFolder, BadInputNamesTheFileAndTheProblem) {
    TempDir d;
    const fs::path missing = d.path() / "nope";
    EXPECT_EQ(error_of([&] { p::load_run_report(missing); }), missing.string() + ": no such folder");
    EXPECT_NE(error_of([&] { p::load_run_report(d.path()); }).find("report.json: no such file"), std::string::npos);

    const fs::path f = d.path() / "report.json";
    write(f, "");
    EXPECT_EQ(error_of([&] { p::load_run_report(d.path()); }), f.string() + ": empty file, expected JSON");
    write(f, R"({"schema": "napkin-train-report/1", "measured": {"sec)");  // truncated
    std::string e = error_of([&] { p::load_run_report(d.path()); });
    EXPECT_EQ(e.rfind(f.string() + ": not valid JSON (", 0), 0u) << e;
    EXPECT_NE(e.find("line 1"), std::string::npos) << e;
    write(f, "{\"schema\": nan}");
    EXPECT_NE(error_of([&] { p::load_run_report(d.path()); }).find("not valid JSON"), std::string::npos);
    write(f, "[1, 2]");
    EXPECT_EQ(error_of([&] { p::load_run_report(d.path()); }), f.string() + ": expected an object, got an array");
    write(f, R"({"measured": {}})");
    EXPECT_EQ(error_of([&] { p::load_run_report(d.path()); }),
              f.string() + ": schema: expected napkin-train-report/1-2, got nothing");
    write(f, R"({"schema": "napkin-train-report/9"})");
    EXPECT_EQ(
        error_of([&] { p::load_run_report(d.path()); }),
        f.string() +
            ": schema: expected napkin-train-report/1-2, got \"napkin-train-report/9\" (newer than "
            "this napkin reads: update napkin)");
    write(f, R"({"schema": "napkin-trace/1"})");
    EXPECT_EQ(error_of([&] { p::load_run_report(d.path()); }),
              f.string() + ": schema: expected napkin-train-report/1-2, got \"napkin-trace/1\"");
    // Deep nesting is refused by the parser's depth limit or parsed; never a crash.
    write(f, std::string(2000, '[') + std::string(2000, ']'));
    EXPECT_FALSE(error_of([&] { p::load_run_report(d.path()); }).empty());
}

TEST(RunFolder, TracePath) {
    TempDir d;
    EXPECT_NE(error_of([&] { p::run_trace_path(d.path()); }).find("--profile"), std::string::npos);
    write(d.path() / "trace.json", "{}");
    EXPECT_EQ(p::run_trace_path(d.path()), d.path() / "trace.json");
    EXPECT_EQ(p::run_trace_path(d.path() / "trace.json"), d.path() / "trace.json");
}
