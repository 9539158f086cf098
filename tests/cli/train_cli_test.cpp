// napkin train as a user meets it: a short run writes a report whose measured model states equal
// the prediction; bad input is refused with one line and nothing half-written.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "estimator/profile_catalog.h"
#include "profiler/trace_check.h"
#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

// llm.c's token file: a 256 x int32 header (magic, version, count) and uint16 tokens.
void write_bin(const fs::path& p, const std::vector<std::uint16_t>& tokens, std::int32_t magic = 20240520) {
    std::int32_t header[256] = {};
    header[0] = magic;
    header[1] = 1;
    header[2] = static_cast<std::int32_t>(tokens.size());
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

TEST(TrainCli, ShortRunWritesReport) {
    const fs::path out = fresh_dir("short");
    const CliRun r = napkin("train --steps 3 --micro-batch 2 --seq-len 32 --precision bf16-amp --quiet --out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = read_json(out / "report.json");
    EXPECT_EQ(j["schema"], "napkin-train-report/2");
    ASSERT_EQ(j["steps"].size(), 3u);
    // The performance model's step for this run, from the profile napkin ships for this CPU
    // (the development VM's, estimator/profiles) or else over its ceilings at the default
    // efficiencies: its buckets add up to the step, and its ops are the engine's op ranges.
    const auto& t = j["predicted"]["time"];
    const std::string profile = t["profile"].get<std::string>();
    if (napkin::shipped_profile_for(napkin::this_cpu()))
        EXPECT_NE(profile.find(" (shipped)"), std::string::npos) << profile;
    else
        EXPECT_NE(profile.find("default efficiencies"), std::string::npos) << profile;
    EXPECT_GT(t["step_seconds"].get<double>(), 0.0);
    double buckets = 0;
    for (const auto& [name, s] : t["seconds_by_bucket"].items())
        buckets += s.get<double>();
    EXPECT_NEAR(buckets, t["step_seconds"].get<double>(), 1e-9 * buckets);
    std::set<std::string> ops;
    for (const auto& o : t["ops"])
        ops.insert(o["name"].get<std::string>());
    for (const char* op : {"attn.qkv", "attn.qkv backward", "optimizer", "data"})
        EXPECT_TRUE(ops.count(op)) << op;
    for (const auto& s : j["steps"]) EXPECT_TRUE(std::isfinite(s["loss"].get<double>()));
    for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state"}) {
        EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(), j["predicted"][k].get<double>()) << k;
    }
    EXPECT_NEAR(j["measured"]["peak_bytes"]["activations"].get<double>() / j["predicted"]["activations"].get<double>(), 1.0,
                0.05);
    // MFU's denominator and its source; on the CPU also under the name earlier reports used.
    const auto& m = j["measured"];
    EXPECT_GT(m["peak_flops_per_s"].get<double>(), 0.0);
    EXPECT_EQ(m["peak_source"], "this CPU's sgemm, measured at start");
    EXPECT_EQ(m["sgemm_peak_flops_per_s"], m["peak_flops_per_s"]);
    EXPECT_NEAR(m["mfu"].get<double>(),
                m["model_flops_per_s"].get<double>() / m["peak_flops_per_s"].get<double>(), 1e-12);
    EXPECT_FALSE(durable_temporary_of(out / "report.json"));
}

// The done line's ln V is the model's vocabulary's, where the loss starts: ln 1000 for a model
// of 1000 tokens on the 256-token synthetic corpus, not ln 256.
TEST(TrainCli, DoneLineNamesTheModelsLnV) {
    const fs::path dir = fresh_dir("lnv");
    fs::create_directories(dir);
    std::ofstream(dir / "v1000.json")
        << R"({"format": "napkin-model", "name": "v1000", "vocab_size": 1000,
        "padded_vocab_size": 1024, "context_length": 64, "n_layers": 1, "d_model": 32, "n_heads": 2,
        "n_kv_heads": 2, "d_ff": 128, "norm": "layernorm", "positions": "learned", "mlp": "gelu",
        "bias": true, "tied_embeddings": true, "dropout": 0.0})";
    const CliRun r = napkin("train --steps 1 --quiet --seq-len 16 --micro-batch 2 --config " +
                            (dir / "v1000.json").string() + " --out " + (dir / "run").string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("(ln V = 6.9078, corpus entropy"), std::string::npos) << r.out;
    fs::remove_all(dir);
}

// The engine allocates its temporaries once (gradient buffers, loss chunk, naive attention's dS,
// the CPU's widening scratch for 16-bit GEMMs); the estimator predicts them to the byte.
TEST(TrainCli, TemporariesMatchThePredictionExactly) {
    for (const char* recipe :
         {"--precision fp32 --attention flash", "--precision bf16-amp --attention flash",
          "--precision fp16-amp --attention naive", "--precision bf16 --attention naive",
          "--precision fp32 --attention naive --micro-batch 3 --seq-len 24",
          "--precision fp8-amp --attention flash", "--precision fp8-amp --attention naive",
          "--precision fp8-amp --fp8-amax-history 0", "--precision fp8-amp --fp8-amax-history 3",
          // B T = 512 rows: five chunks of 100 and a short one; all rows at once.
          "--precision fp32 --loss-chunk 100", "--precision bf16-amp --loss-chunk 0"}) {
        const fs::path out = fresh_dir("temporaries");
        const CliRun r = napkin(std::string("train --device cpu --steps 1 --quiet ") + recipe + " --out " + out.string());
        ASSERT_EQ(r.rc, 0) << recipe << ": " << r.err;
        const auto j = read_json(out / "report.json");
        EXPECT_EQ(j["measured"]["peak_bytes"]["temporaries"].get<double>(), j["predicted"]["temporaries"].get<double>())
            << recipe;
        if (std::string(recipe).find("--loss-chunk 100") != std::string::npos) {
            EXPECT_EQ(j["run"]["loss_chunk"], 100);
        }
    }
}

// fp8-amp keeps the blocks' GEMM inputs in fp8 with their scales and casts weights and gradients
// per GEMM; every category, activations included, is the estimator's to the byte, and it learns.
TEST(TrainCli, Fp8AmpMemoryMatchesThePrediction) {
    const fs::path out = fresh_dir("fp8");
    const CliRun r =
        napkin("train --device cpu --steps 8 --precision fp8-amp --quiet --out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = read_json(out / "report.json");
    EXPECT_EQ(j["run"]["precision"], "fp8-amp");
    for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state",
                          "activations", "temporaries", "data"})
        EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(), j["predicted"][k].get<double>())
            << k;
    const auto& steps = j["steps"];
    EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() - 0.5);
}

// The delayed-scaling state train allocates is estimate's fp8_history to the byte, at the
// default history, a short one and none (current scaling).
TEST(TrainCli, Fp8HistoryIsTheEstimatorsAtEveryLength) {
    for (const int history : {16, 4, 0}) {
        const fs::path out = fresh_dir("fp8_history_" + std::to_string(history));
        expect_fp8_history_as_estimated("cpu", history, out);
        fs::remove_all(out);
    }
}

// Under ZeRO (or a launcher) fp8-amp scales with delayed scaling by default too, as one process
// does (the ranks reduce their amaxes: tests/comm/zero_mpi_test.cpp).
TEST(TrainCli, Fp8AmpUnderZeroScalesDelayedByDefault) {
    const fs::path out = fresh_dir("fp8_zero");
    const CliRun r = napkin(
        "train --device cpu --steps 2 --precision fp8-amp --zero 1 --quiet --out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = read_json(out / "report.json");
    EXPECT_EQ(j["run"]["fp8_amax_history"], 16);
    EXPECT_EQ(j["measured"]["peak_bytes"]["temporaries"].get<double>(),
              j["predicted"]["temporaries"].get<double>());
}

TEST(TrainCli, TrainsOnTextAndBinFiles) {
    const fs::path dir = fresh_dir("data");
    fs::create_directories(dir);
    {
        std::ofstream f(dir / "text.txt");
        for (int i = 0; i < 200; ++i) f << "to be or not to be, that is the question. ";
    }
    std::vector<std::uint16_t> tokens;
    for (int i = 0; i < 5000; ++i) tokens.push_back(static_cast<std::uint16_t>((i * 7) % 256));
    write_bin(dir / "tokens.bin", tokens);
    for (const char* file : {"text.txt", "tokens.bin"}) {
        const CliRun r = napkin("train --steps 2 --micro-batch 2 --seq-len 16 --quiet --data " + (dir / file).string() +
                                " --out " + (dir / "run").string());
        EXPECT_EQ(r.rc, 0) << file << ": " << r.err;
    }
}

// Stop after 3 of 6 steps, resume: steps 4-6 have bitwise the losses of an uninterrupted run.
TEST(TrainCli, ResumeIsBitwiseIdentical) {
    const fs::path a = fresh_dir("resume_a"), b = fresh_dir("resume_b");
    const std::string common = "train --steps 6 --micro-batch 2 --seq-len 32 --precision bf16-amp --quiet";
    ASSERT_EQ(napkin(common + " --out " + a.string()).rc, 0);
    ASSERT_EQ(napkin(common + " --stop-after 3 --out " + b.string()).rc, 0);
    const CliRun r = napkin("train --resume " + b.string() + " --quiet");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto full = read_json(a / "report.json")["steps"];
    // The report keeps the first process's steps 1-3 (docs/CHECKPOINTS.md, "Guarantees under
    // faults"): all six are the uninterrupted run's, bit for bit.
    const auto resumed = read_json(b / "report.json")["steps"];
    ASSERT_EQ(resumed.size(), 6u);
    for (std::size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(resumed[i]["step"], full[i]["step"]);
        EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i]["loss"].get<double>())
            << "step " << i + 1;
    }
    // A corrupt checkpoint is refused with one line naming it.
    const fs::path ckpt = b / "checkpoint.safetensors";
    {
        std::fstream f(ckpt, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(ckpt) - 5));
        f.put('\x7f');
    }
    const CliRun bad = napkin("train --resume " + b.string() + " --stop-after 5 --quiet");
    EXPECT_EQ(bad.rc, 1);
    EXPECT_NE(bad.err.find("checkpoint.safetensors"), std::string::npos) << bad.err;
    EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << bad.err;
    EXPECT_EQ(napkin("train --resume " + b.string() + " --lr 1 --quiet").rc, 2);
}

// A new run without --profile in the folder of an earlier profiled run: the earlier trace and
// memory snapshot go aside with its checkpoint and report, so napkin export does not present the
// earlier run's trace as this run's.
TEST(TrainCli, NewRunInAnOldFolderSetsTheOldTraceAside) {
    const fs::path d = fresh_dir("stale_trace");
    const std::string common =
        "train --steps 2 --micro-batch 2 --seq-len 32 --quiet --out " + d.string();
    ASSERT_EQ(napkin(common + " --profile all").rc, 0);
    ASSERT_TRUE(fs::exists(d / "trace.json"));
    const CliRun r = napkin(common + " --precision bf16-amp");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("trace.json to trace.json.previous"), std::string::npos) << r.out;
    for (const char* name : {"trace.json", "memory.json"}) {
        EXPECT_FALSE(fs::exists(d / name)) << name << " of the earlier run is still there";
        EXPECT_TRUE(fs::exists(d / (std::string(name) + ".previous"))) << name;
    }
    EXPECT_EQ(read_json(d / "report.json")["run"]["precision"], "bf16-amp");
    EXPECT_EQ(read_json(d / "report.json.previous")["run"]["precision"], "fp32");
    const CliRun x = napkin("export " + d.string() + " -o " + (d / "x.json").string());
    EXPECT_EQ(x.rc, 1);
    EXPECT_NE(x.err.find("--profile"), std::string::npos) << x.err;
    fs::remove_all(d);
}

// A new run started in an old run's folder and killed before its first save leaves nothing
// that --resume would take for its own: the earlier checkpoint was moved aside, whole, when the
// new run started (docs/CHECKPOINTS.md, "A new run in an old folder"). A run that continues the
// folder's own checkpoint moves nothing.
TEST(TrainCli, NewRunInAnOldFolderSetsTheOldCheckpointAside) {
    const fs::path d = fresh_dir("stale");
    const std::string common = "train --steps 4 --micro-batch 2 --seq-len 32 --quiet --out " + d.string();
    ASSERT_EQ(napkin(common + " --stop-after 2").rc, 0);
    const fs::path ckpt = d / "checkpoint.safetensors", aside = d / "checkpoint.safetensors.previous";
    const std::string old = slurp(ckpt.string());
    ASSERT_FALSE(old.empty());

    ::setenv("NAPKIN_TEST_KILL_RANK_AT_STEP", "0:1", 1);  // SIGKILL before step 2
    const CliRun killed = napkin(common + " --seed 7");
    ::unsetenv("NAPKIN_TEST_KILL_RANK_AT_STEP");
    EXPECT_NE(killed.rc, 0);
    EXPECT_NE(killed.out.find("note: " + d.string() + " held an earlier run's checkpoint: moved "
                              "checkpoint.safetensors to checkpoint.safetensors.previous"),
              std::string::npos)
        << killed.out;
    EXPECT_FALSE(fs::exists(ckpt));
    EXPECT_TRUE(slurp(aside.string()) == old) << "the earlier checkpoint was not kept whole";
    const CliRun stale = napkin("train --quiet --resume " + d.string());
    EXPECT_EQ(stale.rc, 2);
    EXPECT_NE(stale.err.find("--resume: no checkpoint at '" + ckpt.string() + "'"), std::string::npos)
        << stale.err;
    // The earlier run goes on from the file set aside, into another folder.
    const fs::path e = fresh_dir("stale_e");
    const CliRun earlier = napkin("train --quiet --resume " + aside.string() + " --out " + e.string());
    ASSERT_EQ(earlier.rc, 0) << earlier.err;
    EXPECT_EQ(read_json(e / "report.json")["steps"].size(), 2u);

    // The new run again, stopped after its first save, then resumed in place: nothing moves.
    const CliRun mine = napkin(common + " --seed 7 --stop-after 1");
    ASSERT_EQ(mine.rc, 0) << mine.err;
    EXPECT_EQ(mine.out.find("note:"), std::string::npos) << mine.out;
    const CliRun resumed = napkin("train --quiet --resume " + d.string());
    ASSERT_EQ(resumed.rc, 0) << resumed.err;
    EXPECT_EQ(resumed.out.find("note:"), std::string::npos) << resumed.out;
    EXPECT_NE(resumed.out.find("at step 1 of 4"), std::string::npos) << resumed.out;
    EXPECT_TRUE(slurp(aside.string()) == old);
}

// One process sharding over itself (--zero 2, no launcher) writes sharded checkpoints: resumed,
// steps 4-6 are bitwise those of an uninterrupted run; `napkin ckpt consolidate` makes one file
// that a plain run continues from; a resume at another stage is refused pointing at it.
TEST(TrainCli, ShardedCheckpointsInOneProcess) {
    const fs::path a = fresh_dir("zfull"), b = fresh_dir("zpart"), c = fresh_dir("zplain");
    const std::string common = "train --steps 6 --micro-batch 2 --seq-len 32 --quiet --zero 2";
    ASSERT_EQ(napkin(common + " --out " + a.string()).rc, 0);
    const CliRun stop = napkin(common + " --save-every 2 --stop-after 3 --out " + b.string());
    ASSERT_EQ(stop.rc, 0) << stop.err;
    EXPECT_TRUE(fs::exists(b / "checkpoints" / "step-00000003" / "manifest.json"));
    EXPECT_FALSE(fs::exists(b / "checkpoints" / "step-00000002"));
    EXPECT_FALSE(fs::exists(b / "checkpoint.safetensors"));

    const CliRun other = napkin("train --zero 3 --quiet --resume " + b.string());
    EXPECT_EQ(other.rc, 2);
    EXPECT_NE(other.err.find("1 rank at ZeRO-2, this run has 1 rank at ZeRO-3"), std::string::npos) << other.err;
    EXPECT_NE(other.err.find("napkin ckpt consolidate"), std::string::npos) << other.err;
    const CliRun plain = napkin("train --quiet --resume " + b.string());
    EXPECT_EQ(plain.rc, 2);
    EXPECT_NE(plain.err.find("napkin ckpt consolidate"), std::string::npos) << plain.err;

    const fs::path file = c / "whole.safetensors";
    fs::create_directories(c);
    const CliRun cons = napkin("ckpt consolidate " + b.string() + " -o " + file.string());
    ASSERT_EQ(cons.rc, 0) << cons.err;
    const CliRun r = napkin("train --zero 2 --quiet --resume " + b.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const CliRun p = napkin("train --quiet --resume " + file.string());
    ASSERT_EQ(p.rc, 0) << p.err;
    const auto full = read_json(a / "report.json")["steps"];
    for (const fs::path& dir : {b, c}) {
        // b continues its own folder: its report keeps steps 1-3 of the first process too.
        const auto resumed = read_json(dir / "report.json")["steps"];
        ASSERT_EQ(resumed.size(), dir == b ? 6u : 3u) << dir;
        const std::size_t later = resumed.size() - 3;
        for (std::size_t i = 0; i < 3; ++i) {
            const double want = full[i + 3]["loss"].get<double>(),
                         got = resumed[later + i]["loss"].get<double>();
            if (dir == b) EXPECT_EQ(got, want) << "step " << i + 4;
            else EXPECT_NEAR(got, want, 1e-5 * want) << "plain, step " << i + 4;  // the norm's sum order
        }
    }
    EXPECT_TRUE(fs::exists(c / "checkpoint.safetensors"));

    EXPECT_EQ(napkin("ckpt consolidate " + (a / "nope").string()).rc, 2);
    EXPECT_EQ(napkin("ckpt consolidate " + c.string()).rc, 2);  // no sharded checkpoint there
    EXPECT_EQ(napkin("ckpt").rc, 2);
}

// --profile all writes a valid Chrome trace with step, phase, layer and op ranges carrying
// their analytic FLOPs, memory counters, and a memory snapshot.
TEST(TrainCli, ProfileWritesAValidTrace) {
    const fs::path out = fresh_dir("profile");
    const CliRun r = napkin("train --steps 2 --micro-batch 2 --seq-len 32 --profile all --quiet --out " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto check = napkin::profiler::check_trace_file(out / "trace.json");
    for (const auto& p : check.problems) ADD_FAILURE() << p;
    EXPECT_GT(check.phase_counts.at("X"), 50u);
    EXPECT_GT(check.phase_counts.at("C"), 10u);
    const auto trace = read_json(out / "trace.json");
    bool qkv_with_flops = false;
    for (const auto& e : trace["traceEvents"]) {
        if (e.value("name", "") == "h.0.attn.qkv" && e.contains("args") && e["args"].value("flops", 0.0) > 0) {
            qkv_with_flops = true;
        }
    }
    EXPECT_TRUE(qkv_with_flops);
    const auto mem = read_json(out / "memory.json");
    EXPECT_EQ(mem["schema"], "napkin-memory/1");
    EXPECT_FALSE(durable_temporary_of(out / "trace.json"));
    EXPECT_EQ(napkin("train --steps 1 --profile some --quiet --out " + out.string()).rc, 2);
    EXPECT_EQ(napkin("train --steps 1 --profile steps:3-2 --quiet --out " + out.string()).rc, 2);
    EXPECT_EQ(napkin("train --steps 1 --profile steps:x --quiet --out " + out.string()).rc, 2);

    // A window: only step 2 of 3 is traced.
    const fs::path win = fresh_dir("profile_window");
    ASSERT_EQ(napkin("train --steps 3 --micro-batch 2 --seq-len 32 --profile steps:2-2 --quiet --out " + win.string()).rc, 0);
    int step_ranges = 0;
    double window_end_us = 0;
    const auto window_trace = read_json(win / "trace.json");
    for (const auto& e : window_trace["traceEvents"]) {
        if (e.value("cat", "") == "step") {
            ++step_ranges;
            EXPECT_EQ(e["name"], "step 1");  // the engine counts from 0
            window_end_us = e["ts"].get<double>() + e["dur"].get<double>();
        }
    }
    EXPECT_EQ(step_ranges, 1);
    // The allocator's events are recorded to the end of the window and not after: step 3's
    // allocations are not in memory.json (they would grow with every step of a long run).
    const auto window_mem = read_json(win / "memory.json");
    ASSERT_FALSE(window_mem["timeline"].empty());
    EXPECT_LE(window_mem["timeline"].back()[0].get<double>(), window_end_us + 1.0);
}

// An llm.c checkpoint (magic 20240326, version 3, fp32) of a tiny GPT-2-shaped model.
void write_llmc_checkpoint(const fs::path& p) {
    const std::int32_t maxT = 64, V = 256, L = 2, NH = 4, C = 64, Vp = 256;
    std::int32_t header[256] = {};
    header[0] = 20240326;
    header[1] = 3;
    header[2] = maxT;
    header[3] = V;
    header[4] = L;
    header[5] = NH;
    header[6] = C;
    header[7] = Vp;
    const std::int64_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    const std::int64_t count = Vp * C + maxT * C + L * per_layer + 2 * C;
    std::vector<float> values(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.02f * static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
}

TEST(TrainCli, InitFromLlmcCheckpoint) {
    const fs::path dir = fresh_dir("init");
    fs::create_directories(dir);
    write_llmc_checkpoint(dir / "gpt2_tiny.bin");
    for (const char* strategy : {"read-all", "sequential", "mmap"}) {
        const CliRun r = napkin("train --init-from " + (dir / "gpt2_tiny.bin").string() + " --load-strategy " + strategy +
                                " --steps 2 --micro-batch 2 --seq-len 32 --quiet --out " + (dir / "run").string());
        ASSERT_EQ(r.rc, 0) << strategy << ": " << r.err;
        const auto j = read_json(dir / "run" / "report.json");
        EXPECT_EQ(j["init"]["format"], "llm.c");
        EXPECT_EQ(j["init"]["strategy"], strategy);
        EXPECT_EQ(j["model"]["n_layers"], 2);
        EXPECT_EQ(j["model"]["d_model"], 64);
    }
    const CliRun bad = napkin("train --init-from " + (dir / "gpt2_tiny.bin").string() + " --load-strategy lazy --quiet --out " +
                              (dir / "run2").string());
    EXPECT_EQ(bad.rc, 2);
    EXPECT_NE(bad.err.find("--load-strategy"), std::string::npos) << bad.err;
}

// Fine-tuning GPT-2 weights with adapters: the first step's loss is the full model's (B starts
// at zero) under LoRA, near it under QLoRA (the NF4 base), and every memory category equals the
// prediction in report.json.
TEST(TrainCli, FinetuneLlmcWeightsWithAdapters) {
    const fs::path dir = fresh_dir("finetune");
    fs::create_directories(dir);
    write_llmc_checkpoint(dir / "gpt2_tiny.bin");
    auto first_loss = [&](const std::string& flags, const std::string& name) {
        const fs::path out = dir / name;
        const CliRun r = napkin("train --init-from " + (dir / "gpt2_tiny.bin").string() +
                                " --steps 3 --micro-batch 2 --seq-len 32 --precision bf16-amp " + flags +
                                " --quiet --out " + out.string());
        EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
        const auto j = read_json(out / "report.json");
        for (const char* k : {"parameters", "master_weights", "gradients", "optimizer_state",
                              "activations", "temporaries", "data"}) {
            EXPECT_EQ(j["measured"]["peak_bytes"][k].get<double>(), j["predicted"][k].get<double>())
                << flags << ": " << k;
        }
        return j;
    };
    const auto full = first_loss("", "full");
    const auto lora = first_loss("--finetune lora --lora-rank 8 --lora-alpha 16", "lora");
    const auto qlora = first_loss("--finetune qlora --lora-rank 8", "qlora");
    EXPECT_EQ(lora["run"]["finetune"], "lora");
    EXPECT_EQ(lora["run"]["lora_rank"], 8);
    EXPECT_EQ(lora["run"]["lora_alpha"], 16.0);
    EXPECT_TRUE(full["run"]["lora_rank"].is_null());
    EXPECT_EQ(lora["steps"][0]["loss"], full["steps"][0]["loss"]);
    EXPECT_NEAR(qlora["steps"][0]["loss"].get<double>(), full["steps"][0]["loss"].get<double>(), 0.05);
    // Adapters hold a small share of the weights: far fewer gradient and optimizer bytes.
    EXPECT_LT(lora["measured"]["peak_bytes"]["optimizer_state"].get<double>(),
              full["measured"]["peak_bytes"]["optimizer_state"].get<double>() / 4);
    // QLoRA's frozen linears in NF4: fewer parameter bytes than LoRA's bf16 base.
    EXPECT_LT(qlora["measured"]["peak_bytes"]["parameters"].get<double>(),
              lora["measured"]["peak_bytes"]["parameters"].get<double>());
}

// Pretrain, then fine-tune from the run's own checkpoint: the weights carry over (a full and a
// LoRA run from it start at the same loss, bit for bit), the shape comes from the file, and a
// fine-tuning run's checkpoint is refused as a starting point.
TEST(TrainCli, FinetuneANapkinRunsCheckpoint) {
    const fs::path dir = fresh_dir("pretrain");
    const CliRun base = napkin("train --steps 20 --micro-batch 2 --seq-len 32 --quiet --out " +
                               (dir / "base").string());
    ASSERT_EQ(base.rc, 0) << base.err;
    const std::string ckpt = (dir / "base" / "checkpoint.safetensors").string();
    auto run = [&](const std::string& flags, const std::string& name) {
        const CliRun r = napkin("train --init-from " + ckpt + " --steps 2 --micro-batch 2 --seq-len 32 " +
                                flags + " --quiet --out " + (dir / name).string());
        EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
        return read_json(dir / name / "report.json");
    };
    const auto full = run("", "full");
    const auto lora = run("--finetune lora --lora-rank 4", "lora");
    EXPECT_EQ(full["init"]["format"], "napkin checkpoint");
    EXPECT_EQ(lora["model"]["name"], "tiny");
    EXPECT_EQ(lora["steps"][0]["loss"], full["steps"][0]["loss"]);
    // Where the base run left off, not at ln 256 = 5.55 (a fresh model's).
    EXPECT_LT(full["steps"][0]["loss"].get<double>(), 5.0);
    const CliRun again = napkin("train --init-from " + (dir / "lora" / "checkpoint.safetensors").string() +
                                " --steps 2 --quiet --out " + (dir / "again").string());
    EXPECT_EQ(again.rc, 1);
    EXPECT_NE(again.err.find("adapters are not merged"), std::string::npos) << again.err;
}

void expect_error(const std::string& args, int rc, const std::string& needle, const fs::path& out) {
    SCOPED_TRACE(args);
    const bool existed = fs::exists(out);
    const CliRun r = napkin(args + " --quiet --out " + out.string());
    EXPECT_EQ(r.rc, rc);
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out / "report.json")) << "a failed run left a report";
    if (!existed) {
        EXPECT_FALSE(fs::exists(out)) << "a failed run left an empty run folder";
    }
}

// A run that does not fit ends with one line naming the tensor it could not allocate, what was
// live, and the estimator's predicted peak for the run, and leaves no report behind.
TEST(TrainCli, OutOfMemoryNamesTheTensorAndThePrediction) {
#if defined(NAPKIN_SANITIZED)
    GTEST_SKIP() << "ASan reserves terabytes of address space: ulimit -v would stop it first";
#endif
    const fs::path out = fresh_dir("oom");
    // 3 GB of address space; GPT-2 at B=8, T=1024 needs about 7.4 GB (less than the machine
    // has, or napkin refuses it before allocating: TrainCli.BadInput).
    const CliRun r = napkin(
        "train --device cpu --model gpt2 --micro-batch 8 --seq-len 1024 --steps 1 --quiet "
        "--out " +
            out.string(),
        "ulimit -v 3000000; ");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const char* want : {"out of host memory allocating ", " GB live: parameters ",
                             "the estimator predicts a peak of ", "lower --micro-batch"}) {
        EXPECT_NE(r.err.find(want), std::string::npos) << want << " in: " << r.err;
    }
    EXPECT_FALSE(fs::exists(out / "report.json"));
}

// Ctrl-C stops after the step in progress: exit 130, the report and a checkpoint of the steps
// done, and --resume continues from there.
TEST(TrainCli, InterruptWritesTheReportAndACheckpoint) {
    const fs::path out = fresh_dir("sigint");
    fs::create_directories(out.parent_path());
    const std::string log = out.string() + ".log";
    // Interrupted once its first step line is out (the handler is in place by then).
    const std::string script =
        std::string(NAPKIN_BINARY) + " train --device cpu --steps 100000 --out " + out.string() +
        " >" + log + " 2>" + log + ".err & p=$!; " + "for i in $(seq 1200); do grep -q '^step ' " +
        log + " && break; sleep 0.05; done; kill -INT $p; wait $p; exit $?";
    const int status = std::system(script.c_str());  // sh -c
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130);
    std::ifstream err_file(log + ".err");
    const std::string err((std::istreambuf_iterator<char>(err_file)),
                          std::istreambuf_iterator<char>());
    EXPECT_NE(err.find("napkin: interrupted after step "), std::string::npos) << err;
    EXPECT_NE(err.find("continue with: napkin train --resume " + out.string()), std::string::npos)
        << err;
    ASSERT_TRUE(fs::exists(out / "report.json"));
    ASSERT_TRUE(fs::exists(out / "checkpoint.safetensors"));
    const auto steps = read_json(out / "report.json")["steps"];
    ASSERT_GE(steps.size(), 1u);
    const std::string next = std::to_string(steps.size() + 2);
    const CliRun r =
        napkin("train --resume " + out.string() + " --stop-after " + next + " --quiet");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("done: steps " + std::to_string(steps.size() + 1) + "-" + next),
              std::string::npos)
        << r.out;
}

// The final report is written to report.json.pending before the final checkpoint and renamed
// after it: a kill between the two leaves exactly the state made here, and --resume of the
// finished run writes the report (the run's own, every step) and exits 0 without training.
// Without a pending report a finished run is still refused.
TEST(TrainCli, ResumeOfAFinishedRunWritesItsMissingReport) {
    const fs::path out = fresh_dir("finished");
    ASSERT_EQ(napkin("train --steps 2 --micro-batch 2 --seq-len 16 --quiet --out " + out.string()).rc, 0);
    EXPECT_FALSE(fs::exists(out / "report.json.pending"));
    const auto report = read_json(out / "report.json");
    fs::rename(out / "report.json", out / "report.json.pending");
    const CliRun r = napkin("train --resume " + out.string());
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("the run already finished its 2 steps; wrote its report " + (out / "report.json").string()),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << r.out;  // nothing trained
    EXPECT_EQ(read_json(out / "report.json"), report);
    EXPECT_FALSE(fs::exists(out / "report.json.pending"));
    fs::remove(out / "report.json");
    const CliRun again = napkin("train --resume " + out.string());
    EXPECT_EQ(again.rc, 2);
    EXPECT_NE(again.err.find("--resume: the run already finished its 2 steps"), std::string::npos) << again.err;
    fs::remove_all(out);
}

// A stop request is checked between micro-batches: SIGINT during a step of many micro-batches
// drops that step (its gradients, its data) and writes the last whole step, which resumes bit for
// bit; a step of 10^9 micro-batches is warned about, and SIGTERM stops it at once.
TEST(TrainCli, StopRequestsAreCheckedBetweenMicroBatches) {
    const fs::path a = fresh_dir("accum_a"), b = fresh_dir("accum_b");
    const std::string common = " train --steps 2 --grad-accum 100 --micro-batch 2 --seq-len 16 --out ";
    ASSERT_EQ(napkin(common.substr(1) + a.string() + " --quiet").rc, 0);
    const std::string log = b.string() + ".log";
    const std::string script = std::string(NAPKIN_BINARY) + common + b.string() + " >" + log + " 2>" + log +
                               ".err & p=$!; for i in $(seq 1200); do grep -q '^step ' " + log +
                               " && break; sleep 0.05; done; kill -INT $p; wait $p; exit $?";
    const int status = std::system(script.c_str());  // sh -c
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130);
    const auto steps = read_json(b / "report.json")["steps"];
    ASSERT_EQ(steps.size(), 1u) << "step 2 (100 micro-batches, about 1 s in Release, several under ASan) was not stopped within one";
    ASSERT_EQ(napkin("train --resume " + b.string() + " --quiet").rc, 0);
    const auto full = read_json(a / "report.json")["steps"], resumed = read_json(b / "report.json")["steps"];
    ASSERT_EQ(resumed.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(resumed[i]["loss"].get<double>(), full[i]["loss"].get<double>());

    const fs::path c = fresh_dir("accum_c");
    const std::string forever = std::string(NAPKIN_BINARY) + " train --grad-accum 1000000000 --out " + c.string() +
                                " 2>" + c.string() + ".err & p=$!; for i in $(seq 1200); do grep -q 'warning' " +
                                c.string() + ".err && break; sleep 0.05; done; kill -TERM $p; wait $p; exit $?";
    const auto t0 = std::chrono::steady_clock::now();
    const int term = std::system(forever.c_str());
    ASSERT_TRUE(WIFEXITED(term));
    EXPECT_EQ(WEXITSTATUS(term), 143);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
    std::ifstream err_file(c.string() + ".err");
    const std::string err((std::istreambuf_iterator<char>(err_file)), std::istreambuf_iterator<char>());
    EXPECT_NE(err.find("napkin: warning: --grad-accum 1000000000: one step is 5.12e+11 tokens, at least "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("napkin: interrupted before the first step; nothing written"), std::string::npos) << err;
    fs::remove_all(a);
    fs::remove_all(b);
}

// The memory check is against the memory available now (an injected figure here, not this
// machine's), with a margin for what the prediction does not count, and says how to go on.
TEST(TrainCli, MemoryCheckIsAgainstAvailableMemoryWithAMargin) {
    const fs::path out = fresh_dir("available");
    const std::string run = "train --steps 1 --micro-batch 2 --seq-len 16 --quiet --out " + out.string();
    ::setenv("NAPKIN_TEST_AVAILABLE_BYTES", "50000000", 1);  // 50 MB: the run's 0.02 GB fits, the margin not
    const CliRun refused = napkin(run);
    EXPECT_EQ(refused.rc, 2);
    EXPECT_NE(refused.err.find("GB by napkin's prediction (B=2, T=16) plus a margin of 0.501 GB (10% and 0.5 GB a "
                               "process), more than the 0.05 GB of memory available: "),
              std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("or --force to try anyway"), std::string::npos) << refused.err;
    EXPECT_FALSE(fs::exists(out));
    const CliRun forced = napkin(run + " --force");
    ::unsetenv("NAPKIN_TEST_AVAILABLE_BYTES");
    EXPECT_EQ(forced.rc, 0) << forced.err;
    EXPECT_NE(napkin("train --help").out.find("--force"), std::string::npos);
    fs::remove_all(out);
}

// A checkpoint's data position means something only in the file it was taken in: a file changed
// under a stopped run is refused on resume, naming both fingerprints, instead of training on
// from a position in other tokens.
TEST(TrainCli, ResumeRefusesDataThatChanged) {
    const fs::path out = fresh_dir("data_changed");
    fs::create_directories(out);
    const fs::path text = out / "corpus.txt";
    {
        std::ofstream f(text);
        for (int i = 0; i < 400; ++i)
            f << "the quick brown fox jumps over the lazy dog " << i << "\n";
    }
    const std::string run = (out / "run").string();
    const std::string common =
        "train --steps 6 --micro-batch 2 --seq-len 32 --quiet --data " + text.string();
    ASSERT_EQ(napkin(common + " --stop-after 2 --out " + run).rc, 0);
    { std::ofstream(text, std::ios::app) << "one more line\n"; }
    const CliRun r = napkin("train --resume " + run + " --quiet");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("has changed since the checkpoint ("), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bytes, fnv1a64 of the first and last MiB "), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(TrainCli, BadInput) {
    const fs::path dir = fresh_dir("bad");
    fs::create_directories(dir);
    const fs::path out = dir / "run";
    expect_error("train --data /nonexistent/tokens.bin", 1, "/nonexistent/tokens.bin", out);
    std::vector<std::uint16_t> big = {1, 2, 300, 4};
    for (int i = 0; i < 500; ++i) big.push_back(5);
    write_bin(dir / "big.bin", big);
    expect_error("train --data " + (dir / "big.bin").string(), 1, "do not fit the model's vocabulary", out);
    write_bin(dir / "magic.bin", {1, 2, 3}, 12345);
    expect_error("train --data " + (dir / "magic.bin").string(), 1, "bad magic", out);
    {
        write_bin(dir / "short.bin", std::vector<std::uint16_t>(100, 3));
        fs::resize_file(dir / "short.bin", fs::file_size(dir / "short.bin") - 10);
    }
    expect_error("train --data " + (dir / "short.bin").string(), 1,
                 "header says 100 tokens, a file of 1224 bytes; it is 1214 (10 bytes missing: truncated)", out);
    {
        write_bin(dir / "long.bin", std::vector<std::uint16_t>(100, 3));
        std::ofstream(dir / "long.bin", std::ios::app | std::ios::binary) << 'x';
    }
    expect_error("train --data " + (dir / "long.bin").string(), 1,
                 "it is 1225 (1 extra bytes: a wrong count or trailing data)", out);
    {
        std::ofstream f(dir / "tiny.txt");
        f << "abc";
    }
    expect_error("train --data " + (dir / "tiny.txt").string(), 1, "fewer than one sequence", out);
    expect_error("train --seq-len 500", 2, "exceeds the model's context length 128", out);
    expect_error("train --loss-chunk -1", 2, "--loss-chunk: must be 0 (all B x T rows at once) or a positive number of rows (got -1)", out);
    // --device-profile: another device's is refused before the first step, a malformed one named.
    {
        std::ofstream f(dir / "h200.json");
        f << R"({"schema": "napkin-device-profile/1",
                 "device": {"kind": "cuda", "name": "NVIDIA H200", "gpu": "h200", "memory_bytes": 1.41e11},
                 "made": {"source": "measured", "command": "napkin calibrate --device cuda -o h200.json",
                          "build": "", "date": "2026-11-26", "conditions": ""},
                 "peak_flops_per_s": {"bf16": 9.895e14}, "memory_bytes_per_s": 4.8e12,
                 "compute": [{"threads": 0, "gemm": [], "attention": [], "streaming": [],
                              "overhead": {"op_seconds": 0, "step_seconds": 0}}],
                 "host_device": null, "collectives": [], "gaps": []})";
    }
    expect_error("train --device-profile " + (dir / "h200.json").string(), 2,
                 "--device-profile " + (dir / "h200.json").string() + ": measured on ", out);
    {
        std::ofstream f(dir / "bad_profile.json");
        f << R"({"schema": "napkin-device-profile/1", "device": {"kind": "cpu"}})";
    }
    expect_error("train --device-profile " + (dir / "bad_profile.json").string(), 1,
                 "bad_profile.json: device.name: expected a string, got nothing", out);
    expect_error("train --model nope", 2, "unknown preset 'nope'", out);
    expect_error("train --steps 0", 2, "--steps", out);
    // Numbers the optimizer would turn into NaN weights, or read as "off" without a word.
    expect_error("train --lr inf", 2, "--lr: must be a positive number", out);
    expect_error("train --lr 1e300", 2, "--lr: must be a positive number at most 3.4e38, the largest float (got 1e300)",
                 out);
    expect_error("train --weight-decay nan", 2, "--weight-decay", out);
    expect_error("train --grad-clip -1", 2, "--grad-clip", out);
    expect_error("train --grad-clip nan", 2, "--grad-clip", out);
    expect_error("train --warmup -5", 2, "--warmup", out);
    expect_error("train --seed -1", 2, "--seed: must be 0 or a positive integer (got '-1')", out);
    expect_error("train --seed 18446744073709551616", 2,
                 "--seed: must be at most 18446744073709551615, 2^64 - 1 (got '18446744073709551616')", out);
    {  // nlohmann keeps the last of two equal keys without a word
        std::ofstream f(dir / "twice.json");
        f << R"({"format": "napkin-model", "name": "a", "n_layers": 1, "n_layers": 2})";
    }
    expect_error("train --config " + (dir / "twice.json").string(), 2, "twice.json: key \"n_layers\" is given twice",
                 out);
    expect_error("train --stop-after 0", 2, "--stop-after: must be a positive step number", out);
    // More memory than any machine has: refused up front, not std::bad_alloc in the first step.
    expect_error("train --micro-batch 1000000000000", 2,
                 "GB by napkin's prediction (B=1000000000000, T=64)", out);
    // An empty path is not the flag left out.
    expect_error("train --resume ''", 2, "--resume: the path is empty", out);
    expect_error("train --data ''", 2, "--data: the path is empty", out);
    expect_error("train --init-from ''", 2, "--init-from: the path is empty", out);
    // Flags that would otherwise have no effect.
    expect_error("train --load-strategy mmap", 2, "--load-strategy: applies to --init-from only",
                 out);
    expect_error("train --load-strategy bogus", 2, "--load-strategy: unknown value 'bogus'", out);
    expect_error("train --steps 3 --profile steps:5-10", 2,
                 "--profile steps:5-10: this run trains steps 1-3", out);
    expect_error("train --device tpu", 2, "--device", out);
    expect_error("train --overlap maybe", 2, "--overlap: unknown value 'maybe' (expected auto|on|off)", out);
    expect_error("train --cuda-graph maybe", 2, "--cuda-graph: unknown value 'maybe' (expected auto|on|off)", out);
    expect_error("train --device cpu --cuda-graph on", 2, "--cuda-graph on: --device cpu: graphs are CUDA's", out);
    expect_error("train --offload disk", 2, "--offload: unknown value 'disk' (expected none|optimizer)", out);
    expect_error("train --offload optimizer+params", 2, "napkin train offloads the optimizer only", out);
    expect_error("train --device cpu --zero 1 --offload optimizer", 2, "--offload optimizer: needs --device cuda", out);
    {
        // Without a GPU, ZeRO on CUDA is the device's one-line refusal (with one, it trains).
        SCOPED_TRACE("--device cuda --zero 2");
        const CliRun z = napkin("train --device cuda --zero 2 --steps 1 --quiet --out " + out.string());
        if (z.rc != 0) {
            EXPECT_EQ(z.rc, 2);
            EXPECT_EQ(z.err.find('\n'), z.err.size() - 1) << "not one line: " << z.err;
            EXPECT_NE(z.err.find("--device cuda: no CUDA device ("), std::string::npos) << z.err;
            EXPECT_FALSE(fs::exists(out / "report.json")) << "a failed run left a report";
        }
    }
    // Refused after the folder was made: it goes again, parents included.
    {
        const fs::path nested = dir / "a" / "b" / "c";
        const CliRun z = napkin("train --zero 5 --quiet --out " + nested.string());
        EXPECT_EQ(z.rc, 2) << z.err;
        EXPECT_FALSE(fs::exists(dir / "a")) << "a refused run left " << (dir / "a");
    }
    expect_error("train --finetune half", 2, "--finetune: unknown value 'half'", out);
    expect_error("train --lora-rank 8", 2, "--lora-rank: needs --finetune lora or qlora", out);
    expect_error("train --finetune lora --lora-rank 0", 2, "--lora-rank: must be a positive integer", out);
    expect_error("train --finetune lora --lora-alpha 0", 2, "--lora-alpha: must be a positive number", out);
    expect_error("train --finetune qlora --precision fp8-amp", 2, "not with --precision fp8-amp", out);
    expect_error("train --dropout 1", 2, "--dropout: must be in [0, 1)", out);
    expect_error("train --fp8-amax-history 4", 2,
                 "--fp8-amax-history: applies to --precision fp8-amp", out);
    expect_error("train --precision fp8-amp --fp8-amax-history -1", 2,
                 "--fp8-amax-history: must be 0 (current scaling) or a number of steps", out);
    expect_error("train --comm-timeout -1", 2, "--comm-timeout", out);
    expect_error("train --comm-timeout soon", 2, "--comm-timeout", out);
    expect_error("train --comm-timeout nan", 2, "--comm-timeout", out);
    // One process has no collective to wait for: any valid timeout is accepted and unused.
    const CliRun t = napkin("train --steps 1 --quiet --comm-timeout 0.5 --out " + (dir / "t").string());
    EXPECT_EQ(t.rc, 0) << t.err;
    const CliRun r = napkin("train --steps 1 --quiet --out /proc/napkin-cannot-write");
    EXPECT_EQ(r.rc, 2);
    EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}

}  // namespace
