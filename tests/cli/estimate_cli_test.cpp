// napkin estimate's --json and numeric flags as a user meets them: every count in the document is
// a JSON integer, and every numeric flag at its extremes either exits 2 with one line or gives a
// finite, sane estimate (no count wrapped); --solve fastest-layout end to end.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

using nlohmann::json;

// A number at `path` (array indices as /N) that counts something: bytes, parameters, elements,
// calls, tokens, steps, layers, ranks, FLOPs per token. Rates (`..._per_s`) are not counts.
bool is_count(const std::string& path) {
    static const std::regex count(
        R"(^/(params|memory|activations)/|^/parallelism/stages/N/(memory/|params$)|)"
        R"(^/flops/per_token/|(bytes|elements|calls|tokens|steps|evaluations|params|ranks|layers|world|psi)$)");
    return std::regex_search(path, count) && !path.ends_with("_per_s");
}

// Every number of `doc` is finite and non-negative, and every count is a JSON integer (or, past
// 2^53, a double, every one of which is whole). Failures name the path.
void expect_sane_counts(const json& doc, const std::string& path, const std::string& what) {
    if (doc.is_structured()) {
        for (auto it = doc.begin(); it != doc.end(); ++it) {
            const std::string key = doc.is_array() ? "N" : it.key();
            expect_sane_counts(*it, path + "/" + key, what);
        }
        return;
    }
    if (!doc.is_number()) return;
    const double v = doc.get<double>();
    EXPECT_TRUE(std::isfinite(v) && v >= 0) << what << ": " << path << " = " << doc.dump();
    if (is_count(path)) {
        EXPECT_TRUE(doc.is_number_integer() || std::fabs(v) >= 9007199254740992.0)
            << what << ": " << path << " = " << doc.dump() << " is a count";
    }
}

// Several configurations, each walked whole: data and model parallelism, napkin mode, QLoRA's
// fractional bits, offload, a measured rate, the 8-bit optimizer, and both --solve fastest tables.
TEST(EstimateJson, CountsAreIntegersEverywhere) {
    const char* configs[] = {
        "--model gpt2",
        "--model llama3-8b --gpus 8 --zero 3 --link nvlink4",
        "--params 70e9 --gpus 64 --zero 3 --mfu 0.4",
        "--params 70e9 --finetune qlora --gpus 2 --zero 3",
        "--model llama1-65b --finetune qlora --precision bf16 --fp32-optimizer-state --seq-len 512 "
        "--checkpointing full",
        "--model llama3-70b --tp 8 --pp 4 --vpp 2 --sp --gpus 64 --micro-batches 16 "
        "--checkpointing selective --zero 1",
        "--model llama2-7b --offload optimizer+params --gpus 8 --zero 3 --optimizer adamw-8bit",
        "--params 7e9 --offload optimizer --gpus 8 --zero 1 --optimizer adamw-8bit",
        "--model gpt2 --measured-tokens-per-s 180000 --gpus 8 --gpu h200 --solve fastest",
        "--model gpt2 --gpus 8 --gpu h200 --solve fastest-layout",
    };
    for (const char* config : configs) {
        const CliRun r = napkin(std::string("estimate ") + config + " --json");
        ASSERT_EQ(r.rc, 0) << config << ": " << r.err;
        expect_sane_counts(json::parse(r.out), "", config);
    }
}

// Each numeric flag (bar --inference's, docs/INFERENCE.md) at values that wrap a 32- or 64-bit
// count, that are not numbers, or that are zero, negative or fractional: exit 2 with one line
// naming the flag or its field, or exit 0 with a document whose numbers are finite and whose
// model FLOPs per token are at least the linear layers' 6 N_matmul (4 N under LoRA: 2/3 of it).
// One test per flag (261 runs in all: one test was the sanitizers' stage's longest by far).
class EstimateFlags : public testing::TestWithParam<const char*> {};

TEST_P(EstimateFlags, NumericFlagAtItsExtremes) {
    const std::string flag = GetParam();
    const std::string shape = "--layers 4 --d-model 256 --heads 4 --seq-len 128";
    const std::string pipeline =
        "--layers 8 --d-model 256 --heads 4 --seq-len 128 --gpus 8 "
        "--tp 2 --pp 2 --micro-batches 4";
    const char* values[] = {"0",     "-1",     "0.5", "2147483648", "9223372036854775808",
                            "1e300", "1e-300", "nan", "inf"};
    std::string base = shape;
    if (flag == "--params") base = "";
    if (flag == "--tp" || flag == "--pp" || flag == "--vpp" || flag == "--micro-batches")
        base = pipeline;
    if (flag == "--lora-rank") base = shape + " --finetune lora";
    int refused = 0;
    for (const std::string value : values) {
        const std::string args = "estimate " + base + " " + flag + " " + value + " --json";
        const CliRun r = napkin(args);
        if (r.rc == 2) {
            ++refused;
            EXPECT_EQ(r.err.find("napkin: error: "), 0u) << args << ": " << r.err;
            EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": " << r.err;
            EXPECT_NE(r.err.find(flag.substr(2)), std::string::npos) << args << ": " << r.err;
            continue;
        }
        ASSERT_EQ(r.rc, 0) << args << ": " << r.err;
        const json j = json::parse(r.out);
        expect_sane_counts(j, "", args);
        const json& per_token = j["flops"]["per_token"];
        const double lora = flag == "--lora-rank" ? 2.0 / 3 : 1.0;
        EXPECT_GE(per_token["model"].get<double>(),
                  lora * per_token["matmul"].get<double>() * (1 - 1e-12))
            << args;
    }
    EXPECT_GE(refused, 2) << flag << ": nan and inf are never a count, a size or a rate";
}

INSTANTIATE_TEST_SUITE_P(
    EveryNumericFlag, EstimateFlags,
    testing::Values("--params", "--layers", "--d-model", "--heads", "--kv-heads", "--d-ff",
                    "--vocab", "--context", "--head-dim", "--dropout", "--seq-len", "--micro-batch",
                    "--grad-accum", "--tokens", "--loss-chunk", "--gpus", "--zero", "--tp", "--pp",
                    "--vpp", "--micro-batches", "--lora-rank", "--peak-tflops", "--gpu-mem-gb",
                    "--cpu-mem-gb", "--mfu", "--measured-tokens-per-s", "--link-gbps", "--threads"),
    [](const testing::TestParamInfo<const char*>& flag) {
        std::string name;
        for (const char* c = flag.param + 2; *c != 0; ++c)
            name += *c == '-' ? '_' : *c;
        return name;
    });

// --solve fastest-layout lays out the GPUs given at the global batch given: the answer's layout in
// the estimate, the best few with their layouts; one line without several GPUs or with --mfu.
// --fp8-amax-history: GPT-2's 144 cast sites keep (H + 8) floats each under delayed scaling
// (16 by default), none under current scaling (0); the text names the scaling and the bytes.
TEST(EstimateFp8, AmaxHistoryLengthSetsTheHistoryBytes) {
    for (const auto& [flag, history] : std::vector<std::pair<std::string, int>>{
             {"", 16}, {" --fp8-amax-history 4", 4}, {" --fp8-amax-history 0", 0}}) {
        const CliRun r = napkin("estimate --precision fp8-amp --json" + flag);
        ASSERT_EQ(r.rc, 0) << r.err;
        const json j = json::parse(r.out);
        EXPECT_EQ(j["inputs"]["fp8_amax_history"], history);
        EXPECT_EQ(j["memory"]["gpu"]["temporaries_detail"]["fp8_history"].get<double>(),
                  history > 0 ? 144.0 * (history + 8) * 4 : 0.0)
            << flag;
        const CliRun text = napkin("estimate --precision fp8-amp" + flag);
        ASSERT_EQ(text.rc, 0) << text.err;
        EXPECT_NE(text.out.find(history > 0 ? "fp8 amax history " + std::to_string(history)
                                            : std::string("fp8 current scaling")),
                  std::string::npos)
            << text.out;
        EXPECT_EQ(text.out.find("fp8 amax histories, scales") != std::string::npos, history > 0);
    }
    EXPECT_TRUE(json::parse(napkin("estimate --json").out)["inputs"]["fp8_amax_history"].is_null());
}

TEST(EstimateSolve, FastestLayout) {
    const CliRun r = napkin(
        "estimate --model gpt2-medium --gpus 8 --micro-batches 4 --gpu h200 "
        "--solve fastest-layout --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["solve"]["kind"], "fastest-layout");
    const json& best = j["solve"]["candidates"][0];
    EXPECT_EQ(best["tp"], j["inputs"]["tp"]);
    EXPECT_EQ(best["pp"], j["inputs"]["pp"]);
    EXPECT_EQ(best["micro_batch"], j["inputs"]["micro_batch"]);
    EXPECT_EQ(best["dp"].get<int>() * best["tp"].get<int>() * best["pp"].get<int>(), 8);
    EXPECT_EQ(j["flops"]["per_step"]["tokens"], 4 * 8 * 1024);  // the global batch, kept
    EXPECT_DOUBLE_EQ(j["solve"]["value"].get<double>(), best["tokens_per_s"].get<double>());
    const CliRun text = napkin(
        "estimate --model gpt2-medium --gpus 8 --gpu h200 "
        "--solve fastest-layout");
    EXPECT_NE(text.out.find("solve fastest-layout: the highest predicted tokens/s that fits"),
              std::string::npos)
        << text.out;
    for (const char* refused : {"--model gpt2 --solve fastest-layout",
                                "--model gpt2 --gpus 8 --mfu 0.4 --solve fastest-layout",
                                "--params 1e9 --gpus 8 --solve fastest-layout"}) {
        const CliRun e = napkin(std::string("estimate ") + refused);
        EXPECT_EQ(e.rc, 2) << refused;
        EXPECT_NE(e.err.find("--solve fastest-layout"), std::string::npos) << e.err;
    }
}

// --explain shows the 3D formulas with their numbers and sources (Korthikanti et al.'s first run).
TEST(EstimateExplain, ThreeDFormulasWithTheirSources) {
    const std::string korthikanti_175b =
        "--layers 96 --d-model 12288 --heads 96 --vocab 51200 --context 2048 --seq-len 2048 "
        "--dropout 0.1 --attention naive --checkpointing selective --sp --tp 8 --pp 8 --gpus 64 "
        "--micro-batches 64 --gpu a100-80gb --grads-fp32 --mfu 0.5";
    const std::string out = napkin("estimate " + korthikanti_175b + " --explain").out;
    const char* lines[] = {
        "8. 3D parallelism (Megatron-LM: Shoeybi et al. 2019, Narayanan et al. 2021, "
        "Korthikanti et al. 2022)",
        "GPUs = T x P x DP = 8 x 8 x 1 = 64",
        "(Korthikanti et al. 2022, Table 2",
        "s*b*h*34/t + 5*a*s^2*b/t",
        "micro-batches in flight on the stage: 8",
        "pipeline bubble = (P - 1) / (V M) = 7 / (1 * 64) = 0.1094",
        "(Narayanan et al. 2021, sec. 2.2)",
        "(6 AG + 4 RS)"};
    for (const char* line : lines)
        EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
}

}  // namespace
