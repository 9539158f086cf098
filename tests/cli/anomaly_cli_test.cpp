// napkin train --detect-anomaly as a user meets it: an exploding learning rate stops the run in
// the step after, with one line naming the step, op and tensor (exit 3), report.json's
// "anomaly" read back by the one reader, and with --profile a trace that marks the op.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "profiler/run_folder.h"
#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

TEST(AnomalyCli, ExplodingLearningRateNamesTheOpAndKeepsTheReport) {
    const fs::path out =
        fs::path(testing::TempDir()) / ("napkin_anomaly_" + std::to_string(getpid()));
    fs::remove_all(out);
    const CliRun r = napkin(
        "train --steps 5 --micro-batch 2 --seq-len 32 --lr 1e30 --detect-anomaly "
        "--profile all --quiet --out " +
        out.string());
    ASSERT_EQ(r.rc, 3) << r.err;
    EXPECT_EQ(
        r.err.rfind(
            "napkin train: step 2, forward of attn.qkv (block 0): attn.qkv.out (2, 32, 384) has ",
            0),
        0u)
        << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line

    const napkin::profiler::RunReport report =
        napkin::profiler::read_run_report(out / "report.json");
    ASSERT_TRUE(report.anomaly.has_value());
    EXPECT_EQ(report.anomaly->step, 1);
    EXPECT_EQ(report.anomaly->op, "attn.qkv");
    EXPECT_EQ(report.anomaly->layer, 0);
    EXPECT_EQ(report.anomaly->direction, "forward");
    EXPECT_EQ(report.anomaly->tensor, "attn.qkv.out");
    EXPECT_EQ(report.steps.size(), 1u);                        // the step before
    EXPECT_FALSE(fs::exists(out / "checkpoint.safetensors"));  // not of the state that broke

    const auto check = napkin::profiler::check_trace_file(out / "trace.json");
    for (const auto& p : check.problems)
        ADD_FAILURE() << p;
    std::ifstream f(out / "trace.json");
    const auto trace = nlohmann::json::parse(f);
    int marks = 0;
    for (const auto& e : trace["traceEvents"]) {
        if (e.value("ph", "") == "i" &&
            e.value("name", "") == "anomaly: attn.qkv.out (forward of attn.qkv)") {
            ++marks;
            EXPECT_EQ(e["args"]["block"], 0);
            EXPECT_GT(e["args"]["nan"].get<double>() + e["args"]["inf"].get<double>(), 0);
        }
    }
    EXPECT_EQ(marks, 1);

    // Without the flag the same run stops too, at the optimizer's check of the gradients, and
    // says less: the step (counted from 1, as the progress lines), not the op. Its report keeps
    // the step before and says why the run stopped; no checkpoint of the state that broke.
    const fs::path plain_dir = out / "plain";
    const CliRun plain =
        napkin("train --steps 5 --micro-batch 2 --seq-len 32 --lr 1e30 --quiet --out " +
               plain_dir.string());
    EXPECT_EQ(plain.rc, 1) << plain.err;
    EXPECT_EQ(plain.err,
              "napkin: error: step 2: the gradients are not finite (NaN or inf); "
              "training stopped; " +
                  (plain_dir / "report.json").string() +
                  " keeps the 1 step before it (--detect-anomaly, in one process, "
                  "names the op that made the first NaN or inf)\n");
    const napkin::profiler::RunReport diverged =
        napkin::profiler::read_run_report(plain_dir / "report.json");
    ASSERT_TRUE(diverged.diverged.has_value());
    EXPECT_EQ(diverged.diverged->step, 1);
    EXPECT_FALSE(diverged.anomaly.has_value());
    EXPECT_EQ(diverged.steps.size(), 1u);
    EXPECT_FALSE(fs::exists(plain_dir / "checkpoint.safetensors"));
    const CliRun shown = napkin("report --json " + plain_dir.string());
    ASSERT_EQ(shown.rc, 0) << shown.err;
    EXPECT_EQ(nlohmann::json::parse(shown.out)["runs"][0]["stopped"],
              "step 2: the gradients were not finite");
    const CliRun both = napkin("report " + plain_dir.string() + " " + out.string());
    ASSERT_EQ(both.rc, 0) << both.err;
    EXPECT_NE(both.out.find("step 2: --detect-anomaly found NaN or inf (forward of attn.qkv, "
                            "block 0)"),
              std::string::npos)
        << both.out;
}

// fp16-amp: overflowed steps stay the loss scaler's (skipped, the scale halved) and the run is
// the one without the flag, step for step.
TEST(AnomalyCli, Fp16AmpRunIsTheSameWithTheFlag) {
    const fs::path out =
        fs::path(testing::TempDir()) / ("napkin_anomaly16_" + std::to_string(getpid()));
    fs::remove_all(out);
    const std::string run =
        "train --steps 3 --micro-batch 2 --seq-len 32 --precision fp16-amp --quiet --out ";
    ASSERT_EQ(napkin(run + (out / "on").string() + " --detect-anomaly").rc, 0);
    ASSERT_EQ(napkin(run + (out / "off").string()).rc, 0);
    const auto on = napkin::profiler::read_run_report(out / "on" / "report.json");
    const auto off = napkin::profiler::read_run_report(out / "off" / "report.json");
    EXPECT_FALSE(on.anomaly.has_value());
    ASSERT_EQ(on.steps.size(), off.steps.size());
    for (std::size_t i = 0; i < on.steps.size(); ++i) {
        EXPECT_EQ(on.steps[i].loss, off.steps[i].loss);
        EXPECT_EQ(on.steps[i].skipped, off.steps[i].skipped);
        EXPECT_EQ(on.steps[i].loss_scale, off.steps[i].loss_scale);
    }
    // The flag's slots are in the buffer plan: the prediction stays exact in every category.
    for (std::size_t c = 0; c < napkin::profiler::kPredictedCategoryCount; ++c) {
        ASSERT_TRUE(on.measured.peak_bytes[c].has_value()) << c;
        EXPECT_EQ(on.predicted.bytes[c], static_cast<double>(*on.measured.peak_bytes[c])) << c;
    }
    const auto temporaries = static_cast<std::size_t>(napkin::MemCategory::temporaries);
    EXPECT_GT(*on.measured.peak_bytes[temporaries], *off.measured.peak_bytes[temporaries]);
}

}  // namespace
