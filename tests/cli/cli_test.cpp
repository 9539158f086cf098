// napkin's command line as a user meets it: exit codes, one-line errors, JSON that parses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#ifndef NAPKIN_BINARY
#error "NAPKIN_BINARY must name the napkin executable"
#endif

namespace {

std::string data(const char* name) { return std::string(NAPKIN_TEST_DATA) + "/" + name; }

// A usage error: exit 2, nothing on stdout, exactly one line on stderr containing `needle`.
void expect_usage_error(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const CliRun r = napkin(args);
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// NAPKIN_CUDA_PLUGIN names another CUDA backend (the emulator's, docs/CUDA.md). One that does not
// load is reported, not a crash, and asking for the device is then a usage error saying why.
TEST(Cli, AnUnloadableCudaBackendIsReported) {
    struct Env {
        Env() { setenv("NAPKIN_CUDA_PLUGIN", "/nonexistent/libnapkin_cuda.so", 1); }
        ~Env() { unsetenv("NAPKIN_CUDA_PLUGIN"); }
    } env;
    const CliRun info = napkin("info");
    ASSERT_EQ(info.rc, 0) << info.err;
    if (info.out.find("CUDA backend on") == std::string::npos)
        GTEST_SKIP() << "built without CUDA: NAPKIN_CUDA_PLUGIN is not read";
    EXPECT_NE(info.out.find("cannot load the CUDA backend: /nonexistent/libnapkin_cuda.so"),
              std::string::npos)
        << info.out;
    EXPECT_EQ(info.out.find("libraries:"), std::string::npos) << "versions without a backend: " << info.out;
    expect_usage_error("train --device cuda --steps 1 --out " + testing::TempDir() + "/napkin_no_backend",
                       "--device cuda: no CUDA device (cannot load the CUDA backend: /nonexistent");
}

TEST(Cli, DefaultEstimateRuns) {
    const CliRun r = napkin("estimate");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("memory per GPU"), std::string::npos);
    EXPECT_NE(r.out.find("124,439,808"), std::string::npos);  // gpt2 is the default model
}

TEST(Cli, HelpAndVersion) {
    const CliRun help = napkin("estimate --help");
    EXPECT_EQ(help.rc, 0);
    for (const char* flag : {"--model", "--config", "--params", "--seq-len", "--micro-batch", "--grad-accum", "--tokens",
                             "--precision", "--optimizer", "--checkpointing", "--attention", "--gpus", "--zero",
                             "--offload", "--finetune", "--lora-rank", "--gpu", "--peak-tflops", "--gpu-mem-gb",
                             "--fp8-amax-history",
                             "--mfu", "--measured-tokens-per-s", "--solve", "--json", "--explain",
                             "--ignore-activations", "--list-models", "--list-gpus"}) {
        EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
    }
    EXPECT_EQ(napkin("--version").rc, 0);
}

TEST(Cli, JsonIsOneDocumentWithStableKeys) {
    const CliRun r = napkin("estimate --model llama3-8b --seq-len 8192 --gpus 8 --zero 3 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["schema"], "napkin-estimate/1");
    EXPECT_EQ(j["params"]["total"], 8030261248.0);
    for (const char* k : {"weights", "master", "grads", "optimizer", "activations", "temporaries", "total", "fits"}) {
        EXPECT_TRUE(j["memory"]["gpu"].contains(k)) << k;
    }
    EXPECT_TRUE(j["flops"]["per_token"].contains("model"));
    EXPECT_TRUE(j["time"]["run_days"].is_number());
    EXPECT_TRUE(j["fits"].is_boolean());
}

TEST(Cli, NapkinQuestionOneOnTheCommandLine) {
    const CliRun r = napkin("estimate --params 70e9 --tokens 15e12 --gpus 1024 --gpu h100-sxm --mfu 0.5 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NEAR(nlohmann::json::parse(r.out)["time"]["run_days"].get<double>(), 143.9, 0.05);
}

TEST(Cli, SolveMaxParams) {
    const CliRun r = napkin("estimate --solve max-params --gpus 8 --zero 3 --precision fp32 --ignore-activations --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["solve"]["value"].get<double>(), 40e9);
}

// Memory counts GPT-2's embedding padded to 50,304 rows: the table says so beside the published
// count, --explain's sum is exact to the parameter, and 8-bit AdamW's absmax bytes are shown.
TEST(Cli, CountsAddUpByHand) {
    const CliRun r = napkin("estimate --model gpt2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("allocated                 124,475,904  (vocab 50,257 padded to 50,304"),
              std::string::npos)
        << r.out;
    const CliRun x = napkin("estimate --model gpt2 --explain");
    ASSERT_EQ(x.rc, 0) << x.err;
    EXPECT_NE(x.out.find("= 38,597,376 + 786,432 + 12 * 7,087,872 + 1,536 + 0 = 124,439,808"),
              std::string::npos)
        << x.out;
    EXPECT_NE(x.out.find("Psi = 124,475,904 allocated trainable parameters"), std::string::npos)
        << x.out;
    const CliRun q = napkin("estimate --optimizer adamw-8bit");
    ASSERT_EQ(q.rc, 0) << q.err;
    EXPECT_NE(q.out.find("optimizer 2.00391 = 10.0039"), std::string::npos) << q.out;
    // No padding, no line: Llama 3's vocabulary is a multiple of 128.
    EXPECT_EQ(napkin("estimate --model llama3-8b").out.find("allocated"), std::string::npos);
    // LoRA: trainable (the adapters) + frozen (the base) is the base plus its adapters.
    const CliRun l = napkin("estimate --model llama2-7b --finetune qlora");
    ASSERT_EQ(l.rc, 0) << l.err;
    EXPECT_NE(l.out.find("with adapters           6,898,323,456  (trainable + frozen)"),
              std::string::npos)
        << l.out;
    const CliRun j = napkin("estimate --model llama2-7b --finetune lora --json");
    ASSERT_EQ(j.rc, 0) << j.err;
    const auto p = nlohmann::json::parse(j.out)["params"];
    EXPECT_EQ(p["total_with_adapters"].get<double>(),
              p["trainable"].get<double>() + p["frozen"].get<double>());
}

// A run shorter than one step says so, instead of a step time longer than the run's.
TEST(Cli, RunUnderOneStepIsNamed) {
    const CliRun r = napkin("estimate --model gpt2 --grad-accum 100000000");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("the run is a fraction of a step"), std::string::npos) << r.out;
    EXPECT_EQ(napkin("estimate --model gpt2").out.find("fraction of a step"), std::string::npos);
}

// A link given for one GPU times nothing: said, not silently dropped.
TEST(Cli, LinkForOneGpuIsNamed) {
    const CliRun r = napkin("estimate --link nvlink4");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("one GPU exchanges nothing"), std::string::npos) << r.out;
    EXPECT_EQ(napkin("estimate --link nvlink4 --gpus 8").out.find("one GPU exchanges nothing"),
              std::string::npos);
}

// Host memory given with nothing offloaded checks nothing: said, not silently unused.
TEST(Cli, HostMemoryWithoutOffloadIsNamed) {
    const CliRun r = napkin("estimate --cpu-mem-gb 64");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("--cpu-mem-gb: nothing is offloaded"), std::string::npos) << r.out;
    EXPECT_EQ(napkin("estimate --cpu-mem-gb 64 --offload optimizer --json")
                  .out.find("nothing is offloaded"),
              std::string::npos);
    EXPECT_NE(napkin("estimate --cpu-mem-gb 64 --json").out.find("nothing is offloaded"),
              std::string::npos);
}

// A measured throughput on a GPU without a peak for the recipe (a T4 has no bf16): the note says
// the MFU is missing too, instead of dropping the measurement without a word.
TEST(Cli, MeasuredWithoutAPeakIsNamed) {
    const CliRun r = napkin("estimate --gpu t4 --measured-tokens-per-s 1000");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("no time estimate and no MFU for --measured-tokens-per-s"),
              std::string::npos)
        << r.out;
}

// A frozen base does no weight-gradient GEMMs: under LoRA --explain's model-FLOPs sum starts from
// 4 N_matmul, not from 6 N_matmul (a term larger than the sum it is part of).
TEST(Cli, ExplainLoraFlopsAddUp) {
    const CliRun r = napkin("estimate --model llama2-7b --finetune qlora --explain");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("= 4 N_matmul (the frozen base"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("= 2.643e+10 + ... = 3.061e+10"), std::string::npos)
        << r.out;  // 4 x 6.607e9
}

// Data parallelism: --explain's communication section, the paper's volume beside the ring's
// collectives; FSDP + QLoRA's frozen base sharded and gathered; none on one GPU.
TEST(Cli, ExplainCommunication) {
    const CliRun r = napkin("estimate --model llama2-70b --finetune qlora --gpus 2 --zero 3 --link nvlink4 --explain");
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* s : {"7. Communication per step per GPU (ZeRO-3, W = 2, G = 1",
                          "3 psi = 2,485,125,120 elements (psi = 828,375,040)", "frozen nf4, all_gather in bf16: 160 calls",
                          "frozen base: sharded too at stage 3", "sent 38.586 GB", "over nvlink4 at 450 GB/s"}) {
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    }
    const CliRun z2 = napkin("estimate --model gpt2 --finetune lora --gpus 4 --zero 2 --optimizer adamw-8bit --explain");
    ASSERT_EQ(z2.rc, 0) << z2.err;
    EXPECT_NE(z2.out.find("replicated on every GPU below stage 3"), std::string::npos) << z2.out;
    EXPECT_NE(z2.out.find("aligned to the 2048-element blocks"), std::string::npos) << z2.out;
    EXPECT_EQ(z2.out.find("frozen nf4"), std::string::npos) << z2.out;
    const CliRun one = napkin("estimate --model gpt2 --explain");
    EXPECT_EQ(one.out.find("7. Communication"), std::string::npos) << one.out;
}

// The solver's N is found, not given: --explain says where it came from, to the parameter.
TEST(Cli, ExplainSolvedParams) {
    const CliRun r = napkin(
        "estimate --solve max-params --gpus 8 --zero 3 --precision fp32 --ignore-activations "
        "--explain");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("N = 40,000,000,000 (the largest that fits: --solve max-params)"),
              std::string::npos)
        << r.out;
}

TEST(Cli, ExplainNamesSources) {
    const CliRun r = napkin("estimate --model gpt2 --explain");
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* s : {"Korthikanti", "Rajbhandari", "Kaplan", "6 * L * T * C"}) {
        EXPECT_NE(r.out.find(s), std::string::npos) << s;
    }
}

TEST(Cli, Lists) {
    const CliRun m = napkin("estimate --list-models");
    EXPECT_EQ(m.rc, 0);
    EXPECT_NE(m.out.find("llama3-405b"), std::string::npos);
    const CliRun g = napkin("estimate --list-gpus --json");
    EXPECT_EQ(g.rc, 0);
    EXPECT_GE(nlohmann::json::parse(g.out).size(), 11u);
}

TEST(Cli, ConfigFileLoads) {
    const CliRun r = napkin("estimate --config " + data("hf_llama2_7b_config.json") + " --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["params"]["total"], 6738415616.0);
}

// Shapes the estimator models but the engine does not train (biases on q, k and v only; a head
// dim other than d_model / heads) are estimated, and refused by napkin train with one line.
TEST(Cli, ShapesOnlyTheEstimatorModelsAreRefusedByTrain) {
    const std::string out = " --device cpu --steps 1 --out " + testing::TempDir() + "/napkin_shape";
    for (const auto& [config, needle] :
         {std::pair{"hf_qwen2_0_5b_config.json", "biases on q, k and v only"},
          std::pair{"hf_tiny_head_dim_config.json",
                    "a head dim (32) other than d_model / heads"}}) {
        EXPECT_EQ(napkin("estimate --config " + data(config)).rc, 0) << config;
        expect_usage_error("train --config " + data(config) + out,
                           std::string(needle) + " is modelled by napkin estimate, not trained");
    }
}

TEST(Cli, BadInputIsOneLineAndExitTwo) {
    expect_usage_error("estimate --model gpt5", "unknown preset 'gpt5' (expected tiny|gpt2|");
    expect_usage_error("estimate --gpu h1000", "unknown GPU 'h1000' (expected h100-sxm|");
    expect_usage_error("estimate --layers 12 --d-model 768 --heads 7", "heads (7) must divide d-model (768)");
    expect_usage_error("estimate --layers 12 --d-model 768 --heads 12 --kv-heads 5", "kv-heads (5) must divide heads (12)");
    expect_usage_error("estimate --layers 0 --d-model 768 --heads 12", "layers");
    expect_usage_error("estimate --layers 12 --d-model -768 --heads 12", "d-model");
    expect_usage_error("estimate --micro-batch 0", "--micro-batch");
    expect_usage_error("estimate --seq-len -5", "--seq-len");
    expect_usage_error("estimate --gpus 0", "--gpus");
    expect_usage_error("estimate --params -1", "--params");
    expect_usage_error("estimate --precision fp64", "--precision: unknown value 'fp64' (expected fp32|fp16-amp|");
    expect_usage_error("estimate --optimizer lion", "--optimizer: unknown value 'lion'");
    expect_usage_error("estimate --checkpointing some", "--checkpointing: unknown value 'some'");
    expect_usage_error("estimate --attention sparse", "--attention: unknown value 'sparse'");
    expect_usage_error("estimate --offload disk", "--offload: unknown value 'disk'");
    expect_usage_error("estimate --finetune adapter", "--finetune: unknown value 'adapter'");
    expect_usage_error("estimate --zero 4", "--zero");
    expect_usage_error("estimate --solve min-loss", "--solve: unknown value 'min-loss'");
    expect_usage_error("estimate --mfu 2", "--mfu");
    expect_usage_error("estimate --micro-batch abc", "--micro-batch");
    expect_usage_error("estimate --no-such-flag", "no-such-flag");
    expect_usage_error("bogus", "unknown command 'bogus' (expected estimate|train|");
    expect_usage_error("ckpt bogus", "unknown command 'bogus' (expected consolidate");
    expect_usage_error("", "a command is required (expected estimate|train|");
    expect_usage_error("ckpt consolidate " + testing::TempDir() + " -o ''",
                       "-o: name the output file");
    expect_usage_error("estimate --model gpt2 --params 1e9", "give one model");
    expect_usage_error("estimate --config " + data("bad_not_json.json"), "bad_not_json.json");
    expect_usage_error("estimate --config " + data("bad_field_type.json"), "n_layer");
    expect_usage_error("estimate --config " + data("bad_heads.json"), "bad_heads.json");
    expect_usage_error("estimate --config /nonexistent/cfg.json", "/nonexistent/cfg.json");
}

// Numbers that are not finite, and a zero where a measurement was given, are refused rather
// than printed as "inf days" or dropped without a word.
TEST(Cli, NumbersMustBeFinite) {
    expect_usage_error("estimate --params inf", "--params: must be a positive number (got inf)");
    expect_usage_error("estimate --params 1e308",
                       "--params: 1e+308 is beyond napkin's limit of 1e+15");
    expect_usage_error("estimate --tokens inf", "--tokens");
    expect_usage_error("estimate --tokens 1e308", "--tokens: 1e+308 is beyond");
    expect_usage_error("estimate --measured-tokens-per-s nan", "--measured-tokens-per-s");
    expect_usage_error("estimate --measured-tokens-per-s 0", "--measured-tokens-per-s");
    expect_usage_error("estimate --measured-tokens-per-s inf", "--measured-tokens-per-s");
    expect_usage_error("estimate --peak-tflops inf", "--peak-tflops");
    expect_usage_error("estimate --gpu-mem-gb inf", "--gpu-mem-gb");
    expect_usage_error("estimate --cpu-mem-gb inf", "--cpu-mem-gb");
    expect_usage_error("estimate --gpus 2 --link-gbps inf", "--link-gbps");
    expect_usage_error("estimate --gpus -1", "--gpus: must be positive (got -1)");
    expect_usage_error("estimate --finetune lora --lora-rank 9223372036854775807", "--lora-rank");
}

// A flag that is given is either used or refused, never dropped: shape flags beside a preset,
// a given-but-empty shape value, --dropout out of range, --lora-rank without adapters,
// --grads-fp32 without a master copy, and --micro-batch beside the solver that picks it.
TEST(Cli, GivenFlagsAreUsedOrRefused) {
    expect_usage_error("estimate --model gpt2 --vocab 1000", "--vocab: describes a custom shape");
    expect_usage_error("estimate --model gpt2 --kv-heads 4",
                       "--kv-heads: describes a custom shape");
    expect_usage_error("estimate --params 7e9 --norm rmsnorm", "--norm: describes a custom shape");
    expect_usage_error("estimate --config " + data("hf_gpt2_config.json") + " --untied",
                       "--untied");
    expect_usage_error("estimate --solve max-params --context 4096", "--context");
    expect_usage_error("estimate --layers 2 --d-model 128 --heads 4 --context -5",
                       "--context: must be a positive integer (got -5)");
    expect_usage_error("estimate --layers 2 --d-model 128 --heads 4 --d-ff 0",
                       "--d-ff: must be a positive integer (got 0)");
    expect_usage_error("estimate --layers 0 --d-model 128 --heads 4",
                       "--layers: must be a positive integer (got 0)");
    expect_usage_error("estimate --dropout nan", "--dropout: must be in [0, 1)");
    expect_usage_error("estimate --dropout -0.5", "--dropout: must be in [0, 1)");
    expect_usage_error("estimate --solve max-params --dropout 0.1",
                       "--dropout needs a model shape");
    expect_usage_error("estimate --lora-rank 8", "--lora-rank: needs --finetune lora or qlora");
    expect_usage_error("estimate --precision fp32 --grads-fp32",
                       "--grads-fp32: applies to the mixed-precision");
    expect_usage_error("estimate --precision bf16 --grads-fp32", "--grads-fp32");
    // train's rule: fp8-amp only, 0 (current scaling) up to 4096 steps.
    expect_usage_error("estimate --fp8-amax-history 4",
                       "--fp8-amax-history: applies to --precision fp8-amp");
    expect_usage_error(
        "estimate --precision fp8-amp --fp8-amax-history -1",
        "--fp8-amax-history: must be 0 (current scaling) or a number of steps up to 4096");
    expect_usage_error("estimate --precision fp8-amp --fp8-amax-history 4097", "(got 4097)");
    expect_usage_error("estimate --solve max-micro-batch --micro-batch 4", "drop --micro-batch");
    expect_usage_error("estimate --solve ''", "--solve: unknown value ''");
    expect_usage_error("estimate --solve max-micro-batch --ignore-activations",
                       "the model states alone do not depend on the micro-batch");
    // The same flags where they apply.
    EXPECT_EQ(napkin("estimate --layers 2 --d-model 128 --heads 4 --vocab 1000 --context 256").rc,
              0);
    EXPECT_EQ(napkin("estimate --finetune qlora --lora-rank 8").rc, 0);
    EXPECT_EQ(napkin("estimate --precision bf16-amp --grads-fp32").rc, 0);
    EXPECT_EQ(napkin("estimate --dropout 0.1").rc, 0);
}

// 3D parallelism from the command line: the flags, the text's new sections, --json's
// "parallelism", and the layouts a model cannot take refused in one line naming the flag.
TEST(Cli, EstimateWithTensorAndPipelineParallelism) {
    const CliRun r = napkin(
        "estimate --model llama3-70b --seq-len 4096 --gpus 64 --tp 8 --pp 4 --sp --micro-batches "
        "16 "
        "--checkpointing selective --zero 1");
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* s : {"(TP=8 PP=4 SP DP=2)", "3D parallelism (Megatron-LM)", "pipeline bubble",
                          "tensor group (8 GPUs, nvlink4", "pipeline group (4 GPUs, ib-ndr"}) {
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
    }
    const CliRun j =
        napkin("estimate --model llama3-70b --gpus 64 --tp 8 --pp 4 --micro-batches 16 --json");
    ASSERT_EQ(j.rc, 0) << j.err;
    const auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["parallelism"]["dp"], 2);
    EXPECT_DOUBLE_EQ(doc["time"]["bubble_fraction"].get<double>(), 3.0 / 16);
    const CliRun s = napkin("estimate --model llama3-70b --seq-len 4096 --solve min-tp-pp --json");
    ASSERT_EQ(s.rc, 0) << s.err;
    EXPECT_GT(nlohmann::json::parse(s.out)["solve"]["tp"].get<int>(), 1);
    expect_usage_error("estimate --model llama3-70b --gpus 12 --tp 8",
                       "--gpus 12: must be a multiple of --tp 8");
    expect_usage_error("estimate --model llama2-7b --tp 3 --gpus 3",
                       "--tp 3: must divide the 32 heads");
    expect_usage_error("estimate --model gpt2 --sp", "--sp: sequence parallelism needs --tp > 1");
    expect_usage_error("estimate --params 7e9 --tp 2 --gpus 2", "--tp/--pp: need a model shape");
    expect_usage_error("estimate --micro-batches 4 --grad-accum 4",
                       "--micro-batches and --grad-accum");
    expect_usage_error("estimate --model llama3-405b --seq-len 16777216",
                       "beyond napkin's 64-bit counts");
    expect_usage_error("estimate --config " + data("bad_heads.json") + " --fp32-optimizer-state",
                       "bad_heads.json");
    expect_usage_error("estimate --fp32-optimizer-state",
                       "--fp32-optimizer-state: for --precision bf16");
}

// --inference: its JSON (schema napkin-inference/1) holds the hand count of docs/INFERENCE.md's
// GPT-2 example; --explain shows the formulas with their numbers; --solve finds a batch.
TEST(Cli, InferenceEstimate) {
    const CliRun r = napkin("estimate --inference --model gpt2 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["schema"], "napkin-inference/1");
    EXPECT_EQ(j["memory"]["total"].get<double>(), 327534080);
    EXPECT_EQ(j["memory"]["kv_cache"]["per_token"].get<double>(), 36864);
    EXPECT_EQ(j["time"]["decode"]["steps"].get<int>(), 511);
    EXPECT_EQ(j["time"]["decode"]["first"]["bound"], "memory");
    const CliRun x = napkin("estimate --inference --model llama3-8b --weights nf4 --explain");
    ASSERT_EQ(x.rc, 0) << x.err;
    EXPECT_NE(x.out.find("per token = 2 (K, V) x L x KVH x HD x bytes = 2 x 32 x 8 x 128 x 2 = "
                         "131,072 B (MHA, KVH = NH = 32: 524,288 B; MQA, KVH = 1: 16,384 B)"),
              std::string::npos)
        << x.out;
    const CliRun s = napkin("estimate --inference --model llama2-7b --solve max-batch --json");
    ASSERT_EQ(s.rc, 0) << s.err;
    EXPECT_GT(nlohmann::json::parse(s.out)["solve"]["value"].get<double>(), 1);
}

TEST(Cli, InferenceFlagsAreRefusedOneLine) {
    expect_usage_error("estimate --weights int4", "--weights: needs --inference");
    expect_usage_error("estimate --inference --micro-batch 4", "--micro-batch: a training flag");
    expect_usage_error("estimate --inference --seq-len 4", "(give --prompt-len and --gen-len)");
    expect_usage_error("estimate --inference --weights int3", "--weights");
    expect_usage_error("estimate --inference --kv-cache nf4", "--kv-cache");
    expect_usage_error("estimate --inference --batch 0", "--batch: must be a positive integer");
    expect_usage_error("estimate --inference --lora-rank 8", "--lora-rank: needs --adapters");
    expect_usage_error("estimate --inference --prompt-len 1000 --gen-len 100",
                       "--prompt-len + --gen-len: 1100 positions exceed");
    expect_usage_error("estimate --inference --solve max-micro-batch", "--solve: unknown value");
    expect_usage_error("estimate --inference --solve max-batch --batch 2",
                       "--solve max-batch searches over --batch");
}

}  // namespace
