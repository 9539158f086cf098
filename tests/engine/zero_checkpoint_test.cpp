// Sharded checkpoints in one process (world size 1, ZeRO 1-3 sharding over one rank): a
// resumed trainer repeats the uninterrupted one bit for bit, the manifest is complete and
// matches its shards, a step folder without a manifest is ignored, damaged shards are refused
// naming the file, another world size or stage is refused pointing at napkin ckpt consolidate,
// and the consolidated file loads into a trainer of any stage (or none). Several ranks:
// tests/comm/zero_mpi_test.cpp (mpirun, labelled slow).
#include "core/engine/zero_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/durable_file.h"
#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

TrainOptions zckpt_options(Precision p, int zero) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 16;
    o.plan.precision = p;
    o.steps = 6;
    o.grad_accum = 2;
    o.optimizer.warmup_steps = 2;
    o.optimizer.total_steps = 6;
    o.optimizer.grad_clip = 0.5f;
    o.zero = zero;
    return o;
}

fs::path zckpt_dir() {
    return test::scratch_dir("napkin_zckpt_");
}

// Steps 4..6 of an uninterrupted run, with a sharded checkpoint after step 3 in `dir`.
std::vector<StepRecord> run_and_checkpoint(const TrainOptions& o, const fs::path& dir) {
    Trainer a(o);
    for (int s = 0; s < 3; ++s)
        a.step();
    save_sharded_checkpoint(dir, a);
    std::vector<StepRecord> ref;
    for (int s = 0; s < 3; ++s)
        ref.push_back(a.step());
    return ref;
}

void expect_same_steps(Trainer& b, const std::vector<StepRecord>& ref) {
    ASSERT_EQ(b.steps_done(), 3);
    for (const StepRecord& want : ref) {
        const StepRecord r = b.step();
        EXPECT_EQ(r.step, want.step);
        EXPECT_EQ(r.loss, want.loss) << "step " << r.step;
        EXPECT_EQ(r.grad_norm, want.grad_norm) << "step " << r.step;
        EXPECT_EQ(r.lr, want.lr);
    }
}

using test::error_of;
using test::expect_contains;

class ShardedResume : public testing::TestWithParam<std::tuple<int, Precision>> {};

TEST_P(ShardedResume, RepeatsTheUninterruptedRunBitForBit) {
    const auto [zero, precision] = GetParam();
    const TrainOptions o = zckpt_options(precision, zero);
    const fs::path dir = zckpt_dir();
    const std::vector<StepRecord> ref = run_and_checkpoint(o, dir);

    const std::optional<Manifest> m = last_complete_checkpoint(dir);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->step, 3);
    EXPECT_EQ(m->world, 1);
    EXPECT_EQ(m->zero, zero);
    ASSERT_EQ(m->shards.size(), 1u);
    EXPECT_EQ(m->dir, dir / "checkpoints" / "step-00000003");
    EXPECT_EQ(fs::file_size(m->dir / m->shards[0].file), m->shards[0].file_bytes);
    for (const fs::directory_entry& e : fs::directory_iterator(m->dir))
        EXPECT_FALSE(is_durable_temporary(e.path().filename().string())) << e.path();

    const CheckpointInfo info = read_shard_info(*m, 0);
    EXPECT_EQ(info.options.grad_accum, 2);
    TrainOptions resumed = info.options;
    resumed.zero = zero;
    Trainer b(resumed);
    load_sharded_checkpoint(*m, b);
    expect_same_steps(b, ref);
}

INSTANTIATE_TEST_SUITE_P(Stages, ShardedResume,
                         testing::Combine(testing::Values(1, 2, 3),
                                          testing::Values(Precision::fp32, Precision::bf16_amp)),
                         [](const auto& p) {
                             std::string n =
                                 "zero" + std::to_string(std::get<0>(p.param)) + "_" +
                                 std::string(enum_name(kPrecisionNames, std::get<1>(p.param)));
                             for (char& c : n) {
                                 if (c == '-') c = '_';
                             }
                             return n;
                         });

TEST(ShardedCheckpoint, ManifestNamesEveryShard) {
    const fs::path dir = zckpt_dir();
    Trainer t(zckpt_options(Precision::bf16_amp, 3));
    t.step();
    const fs::path step_dir = save_sharded_checkpoint(dir, t);
    std::ifstream f(step_dir / "manifest.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j["format"], "napkin-checkpoint-manifest/1");
    EXPECT_EQ(j["step"], 1);
    EXPECT_EQ(j["world"], 1);
    EXPECT_EQ(j["zero"], 3);
    EXPECT_TRUE(j["options_hash"].get<std::string>().starts_with("fnv1a64:"));
    EXPECT_EQ(j["layout"]["units"].size(), 4u);  // embedding, h.0, h.1, head
    EXPECT_EQ(j["layout"]["units"][1]["name"], "h.0");
    EXPECT_EQ(j["layout"]["states"]["weights"], "shard");
    EXPECT_EQ(j["layout"]["states"]["master"], "shard");
    ASSERT_EQ(j["shards"].size(), 1u);
    EXPECT_EQ(j["shards"][0]["file"], "rank0.safetensors");
    EXPECT_EQ(j["shards"][0]["bytes"].get<std::uint64_t>(),
              fs::file_size(step_dir / "rank0.safetensors"));
}

TEST(ShardedCheckpoint, AHalfWrittenCheckpointIsIgnored) {
    const TrainOptions o = zckpt_options(Precision::fp32, 2);
    const fs::path dir = zckpt_dir();
    const std::vector<StepRecord> ref = run_and_checkpoint(o, dir);
    // A later checkpoint whose rank died before the manifest: its shard is there, no manifest.
    const fs::path partial = dir / "checkpoints" / "step-00000005";
    fs::create_directories(partial);
    fs::copy_file(dir / "checkpoints" / "step-00000003" / "rank0.safetensors",
                  partial / "rank0.safetensors");
    std::ofstream(partial / "manifest.json.tmp-99-0123456789abcdef") << "{\"format\": ";
    const std::optional<Manifest> m = last_complete_checkpoint(dir);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->step, 3);
    Trainer b(o);
    load_sharded_checkpoint(*m, b);
    expect_same_steps(b, ref);

    // The next complete checkpoint removes the leftovers.
    save_sharded_checkpoint(dir, b);
    EXPECT_FALSE(fs::exists(partial));
    EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step-00000003"));
    EXPECT_EQ(last_complete_checkpoint(dir)->step, 6);
    EXPECT_FALSE(last_complete_checkpoint(zckpt_dir()).has_value());
}

TEST(ShardedCheckpoint, AnotherWorldSizeOrStageIsRefused) {
    const fs::path dir = zckpt_dir();
    Trainer t(zckpt_options(Precision::fp32, 3));
    t.step();
    save_sharded_checkpoint(dir, t);
    const Manifest m = *last_complete_checkpoint(dir);
    check_resumable(m, 1, 3);
    const std::string msg = error_of<UsageError>([&] { check_resumable(m, 2, 1); });
    expect_contains(msg, "1 rank at ZeRO-3, this run has 2 ranks at ZeRO-1");
    expect_contains(msg, "napkin ckpt consolidate " + dir.string());
    Trainer other(zckpt_options(Precision::fp32, 2));
    expect_contains(error_of<UsageError>([&] { load_sharded_checkpoint(m, other); }),
                    "this run has 1 rank at ZeRO-2");
}

TEST(ShardedCheckpoint, DamagedShardsAreRefusedNamingTheFile) {
    const fs::path dir = zckpt_dir();
    const TrainOptions o = zckpt_options(Precision::fp32, 1);
    Trainer t(o);
    t.step();
    const fs::path step_dir = save_sharded_checkpoint(dir, t);
    const fs::path shard = step_dir / "rank0.safetensors";
    const Manifest m = *last_complete_checkpoint(dir);
    Trainer b(o);
    {  // one byte of the data flipped: the checksum no longer matches
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 3));
        f.put('\x55');
    }
    std::string msg = error_of<InputError>([&] { load_sharded_checkpoint(m, b); });
    expect_contains(msg, shard.string());
    expect_contains(msg, "checksum mismatch");
    EXPECT_EQ(b.steps_done(), 0);
    fs::resize_file(shard, fs::file_size(shard) - 8);
    expect_contains(error_of<InputError>([&] { load_sharded_checkpoint(m, b); }), "truncated");
    fs::remove(shard);
    expect_contains(error_of<InputError>([&] { load_sharded_checkpoint(m, b); }), "cannot open");
    std::ofstream(step_dir / "manifest.json") << "{\"format\": \"napkin-checkpoint-manifest/1\"}";
    msg = error_of<InputError>([&] { last_complete_checkpoint(dir); });
    expect_contains(msg, "manifest.json");
    expect_contains(msg, "step: expected an integer >= 0, got nothing");
    // A fraction is not taken as an integer (the manifest's reader is core/json_reader.h's).
    std::ofstream(step_dir / "manifest.json")
        << "{\"format\": \"napkin-checkpoint-manifest/1\", \"step\": 2.5}";
    expect_contains(error_of<InputError>([&] { last_complete_checkpoint(dir); }),
                    "step: expected an integer >= 0, got 2.5");
}

// The consolidated file is an ordinary checkpoint: one process, and every stage, continue from
// it bit for bit (world size 1 everywhere, so the sums run in the same order... but for the
// norm at stages 1-3, compared to the plain trainer within rounding).
TEST(ShardedCheckpoint, ConsolidatedFileResumesAtAnyStage) {
    const fs::path dir = zckpt_dir();
    const TrainOptions o = zckpt_options(Precision::bf16_amp, 3);
    const std::vector<StepRecord> ref = run_and_checkpoint(o, dir);
    const fs::path file = dir / "consolidated.safetensors";
    const CheckpointInfo written =
        consolidate_checkpoint(*last_complete_checkpoint(dir), file.string());
    EXPECT_EQ(written.steps_done, 3);
    const CheckpointInfo info = read_checkpoint_info(file.string());
    EXPECT_EQ(info.steps_done, 3);
    EXPECT_EQ(info.options.grad_accum, 2);  // world 1: the ranks' own
    EXPECT_EQ(info.tensor_count, 4 * param_tensors(o.model).size());
    for (int zero = 0; zero <= 3; ++zero) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        TrainOptions r = info.options;
        r.zero = zero;
        Trainer b(r);
        load_checkpoint(file.string(), b);
        if (zero == 3) {
            expect_same_steps(b, ref);
            continue;
        }
        for (const StepRecord& want : ref) {
            const StepRecord got = b.step();
            // Stage 3 reduced each micro-batch's bf16 gradients before adding them up.
            EXPECT_NEAR(got.loss, want.loss, 2e-3 * want.loss) << "step " << got.step;
        }
    }
}

// A sharded run of `o` checkpointed after step 3: resumed from its shards it repeats steps 4-6 bit
// for bit; consolidated, the whole-state file continues them in a plain trainer and in a ZeRO-3
// one (each rank loading its shards of the file), within `tol` (relative). Returns what
// consolidation wrote.
CheckpointInfo expect_resume_and_consolidate(const TrainOptions& o, double tol) {
    const fs::path dir = zckpt_dir();
    const std::vector<StepRecord> ref = run_and_checkpoint(o, dir);
    const Manifest m = *last_complete_checkpoint(dir);
    {
        Trainer b(o);
        load_sharded_checkpoint(m, b);
        expect_same_steps(b, ref);
    }
    const fs::path file = dir / "consolidated.safetensors";
    const CheckpointInfo written = consolidate_checkpoint(m, file.string());
    for (int to : {0, 3}) {
        TrainOptions r = read_checkpoint_info(file.string()).options;
        r.zero = to;
        Trainer c(r);
        load_checkpoint(file.string(), c);
        EXPECT_EQ(c.steps_done(), 3);
        for (const StepRecord& want : ref) {
            const StepRecord got = c.step();
            EXPECT_NEAR(got.loss, want.loss, tol * want.loss) << "to ZeRO-" << to << ", step " << got.step;
        }
    }
    return written;
}

// Fine-tuning: the units hold the adapters; the frozen base (NF4 under QLoRA) is saved whole
// beside them at stages 1-2, and at stage 3 as each rank's shards of the units' frozen storage;
// the consolidated file is the whole-state checkpoint one process fine-tunes on from (every
// tensor where the loader looks).
TEST(ShardedCheckpoint, AdaptersResumeAndConsolidate) {
    for (const auto& [finetune, zero, precision] :
         {std::tuple{Finetune::qlora, 1, Precision::bf16_amp}, std::tuple{Finetune::lora, 2, Precision::fp32},
          std::tuple{Finetune::qlora, 3, Precision::bf16_amp}, std::tuple{Finetune::lora, 3, Precision::fp32}}) {
        SCOPED_TRACE(std::string(enum_name(kFinetuneNames, finetune)) + " ZeRO-" + std::to_string(zero));
        TrainOptions o = zckpt_options(precision, zero);
        o.plan.finetune = finetune;
        o.plan.lora_rank = 4;
        const CheckpointInfo written = expect_resume_and_consolidate(o, precision == Precision::fp32 ? 1e-6 : 2e-3);
        EXPECT_EQ(written.options.plan.finetune, finetune);
        EXPECT_EQ(written.options.plan.lora_rank, 4);
        // Frozen: weights (QLoRA's linears: codes and state); adapters: weights, moments, master.
        std::size_t frozen = 0, linears = 0, adapters = 0;
        for (const ParamTensor& t : param_tensors(o.model, 4)) {
            adapters += t.adapter ? 1 : 0;
            frozen += t.adapter ? 0 : 1;
            linears += t.linear_weight ? 1 : 0;
        }
        const std::size_t adapter_states = precision == Precision::fp32 ? 3 : 4;
        EXPECT_EQ(written.tensor_count,
                  frozen + (finetune == Finetune::qlora ? linears : 0) + adapters * adapter_states);
    }
}

// adamw-8bit at ZeRO 1 and 3: block-aligned shards of the codes and absmax.
TEST(ShardedCheckpoint, EightBitStatesResumeAndConsolidate) {
    for (int zero : {1, 3}) {
        SCOPED_TRACE("ZeRO-" + std::to_string(zero));
        TrainOptions o = zckpt_options(Precision::bf16_amp, zero);
        o.plan.optimizer = OptimizerKind::adamw_8bit;
        const CheckpointInfo written = expect_resume_and_consolidate(o, 2e-3);
        EXPECT_EQ(written.tensor_count, 6 * param_tensors(o.model).size());  // w, master, m, v, 2 absmax
    }
}

}  // namespace
}  // namespace napkin
