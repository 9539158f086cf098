// `napkin train --device cuda` checkpoints (label gpu): the end-of-run checkpoint is written,
// --stop-after and --save-every save, --resume continues, and the two halves' losses are the
// uninterrupted CUDA run's bit for bit; `napkin generate --device cuda` with and without
// flash-decoding. Skips when the binary finds no CUDA device. Kept apart
// from checkpoint_cuda_test.cpp: cli_util.h's napkin() cannot live beside namespace napkin.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_CUDA()                                                                     \
    do {                                                                                        \
        const CliRun probe_ = napkin(                                                           \
            "train --quiet --device cuda --steps 1 --micro-batch 1 "                            \
            "--seq-len 8 --out " +                                                              \
            testing::TempDir() + "/napkin_cuda_probe_" + std::to_string(getpid()));             \
        if (probe_.err.find("no CUDA device") != std::string::npos) GTEST_SKIP() << probe_.err; \
    } while (0)

fs::path scratch_dir() {
    const fs::path d =
        fs::path(testing::TempDir()) / ("napkin_train_cuda_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

// The losses of report.json by step.
std::vector<double> report_losses(const fs::path& run_dir) {
    std::ifstream f(run_dir / "report.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    std::vector<double> out;
    for (const auto& s : j.at("steps"))
        out.push_back(s.at("loss").get<double>());
    return out;
}

// napkin train --device cuda: --stop-after writes the checkpoint, --resume continues it, and the
// two halves' losses are the uninterrupted run's.
TEST(CheckpointCudaCli, StopAndResumeRepeatTheUninterruptedRun) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    const std::string common =
        "train --quiet --device cuda --steps 6 --micro-batch 2 --seq-len 32 ";
    const CliRun whole = napkin(common + "--out " + (dir / "whole").string());
    ASSERT_EQ(whole.rc, 0) << whole.err;
    EXPECT_TRUE(fs::exists(dir / "whole" / "checkpoint.safetensors")) << "no end-of-run checkpoint";
    const CliRun first =
        napkin(common + "--stop-after 3 --save-every 2 --out " + (dir / "split").string());
    ASSERT_EQ(first.rc, 0) << first.err;
    const std::vector<double> a = report_losses(dir / "split");
    const CliRun second =
        napkin("train --quiet --device cuda --resume " + (dir / "split").string());
    ASSERT_EQ(second.rc, 0) << second.err;
    // The resumed report keeps the first process's steps: the whole run, bit for bit.
    const std::vector<double> b = report_losses(dir / "split");
    ASSERT_GE(b.size(), a.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
    EXPECT_EQ(b, report_losses(dir / "whole"));
}

// --cuda-graph: auto captures a plain run and says so in report.json; on refuses, in one line
// naming why, what the capture cannot hold (--dropout: the mask seed is a kernel argument), and
// runs a profiled one; off says it was asked.
TEST(TrainCudaCli, CudaGraphIsReportedAndRefusedByName) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    const std::string common = "train --quiet --device cuda --micro-batch 1 --seq-len 16 ";
    const auto run_json = [&](const std::string& flags, std::string* out = nullptr) {
        fs::remove_all(dir / "g");
        const CliRun r = napkin(common + flags + " --out " + (dir / "g").string());
        EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
        if (out != nullptr) *out = r.out;
        std::ifstream f(dir / "g" / "report.json");
        return nlohmann::json::parse(f)["run"];
    };
    std::string printed;
    // Step 2 captures slot 1 and the optimizer.
    const nlohmann::json on = run_json("--steps 2", &printed);
    EXPECT_EQ(on["cuda_graph"], true);
    EXPECT_FALSE(on.contains("cuda_graph_off"));
    EXPECT_NE(printed.find("cuda graphs: 2 captured; device memory the driver took for them: "),
              std::string::npos)
        << printed;
    const nlohmann::json off = run_json("--steps 1 --cuda-graph off");
    EXPECT_EQ(off["cuda_graph"], false);
    EXPECT_EQ(off["cuda_graph_off"], "--cuda-graph off");
    const nlohmann::json dropout = run_json("--steps 1 --dropout 0.1");
    EXPECT_EQ(dropout["cuda_graph"], false);
    EXPECT_EQ(dropout["cuda_graph_off"].get<std::string>().rfind("--dropout: ", 0), 0u) << dropout;
    const CliRun refused =
        napkin(common + "--steps 1 --cuda-graph on --dropout 0.1 --out " + (dir / "p").string());
    EXPECT_EQ(refused.rc, 2);
    EXPECT_EQ(refused.err.find('\n'), refused.err.size() - 1) << "not one line: " << refused.err;
    EXPECT_NE(refused.err.find("--cuda-graph on: --dropout: "), std::string::npos) << refused.err;
    // Profiling is no reason: the graphs' nodes keep their ops
    // (ProfileCuda.GraphsKeepEachKernelsOp).
    const nlohmann::json profiled = run_json("--steps 2 --cuda-graph on --profile all");
    EXPECT_EQ(profiled["cuda_graph"], true);
}

// The memory check of a GPU run is against the device's free memory (an injected figure here),
// once the model is on it: what the first step adds, plus a margin, and --force past it.
TEST(TrainCudaCli, MemoryCheckIsAgainstTheDevicesFreeMemory) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    const std::string run =
        "train --quiet --device cuda --steps 1 --micro-batch 2 --seq-len 32 --out " +
        (dir / "run").string();
    ::setenv("NAPKIN_TEST_AVAILABLE_BYTES", "50000000", 1);  // 50 MB free: less than the margin
    const CliRun refused = napkin(run);
    EXPECT_FALSE(fs::exists(dir / "run" / "report.json"));
    const CliRun forced = napkin(run + " --force");
    ::unsetenv("NAPKIN_TEST_AVAILABLE_BYTES");
    EXPECT_EQ(refused.rc, 2) << refused.err;
    EXPECT_NE(refused.err.find("GB on the GPU by napkin's prediction (B=2, T=32), "),
              std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("more than the 0.05 GB free on "), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("or --force to try anyway"), std::string::npos) << refused.err;
    EXPECT_EQ(forced.rc, 0) << forced.err;
}

// The CUDA engine allocates its temporaries once (the cuBLASLt workspace, the loss chunk's
// scratch with dlogits and dw's fp32 sum, the per-row losses, naive attention's dS) plus the
// optimizer's global-norm partial sums at each step; the estimator predicts them to the byte,
// and the model states exactly, for plain, ZeRO, offloaded, LoRA/QLoRA, 8-bit AdamW and dropout
// runs.
TEST(TrainCudaCli, MemoryMatchesThePredictionExactly) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    for (const char* recipe :
         {"--precision fp32", "--precision bf16-amp", "--precision fp16-amp --attention naive",
          "--precision bf16", "--precision fp8-amp", "--zero 1 --precision bf16-amp", "--zero 3",
          "--zero 2 --precision bf16-amp --offload optimizer",
          "--finetune lora --lora-rank 4 --precision bf16-amp",
          "--finetune qlora --lora-rank 4 --precision fp16-amp --checkpointing full",
          "--optimizer adamw-8bit --precision bf16-amp",
          "--dropout 0.1 --attention naive --precision bf16-amp",
          "--dropout 0.1 --precision bf16-amp"}) {
        const fs::path out = dir / "memory";
        fs::remove_all(out);
        const CliRun r = napkin(std::string("train --quiet --device cuda --steps 1 --micro-batch 2 "
                                            "--seq-len 32 ") +
                                recipe + " --out " + out.string());
        ASSERT_EQ(r.rc, 0) << recipe << ": " << r.err;
        std::ifstream f(out / "report.json");
        const nlohmann::json j = nlohmann::json::parse(f);
        for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state",
                              "temporaries", "data"})
            EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(), j["predicted"][k].get<double>())
                << recipe << ": " << k;
    }
}

// NAPKIN_ATTENTION_CANDIDATES (docs/CUDA.md "The engine on candidates"): sweep candidates stand
// in for the engine's flash attention, a forward, a backward's two passes from two candidates,
// or one backward's both, say so on stderr, and train as the engine's kernels do (the same
// losses but for rounding); a name that is no candidate is refused naming it. A backend built
// without them refuses the variable instead of ignoring it.
TEST(TrainCudaCli, AttentionCandidatesStandInForTheEnginesKernels) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    std::ofstream(dir / "hd64.json")
        << R"({"format": "napkin-model", "name": "hd64", "vocab_size": 256,
        "padded_vocab_size": 256, "context_length": 128, "n_layers": 2, "d_model": 128,
        "n_heads": 2, "n_kv_heads": 2, "d_ff": 256, "norm": "layernorm", "positions": "learned",
        "mlp": "gelu", "bias": true, "tied_embeddings": true, "dropout": 0.0})";
    const std::string common =
        "train --quiet --device cuda --precision bf16-amp --attention flash --steps 4 "
        "--micro-batch 2 --seq-len 96 --config " +
        (dir / "hd64.json").string() + " --out ";
    const CliRun engine = napkin(common + (dir / "engine").string());
    ASSERT_EQ(engine.rc, 0) << engine.err;
    const std::vector<double> expected = report_losses(dir / "engine");
    // report.json's run.attention_candidates, when the run had the variable.
    const auto candidates_of = [](const fs::path& run) -> std::string {
        std::ifstream f(run / "report.json");
        const nlohmann::json j = nlohmann::json::parse(f);
        return j.at("run").value("attention_candidates", std::string("(absent)"));
    };
    EXPECT_EQ(candidates_of(dir / "engine"), "(absent)");
    const auto with = [&](const std::string& list, const std::string& out) {
        return napkin(common + (dir / out).string(), "NAPKIN_ATTENTION_CANDIDATES='" + list + "' ");
    };
#if NAPKIN_ATTENTION_CANDIDATES
    struct Case {
        const char *list, *said;
    };
    for (const Case& c :
         {Case{"f64-wgmma-pp, b64-rs@1, b64-wgmma-qpp@2",
               "HD 64: forward f64-wgmma-pp, pass 1 b64-rs, pass 2 b64-wgmma-qpp"},
          Case{"b64-wgmma-kpp",
               "HD 64: forward engine, pass 1 b64-wgmma-kpp, pass 2 "
               "b64-wgmma-kpp"},
          Case{"b128-w8@2, f64-w8", "HD 64: forward f64-w8, pass 1 engine, pass 2 engine"}}) {
        SCOPED_TRACE(c.list);
        fs::remove_all(dir / "cand");
        const CliRun r = with(c.list, "cand");
        ASSERT_EQ(r.rc, 0) << r.err;
        EXPECT_NE(r.err.find(std::string("napkin: flash attention (bf16) from "
                                         "NAPKIN_ATTENTION_CANDIDATES: ") +
                             c.said),
                  std::string::npos)
            << r.err;
        EXPECT_NE(r.out.find(std::string("attention: sweep candidates in place of the engine's "
                                         "bf16 flash attention (NAPKIN_ATTENTION_CANDIDATES=") +
                             c.list + ")"),
                  std::string::npos)
            << r.out;
        EXPECT_EQ(candidates_of(dir / "cand"), c.list);
        const std::vector<double> losses = report_losses(dir / "cand");
        ASSERT_EQ(losses.size(), expected.size());
        for (std::size_t i = 0; i < losses.size(); ++i)
            EXPECT_NEAR(losses[i], expected[i], 2e-4 * std::abs(expected[i])) << "step " << i + 1;
    }
    const CliRun bad = with("f64-wgmma-pp,b64-nope", "bad");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("NAPKIN_ATTENTION_CANDIDATES: unknown candidate \"b64-nope\""),
              std::string::npos)
        << bad.err;
#else
    const CliRun r = with("f64-w8", "cand");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("this build's CUDA backend has no attention candidates"),
              std::string::npos)
        << r.err;
#endif
}

// fp8-amp's delayed-scaling state on the device is estimate's fp8_history to the byte at the
// default history, a short one and none (current scaling).
TEST(TrainCudaCli, Fp8HistoryIsTheEstimatorsAtEveryLength) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    for (const int history : {16, 4, 0}) {
        const fs::path out = dir / ("fp8_history_" + std::to_string(history));
        expect_fp8_history_as_estimated("cuda", history, out);
        if (HasFatalFailure()) return;
    }
}

// fp8-amp's delayed scaling under ZeRO-3 over NCCL: the amaxes reduced by ncclMax each step
// (world size 1 here: the path, not the spread), the histories and scales in rank 0's shard;
// resumed, the run is the uninterrupted one bit for bit, its memory the prediction.
TEST(CheckpointCudaCli, Fp8DelayedUnderZeroSavesAndResumes) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    const std::string common =
        "train --quiet --device cuda --zero 3 --precision fp8-amp --steps 4 --micro-batch 2 "
        "--seq-len 32 ";
    const CliRun whole = napkin(common + "--out " + (dir / "whole").string());
    ASSERT_EQ(whole.rc, 0) << whole.err;
    const CliRun first =
        napkin(common + "--stop-after 2 --save-every 1 --out " + (dir / "split").string());
    ASSERT_EQ(first.rc, 0) << first.err;
    const CliRun second =
        napkin("train --quiet --device cuda --zero 3 --resume " + (dir / "split").string());
    ASSERT_EQ(second.rc, 0) << second.err;
    EXPECT_EQ(report_losses(dir / "split"), report_losses(dir / "whole"));
    std::ifstream f(dir / "whole" / "report.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j["run"]["fp8_amax_history"], 16);
    for (const char* k : {"parameters", "gradients", "optimizer_state", "temporaries"})
        EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(), j["predicted"][k].get<double>())
            << k;
}

// The data-parallel path of the binary over NCCL at world size 1, with the optimizer offloaded
// and a sharded checkpoint each step: the run hash and the checkpoint sizes are host values
// broadcast through NCCL (once read by NCCL as device addresses; found on the emulator), the
// offloaded step runs on the host, and the resumed run repeats the uninterrupted one.
TEST(CheckpointCudaCli, ZeroOverNcclWithOffloadSavesAndResumes) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    const std::string common =
        "train --quiet --device cuda --zero 2 --precision bf16-amp --offload optimizer "
        "--steps 4 --micro-batch 2 --seq-len 32 ";
    const CliRun whole = napkin(common + "--out " + (dir / "whole").string());
    ASSERT_EQ(whole.rc, 0) << whole.err;
    const CliRun first =
        napkin(common + "--stop-after 2 --save-every 1 --out " + (dir / "split").string());
    ASSERT_EQ(first.rc, 0) << first.err;
    EXPECT_TRUE(fs::exists(dir / "split" / "checkpoints" / "step-00000002" / "manifest.json"))
        << "no sharded checkpoint";
    const std::vector<double> a = report_losses(dir / "split");
    // A sharded run resumes at its stage; the offload is a placement the resumed run chooses.
    const CliRun second =
        napkin("train --quiet --device cuda --zero 2 --offload optimizer --resume " +
               (dir / "split").string());
    ASSERT_EQ(second.rc, 0) << second.err;
    // The resumed report keeps the first process's steps: the whole run, bit for bit.
    const std::vector<double> b = report_losses(dir / "split");
    ASSERT_GE(b.size(), a.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
    EXPECT_EQ(b, report_losses(dir / "whole"));
}

// napkin generate --device cuda with --flash-decoding on (the default) and off: generate.json's
// measured memory is the prediction's in every category, the split's workspace among the
// temporaries only when on (tiny: B 3, 17 positions, 4 heads of 32: 4 x 3 x 4 x 1 x 34 bytes),
// and `napkin report` reads the folder back.
TEST(GenerateCudaCli, FlashDecodingMeasuresThePredictedMemoryToTheByte) {
    SKIP_WITHOUT_CUDA();
    const fs::path dir = scratch_dir();
    std::int64_t temporaries[2] = {};
    for (int on = 0; on < 2; ++on) {
        const fs::path out = dir / (on ? "on" : "off");
        const CliRun r = napkin(
            "generate --device cuda --precision bf16 --synthetic-prompt 12 --batch 3 "
            "--max-new-tokens 5 --flash-decoding " +
            std::string(on ? "on" : "off") + " -o " + out.string());
        ASSERT_EQ(r.rc, 0) << r.err;
        std::ifstream f(out / "generate.json");
        const nlohmann::json g = nlohmann::json::parse(f);
        EXPECT_EQ(g["run"]["flash_decoding"], on == 1);
        for (const char* c : {"parameters", "kv_cache", "activations", "temporaries", "data"})
            EXPECT_EQ(g["measured"]["peak_bytes"][c], g["predicted"]["memory"][c]) << c;
        temporaries[on] = g["measured"]["peak_bytes"]["temporaries"].get<std::int64_t>();
        const CliRun report = napkin("report " + out.string());
        ASSERT_EQ(report.rc, 0) << report.err;
        EXPECT_NE(report.out.find(on ? "flash-decoding on" : "flash-decoding off"),
                  std::string::npos)
            << report.out;
        EXPECT_EQ(report.out.find("DIFFERS"), std::string::npos) << report.out;
    }
    EXPECT_EQ(temporaries[1] - temporaries[0], 4 * 3 * 4 * 1 * (32 + 2));
}

}  // namespace
