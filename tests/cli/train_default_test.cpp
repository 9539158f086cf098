// The default `napkin train` (the README's main job) learns: labelled slow, since it runs the
// whole default (about 15 s on 2 cores).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

// The default run (tiny, synthetic corpus) closes at least half of the gap between ln(V) and
// the corpus's entropy: the loss visibly falls.
TEST(TrainCli, DefaultRunLearns) {
    const fs::path out = fs::path(testing::TempDir()) / ("napkin_train_default_" + std::to_string(getpid()));
    const CliRun r = napkin("train --quiet --out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    std::ifstream report(out / "report.json");
    const auto j = nlohmann::json::parse(report);
    const auto& steps = j["steps"];
    const double first = steps.front()["loss"].get<double>();
    double last = 0;
    for (std::size_t i = steps.size() - 10; i < steps.size(); ++i) last += steps[i]["loss"].get<double>() / 10;
    const double ln_v = std::log(256.0), entropy = j["run"]["data_entropy_nats"].get<double>();
    EXPECT_NEAR(first / ln_v, 1.0, 0.01);
    EXPECT_LT(last, (ln_v + entropy) / 2) << "mean loss of the last 10 steps";
}

}  // namespace
