// napkin generate as a user runs it: a tiny CPU run end to end (generate.json's measured memory
// equal to the prediction in every category, the tokens ids of the vocabulary), sampling that
// a seed reproduces, --profile's trace with the prefill and decode steps as spans and the
// kv_cache counter, and one-line refusals with the exit code of their kind.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(GenerateCli, HelpNamesTheFlags) {
    const CliRun r = napkin("generate --help");
    EXPECT_EQ(r.rc, 0);
    for (const char* flag :
         {"--prompt-tokens", "--synthetic-prompt", "--max-new-tokens", "--temperature",
          "--init-from", "--profile", "--json", "--flash-decoding"})
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

TEST(GenerateCli, TinyRunMeasuresThePredictedMemoryToTheByte) {
    for (const char* precision : {"fp32", "bf16"}) {
        const fs::path dir = fresh_dir(std::string("gen_tiny_") + precision);
        const CliRun r = napkin(
            "generate --model tiny --synthetic-prompt 12 --batch 3 "
            "--max-new-tokens 5 --precision " +
            std::string(precision) + " -o " + dir.string());
        ASSERT_EQ(r.rc, 0) << r.err;
        EXPECT_NE(r.out.find("kv_cache"), std::string::npos) << r.out;
        EXPECT_EQ(r.out.find("DIFFERS"), std::string::npos) << r.out;
        const json g = read_json(dir / "generate.json");
        EXPECT_EQ(g["schema"], "napkin-generate/1");
        for (const char* c : {"parameters", "kv_cache", "activations", "temporaries", "data"}) {
            EXPECT_EQ(g["measured"]["peak_bytes"][c], g["predicted"]["memory"][c]) << c;
            EXPECT_GT(g["measured"]["peak_bytes"][c].get<std::int64_t>(), 0) << c;
        }
        // tiny: 2 layers of 4 kv-heads of 32, 3 sequences of 17 positions, 4 or 2 bytes.
        const std::int64_t a = std::string(precision) == "bf16" ? 2 : 4;
        EXPECT_EQ(g["measured"]["peak_bytes"]["kv_cache"], 2 * 2 * 3 * 17 * 128 * a);
        ASSERT_EQ(g["tokens"].size(), 3u);
        for (const auto& seq : g["tokens"]) {
            ASSERT_EQ(seq.size(), 5u);
            for (const auto& t : seq) {
                EXPECT_GE(t.get<int>(), 0);
                EXPECT_LT(t.get<int>(), g["model"]["vocab_size"].get<int>());
            }
        }
        EXPECT_EQ(g["measured"]["decode_steps"], 4);
        EXPECT_GT(g["measured"]["decode_seconds_per_token"].get<double>(), 0);
        EXPECT_GT(g["predicted"]["time"]["decode_seconds_per_token"].get<double>(), 0);
        EXPECT_EQ(g["run"]["flash_decoding"], false);  // the CPU's one kernel: the flag's no-op
        // A second run into the same folder is refused, the report kept.
        const CliRun again = napkin("generate --synthetic-prompt 4 -o " + dir.string());
        EXPECT_EQ(again.rc, 2);
        EXPECT_NE(again.err.find("already holds a generate.json"), std::string::npos) << again.err;
    }
}

TEST(GenerateCli, SamplingIsReproducibleForASeed) {
    const auto tokens = [](const std::string& seed) {
        const CliRun r = napkin(
            "generate --prompt-tokens 5,6,7 --max-new-tokens 24 --batch 2 "
            "--temperature 1.5 --json --seed " +
            seed);
        EXPECT_EQ(r.rc, 0) << r.err;
        return json::parse(r.out)["tokens"];
    };
    EXPECT_EQ(tokens("3"), tokens("3"));
    EXPECT_NE(tokens("3"), tokens("4"));
    // Greedy: the two sequences of one prompt decode alike.
    const CliRun g = napkin("generate --prompt-tokens 5,6,7 --max-new-tokens 6 --batch 2 --json");
    ASSERT_EQ(g.rc, 0) << g.err;
    const json t = json::parse(g.out)["tokens"];
    EXPECT_EQ(t[0], t[1]);
}

// A napkin run's weights, by its folder: the model's shape from the checkpoint.
TEST(GenerateCli, InitFromARunFolder) {
    const fs::path run = fresh_dir("gen_from_run");
    ASSERT_EQ(napkin("train --steps 2 --micro-batch 2 --seq-len 16 --out " + run.string()).rc, 0);
    const CliRun r = napkin("generate --init-from " + run.string() +
                            " --prompt-tokens 1,2,3 --max-new-tokens 4 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const json g = json::parse(r.out);
    EXPECT_EQ(g["run"]["weights"], (run / "checkpoint.safetensors").string());
    EXPECT_EQ(g["model"]["name"], "tiny");
    const CliRun both =
        napkin("generate --init-from " + run.string() + " --model tiny --prompt-tokens 1");
    EXPECT_EQ(both.rc, 2);
}

TEST(GenerateCli, ProfileTracesThePrefillAndEachDecodeStep) {
    const fs::path dir = fresh_dir("gen_profile");
    const CliRun r =
        napkin("generate --synthetic-prompt 8 --max-new-tokens 4 --profile -o " + dir.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto check = napkin::profiler::check_trace_file(dir / "trace.json");
    for (const auto& p : check.problems)
        ADD_FAILURE() << p;
    const json trace = read_json(dir / "trace.json");
    int prefill = 0, decode = 0, attention = 0, kv_counter = 0;
    for (const auto& e : trace["traceEvents"]) {
        const std::string name = e.value("name", "");
        if (e.value("ph", "") == "X" && name == "prefill") ++prefill;
        if (e.value("ph", "") == "X" && name.rfind("decode ", 0) == 0) ++decode;
        if (name == "decode_attention") ++attention;
        if (e.value("ph", "") == "C" && e.contains("args") && e["args"].contains("kv_cache"))
            ++kv_counter;
    }
    EXPECT_EQ(prefill, 1);
    EXPECT_EQ(decode, 3);
    EXPECT_EQ(attention, 2 * 4);  // tiny's 2 layers, prefill and 3 steps
    EXPECT_GT(kv_counter, 0);
    EXPECT_TRUE(fs::exists(dir / "memory.json"));
}

TEST(GenerateCli, RefusesInOneLine) {
    struct Case {
        std::string args;
        int rc;
        std::string starts;
    };
    const Case cases[] = {
        {"generate --synthetic-prompt 4 --batch 0", 2, "napkin: error: --batch: must be"},
        {"generate --prompt-tokens 1,2,999", 2, "napkin: error: the prompt: token id 999"},
        {"generate --prompt-tokens 1,x", 2, "napkin: error: --prompt-tokens: 'x'"},
        {"generate --synthetic-prompt 120 --max-new-tokens 10", 2,
         "napkin: error: --max-new-tokens: a prompt of 120 tokens plus 10 new ones passes"},
        {"generate --synthetic-prompt 4 --init-from /nonexistent/run", 1,
         "napkin: error: --init-from /nonexistent/run: no such file"},
        {"generate --max-new-tokens 3", 2, "napkin: error: give one prompt"},
        {"generate --synthetic-prompt 4 --flash-decoding yes", 2,
         "napkin: error: --flash-decoding: unknown value 'yes' (expected on|off)"},
        {"generate --synthetic-prompt 4 --seed -5", 2,  // not 2^64 - 5, as train's --seed
         "napkin: error: --seed: must be 0 or a positive integer (got '-5')"},
        {"generate --prompt-file /dev/zero", 1,
         "napkin: error: --prompt-file /dev/zero: not a regular file (a character device)"},
    };
    for (const Case& c : cases) {
        const CliRun r = napkin(c.args);
        EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.err;
        EXPECT_EQ(r.err.rfind(c.starts, 0), 0u) << c.args << "\n" << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
}

}  // namespace
