// Checkpoints: a resumed run repeats the uninterrupted one bit for bit (every recipe that keeps
// a different set of tensors), the file is valid safetensors read back by hand, and every
// damaged or mismatched file is refused with a one-line InputError naming it, before the
// trainer is touched.
#include "core/engine/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/durable_file.h"
#include "core/engine/trainer.h"
#include "tests/engine/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

TrainOptions tiny_options(Precision precision, OptimizerKind optimizer) {
    TrainOptions o;
    o.model = preset_or_throw("tiny");
    o.plan.micro_batch = 2;
    o.plan.seq_len = 32;
    o.plan.precision = precision;
    o.plan.optimizer = optimizer;
    o.steps = 6;
    o.optimizer.lr = 3e-3f;
    o.optimizer.warmup_steps = 2;
    o.optimizer.total_steps = 6;
    o.loss_scale_window = 2;  // fp16: the loss scale changes within the run
    return o;
}

fs::path scratch_dir() {
    return test::scratch_dir("napkin_ckpt_");
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// The file split as safetensors defines it.
struct ParsedSafetensors {
    std::uint64_t header_bytes = 0;
    ojson header;
    std::string data;
};

ParsedSafetensors parse_safetensors(const std::string& bytes) {
    ParsedSafetensors f;
    EXPECT_GE(bytes.size(), 8u);
    for (int i = 7; i >= 0; --i)
        f.header_bytes =
            (f.header_bytes << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
    f.header = ojson::parse(bytes.substr(8, static_cast<std::size_t>(f.header_bytes)));
    f.data = bytes.substr(8 + static_cast<std::size_t>(f.header_bytes));
    return f;
}

std::string serialize_safetensors(const ojson& header, const std::string& data) {
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[static_cast<std::size_t>(i)] = static_cast<char>(text.size() >> (8 * i));
    return out + text + data;
}

// Rewrites the header of the checkpoint at `p`, keeping its data section. The header checksum
// goes with the edit, as in a file of napkin before it (or of another writer), so that the checks
// behind it are reached; `keep_header_checksum` keeps it, as a bit flip on disk would.
template <class F>
void edit_header(const fs::path& p, F&& edit, bool keep_header_checksum = false) {
    ParsedSafetensors f = parse_safetensors(read_bytes(p));
    edit(f.header);
    if (!keep_header_checksum && f.header.contains("__metadata__"))
        f.header["__metadata__"].erase("header_checksum");
    write_bytes(p, serialize_safetensors(f.header, f.data));
}

template <class F>
std::string input_error(F&& fn) {
    return test::error_of<InputError>(fn);
}
using test::expect_contains;

// Every byte of state a checkpoint holds.
std::string state_bytes(Trainer& t) {
    std::string out;
    auto add = [&](const Tensor& x) {
        if (!x.empty()) out.append(static_cast<const char*>(x.raw()), x.bytes());
    };
    for (const ParamSlot& p : t.model().params()) {
        add(p.weight);
        add(p.quant);  // QLoRA's NF4 state
        add(p.master);
    }
    for (const Tensor& m : t.optimizer().first_moments())
        add(m);
    for (const Tensor& v : t.optimizer().second_moments())
        add(v);
    for (const Tensor& s : t.optimizer().first_moment_absmax())  // adamw-8bit
        add(s);
    for (const Tensor& s : t.optimizer().second_moment_absmax())
        add(s);
    return out;
}

struct Recipe {
    Precision precision;
    OptimizerKind optimizer;
    Finetune finetune = Finetune::full;
    double dropout = 0.0;  // with naive attention
};

class CheckpointResume : public testing::TestWithParam<Recipe> {};

// The acceptance: steps 4..6 after a reload equal those of the uninterrupted run.
TEST_P(CheckpointResume, RepeatsTheUninterruptedRunBitForBit) {
    TrainOptions o = tiny_options(GetParam().precision, GetParam().optimizer);
    o.plan.finetune = GetParam().finetune;
    if (GetParam().dropout > 0) {
        o.model.dropout = GetParam().dropout;
        o.plan.attention = AttentionImpl::naive;
    }
    if (o.plan.finetune != Finetune::full) {
        o.plan.lora_rank = 4;
        o.plan.lora_alpha = 8.0f;
    }
    const fs::path path = scratch_dir() / "ckpt.safetensors";
    Trainer a(o);
    for (int s = 0; s < 3; ++s)
        a.step();
    save_checkpoint(path.string(), a);
    for (const fs::directory_entry& e : fs::directory_iterator(path.parent_path()))
        EXPECT_FALSE(is_durable_temporary(e.path().filename().string())) << e.path();
    std::vector<StepRecord> ref;
    for (int s = 0; s < 3; ++s)
        ref.push_back(a.step());

    Trainer b(o);
    load_checkpoint(path.string(), b);
    EXPECT_EQ(b.steps_done(), 3);
    for (int s = 0; s < 3; ++s) {
        const StepRecord r = b.step();
        EXPECT_EQ(r.step, ref[static_cast<std::size_t>(s)].step);
        EXPECT_EQ(r.loss, ref[static_cast<std::size_t>(s)].loss) << "step " << r.step;
        EXPECT_EQ(r.lr, ref[static_cast<std::size_t>(s)].lr);
        EXPECT_EQ(r.grad_norm, ref[static_cast<std::size_t>(s)].grad_norm);
        EXPECT_EQ(r.loss_scale, ref[static_cast<std::size_t>(s)].loss_scale);
    }
    EXPECT_TRUE(state_bytes(a) == state_bytes(b))
        << "weights, masters or moments differ after 6 steps";
    EXPECT_EQ(a.optimizer().update_count(), b.optimizer().update_count());
    EXPECT_EQ(a.data().position(), b.data().position());
    EXPECT_EQ(a.good_steps(), b.good_steps());
}

INSTANTIATE_TEST_SUITE_P(Recipes, CheckpointResume,
                         testing::Values(Recipe{Precision::fp32, OptimizerKind::adamw},
                                         Recipe{Precision::bf16_amp, OptimizerKind::adamw},
                                         Recipe{Precision::fp16_amp, OptimizerKind::adam},
                                         Recipe{Precision::bf16, OptimizerKind::momentum},
                                         Recipe{Precision::fp8_amp, OptimizerKind::adamw},
                                         Recipe{Precision::fp32, OptimizerKind::sgd},
                                         Recipe{Precision::bf16_amp, OptimizerKind::adamw_8bit},
                                         Recipe{Precision::fp32, OptimizerKind::adamw, Finetune::full, 0.1},
                                         Recipe{Precision::bf16_amp, OptimizerKind::adamw, Finetune::lora},
                                         Recipe{Precision::fp16_amp, OptimizerKind::adam, Finetune::qlora},
                                         Recipe{Precision::fp32, OptimizerKind::adamw, Finetune::qlora}),
                         [](const testing::TestParamInfo<Recipe>& p) {
                             std::string n =
                                 std::string(enum_name(kPrecisionNames, p.param.precision)) + "_" +
                                 std::string(enum_name(kOptimizerNames, p.param.optimizer));
                             if (p.param.finetune != Finetune::full)
                                 n += "_" + std::string(enum_name(kFinetuneNames, p.param.finetune));
                             if (p.param.dropout > 0) n += "_dropout";
                             for (char& c : n) {
                                 if (c == '-') c = '_';
                             }
                             return n;
                         });

// `napkin train --resume`: the Trainer is built from the checkpoint's own options.
TEST(CheckpointFile, InfoRebuildsTheRunsOptions) {
    TrainOptions o = tiny_options(Precision::bf16_amp, OptimizerKind::adamw);
    o.grad_accum = 2;
    o.seed = 42;
    o.optimizer.lr = 1.2345e-3f;
    o.optimizer.eps = 1e-7f;
    o.plan.attention = AttentionImpl::naive;
    o.plan.checkpointing = Checkpointing::full;
    const fs::path path = scratch_dir() / "ckpt.safetensors";
    Trainer a(o);
    for (int s = 0; s < 2; ++s)
        a.step();
    save_checkpoint(path.string(), a);
    const float next_loss = a.step().loss;

    const CheckpointInfo info = read_checkpoint_info(path.string());
    EXPECT_EQ(model_config_to_json(info.options.model), model_config_to_json(o.model));
    EXPECT_EQ(info.options.plan.micro_batch, 2);
    EXPECT_EQ(info.options.plan.seq_len, 32);
    EXPECT_EQ(info.options.plan.precision, Precision::bf16_amp);
    EXPECT_EQ(info.options.plan.optimizer, OptimizerKind::adamw);
    EXPECT_EQ(info.options.plan.attention, AttentionImpl::naive);
    EXPECT_EQ(info.options.plan.checkpointing, Checkpointing::full);
    EXPECT_EQ(info.options.plan.loss_chunk_rows, o.plan.loss_chunk_rows);
    EXPECT_EQ(info.options.grad_accum, 2);
    EXPECT_EQ(info.options.seed, 42u);
    EXPECT_EQ(info.options.steps, 6);
    EXPECT_EQ(info.options.data, "");
    EXPECT_EQ(info.options.optimizer.lr, 1.2345e-3f);
    EXPECT_EQ(info.options.optimizer.eps, 1e-7f);
    EXPECT_EQ(info.options.optimizer.beta2, o.optimizer.beta2);
    EXPECT_EQ(info.options.optimizer.min_lr_frac, o.optimizer.min_lr_frac);
    EXPECT_EQ(info.options.optimizer.warmup_steps, 2);
    EXPECT_EQ(info.options.optimizer.total_steps, 6);
    EXPECT_EQ(info.options.loss_scale_window, 2);
    EXPECT_EQ(info.steps_done, 2);
    EXPECT_EQ(info.update_count, 2);
    EXPECT_EQ(info.data_position, 2u * 2u * 2u * 32u);  // steps * G * B * T tokens
    EXPECT_EQ(info.loss_scale, 1.0f);

    Trainer b(info.options);
    load_checkpoint(path.string(), b);
    EXPECT_EQ(b.step().loss, next_loss);
}

// The file read back by hand against the safetensors definition.
TEST(CheckpointFile, IsValidSafetensors) {
    const TrainOptions o = tiny_options(Precision::bf16_amp, OptimizerKind::adamw);
    const fs::path path = scratch_dir() / "ckpt.safetensors";
    Trainer t(o);
    t.step();
    save_checkpoint(path.string(), t);
    const std::string bytes = read_bytes(path);
    const ParsedSafetensors f = parse_safetensors(bytes);
    EXPECT_EQ(f.header_bytes % 8, 0u) << "the data section starts 8-byte aligned";
    ASSERT_TRUE(f.header.contains("__metadata__"));
    const ojson& meta = f.header["__metadata__"];
    for (const auto& [key, value] : meta.items())
        EXPECT_TRUE(value.is_string()) << key;
    EXPECT_EQ(meta["format"], "napkin-checkpoint/1");
    EXPECT_EQ(meta["precision"], "bf16-amp");
    EXPECT_EQ(meta["optimizer"], "adamw");
    EXPECT_EQ(meta["step"], "1");
    EXPECT_EQ(meta["data_bytes"], std::to_string(f.data.size()));
    char hex[32];
    std::snprintf(hex, sizeof hex, "fnv1a64:%016llx",
                  static_cast<unsigned long long>(fnv1a64(f.data.data(), f.data.size())));
    EXPECT_EQ(meta["checksum"], hex);

    // Every parameter with its master and both moments; the tensors tile the data section and
    // the 4-byte ones come first, so each starts aligned to its element size.
    const std::vector<ParamSlot>& params = t.model().params();
    EXPECT_EQ(f.header.size(), 1 + 4 * params.size());
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& [name, v] : f.header.items()) {
        if (name == "__metadata__") continue;
        const std::uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
        const std::uint64_t elem = v["dtype"] == "F32" ? 4 : 2;
        EXPECT_EQ(begin % elem, 0u) << name;
        std::uint64_t numel = 1;
        for (const auto& d : v["shape"])
            numel *= d.get<std::uint64_t>();
        EXPECT_EQ(end - begin, numel * elem) << name;
        spans.emplace_back(begin, end);
    }
    std::sort(spans.begin(), spans.end());
    std::uint64_t at = 0;
    for (const auto& [begin, end] : spans) {
        EXPECT_EQ(begin, at);
        at = end;
    }
    EXPECT_EQ(at, f.data.size());

    const ojson& wte = f.header["wte"];
    EXPECT_EQ(wte["dtype"], "BF16");
    EXPECT_EQ(wte["shape"], ojson::array({256, 128}));
    EXPECT_EQ(f.header["wte.master"]["dtype"], "F32");
    EXPECT_EQ(f.header["wte.opt.m"]["dtype"], "F32");
    EXPECT_EQ(f.header["h.1.attn.qkv.weight"]["shape"], ojson::array({384, 128}));
    const std::uint64_t begin = wte["data_offsets"][0];
    EXPECT_EQ(std::memcmp(f.data.data() + begin, params[0].weight.raw(), params[0].weight.bytes()),
              0);
    EXPECT_EQ(params[0].name, "wte");
}

TEST(CheckpointFile, Fnv1a64KnownValues) {
    EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ull);
    EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
}

TEST(CheckpointFile, SaveReplacesAtomicallyAndCleansUp) {
    const fs::path dir = scratch_dir();
    const fs::path path = dir / "ckpt.safetensors";
    Trainer t(tiny_options(Precision::fp32, OptimizerKind::adamw));
    save_checkpoint(path.string(), t);
    t.step();
    save_checkpoint(path.string(), t);  // over the old one
    EXPECT_EQ(read_checkpoint_info(path.string()).steps_done, 1);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1)
        << "a .tmp left behind";

    // A folder that does not exist: nothing is created.
    const fs::path missing = dir / "no-such-folder" / "ckpt.safetensors";
    const std::string msg = input_error([&] { save_checkpoint(missing.string(), t); });
    expect_contains(msg, missing.string());
    EXPECT_FALSE(fs::exists(missing.parent_path()));

    // The target is a non-empty folder: the rename fails, the temporary file goes, the folder
    // stays.
    const fs::path busy = dir / "busy";
    fs::create_directories(busy / "inside");
    expect_contains(input_error([&] { save_checkpoint(busy.string(), t); }), "cannot rename");
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2)
        << "a temporary left beside ckpt.safetensors and busy/";
    EXPECT_TRUE(fs::is_directory(busy / "inside"));
}

class CheckpointRefuses : public testing::Test {
protected:
    void SetUp() override {
        path_ = scratch_dir() / "ckpt.safetensors";
        Trainer a(tiny_options(Precision::fp32, OptimizerKind::adamw));
        a.step();
        save_checkpoint(path_.string(), a);
        bytes_ = read_bytes(path_);
        trainer_ = std::make_unique<Trainer>(tiny_options(Precision::fp32, OptimizerKind::adamw));
        before_ = state_bytes(*trainer_);
    }
    // The error loading into the fp32 trainer, which must be left as it was.
    std::string load_error() {
        const std::string msg = input_error([&] { load_checkpoint(path_.string(), *trainer_); });
        expect_contains(msg, path_.string());
        EXPECT_TRUE(state_bytes(*trainer_) == before_) << "a refused load changed the trainer";
        EXPECT_EQ(trainer_->steps_done(), 0);
        return msg;
    }

    fs::path path_;
    std::string bytes_;
    std::unique_ptr<Trainer> trainer_;
    std::string before_;
};

TEST_F(CheckpointRefuses, CorruptData) {
    const ParsedSafetensors f = parse_safetensors(bytes_);
    std::string b = bytes_;
    b[8 + f.header_bytes + f.data.size() / 2] ^= 0x01;
    write_bytes(path_, b);
    expect_contains(load_error(), "checksum mismatch");
}

TEST_F(CheckpointRefuses, Truncated) {
    write_bytes(path_, bytes_.substr(0, bytes_.size() - 100));
    expect_contains(load_error(), "truncated");
    expect_contains(input_error([&] { read_checkpoint_info(path_.string()); }), "truncated");
    write_bytes(path_, bytes_.substr(0, 200));  // inside the header
    expect_contains(load_error(), "truncated");
    write_bytes(path_, bytes_.substr(0, 5));
    expect_contains(load_error(), "truncated");
    write_bytes(path_, "");
    expect_contains(load_error(), "truncated");
}

TEST_F(CheckpointRefuses, TrailingBytes) {
    write_bytes(path_, bytes_ + "extra");
    expect_contains(load_error(), "size mismatch");
}

TEST_F(CheckpointRefuses, MissingFile) {
    fs::remove(path_);
    expect_contains(load_error(), "cannot open");
    expect_contains(input_error([&] { read_checkpoint_info(path_.string()); }), "cannot open");
}

TEST_F(CheckpointRefuses, HeaderNotJson) {
    std::string b = bytes_;
    b[8] = '#';
    write_bytes(path_, b);
    expect_contains(load_error(), "not valid JSON");
}

TEST_F(CheckpointRefuses, HeaderLengthImplausible) {
    std::string b = bytes_;
    b[7] = '\x7f';
    write_bytes(path_, b);
    expect_contains(load_error(), "not a safetensors file");
}

TEST_F(CheckpointRefuses, WrongFormat) {
    edit_header(path_, [](ojson& h) { h["__metadata__"]["format"] = "napkin-checkpoint/0"; });
    expect_contains(load_error(), "not a napkin checkpoint");
    edit_header(path_, [](ojson& h) { h.erase("__metadata__"); });
    expect_contains(load_error(), "not a napkin checkpoint");
}

TEST_F(CheckpointRefuses, BadMetadata) {
    edit_header(path_, [](ojson& h) { h["__metadata__"]["step"] = "three"; });
    expect_contains(load_error(), "metadata key 'step': expected an integer");
    write_bytes(path_, bytes_);
    edit_header(path_, [](ojson& h) { h["__metadata__"].erase("data_position"); });
    expect_contains(load_error(), "metadata key 'data_position' missing");
    write_bytes(path_, bytes_);
    edit_header(path_,
                [](ojson& h) { h["__metadata__"]["model"] = "{\"format\": \"napkin-model\"}"; });
    expect_contains(load_error(), "metadata key 'model'");
    // Values that parse but that no run writes: blamed on the field, not on what they would
    // break later (NaN gradients, the trainer's --lora-rank).
    write_bytes(path_, bytes_);
    edit_header(path_, [](ojson& h) { h["__metadata__"]["lr"] = "nan"; });
    expect_contains(load_error(), "metadata key 'lr': expected a finite number (got \"nan\")");
    write_bytes(path_, bytes_);
    edit_header(path_, [](ojson& h) { h["__metadata__"]["finetune"] = "qlora"; });
    expect_contains(input_error([&] { read_checkpoint_info(path_.string()); }),
                    "metadata key 'lora_rank': expected an integer >= 1 with finetune 'qlora' (got ");
}

// A value of the header changed under its checksum (the file's own bytes edited): refused before
// the state is touched, even where the new value is a valid one.
TEST_F(CheckpointRefuses, HeaderChangedUnderItsChecksum) {
    for (const char* key : {"step", "lr", "eps", "grad_clip"}) {
        write_bytes(path_, bytes_);
        edit_header(
            path_, [&](ojson& h) { h["__metadata__"][key] = "2"; }, true);
        expect_contains(load_error(), "header checksum mismatch");
        expect_contains(input_error([&] { read_checkpoint_info(path_.string()); }),
                        "header checksum mismatch");
    }
    write_bytes(path_, bytes_);
    edit_header(
        path_,
        [](ojson& h) {
            h["wte"]["shape"] = ojson::array({128, 256});
        },
        true);
    expect_contains(load_error(), "header checksum mismatch");
}

TEST_F(CheckpointRefuses, MissingTensor) {
    edit_header(path_, [](ojson& h) {
        h["wte_renamed"] = h["wte"];
        h.erase("wte");
    });
    expect_contains(load_error(), "tensor 'wte' missing");
}

TEST_F(CheckpointRefuses, WrongDtypeOrShape) {
    const std::string name = "h.0.ln_1.weight";
    edit_header(path_, [&](ojson& h) {
        h[name]["dtype"] = "BF16";
        h[name]["shape"] = ojson::array({2, 128});
    });
    expect_contains(load_error(), "tensor '" + name + "': dtype BF16, the trainer's is F32");
    write_bytes(path_, bytes_);
    edit_header(path_, [&](ojson& h) { h[name]["shape"] = ojson::array({1, 128}); });
    expect_contains(load_error(), "tensor '" + name + "': shape [1, 128], the trainer's is [128]");
    write_bytes(path_, bytes_);
    edit_header(path_, [&](ojson& h) { h[name]["shape"] = ojson::array({64}); });
    expect_contains(load_error(), "data_offsets span 512 bytes");
}

TEST_F(CheckpointRefuses, UnexpectedTensor) {
    // One tensor more at the end of the data section; sizes consistent, so only its name is wrong.
    ParsedSafetensors f = parse_safetensors(bytes_);
    const std::uint64_t end = f.data.size();
    f.header["stray"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {end, end + 8}}};
    f.header["__metadata__"]["data_bytes"] = std::to_string(end + 8);
    f.header["__metadata__"].erase("header_checksum");  // as edit_header does
    write_bytes(path_, serialize_safetensors(f.header, f.data + std::string(8, '\0')));
    expect_contains(load_error(), "unexpected tensor 'stray'");
}

TEST_F(CheckpointRefuses, AnotherModel) {
    TrainOptions o = tiny_options(Precision::fp32, OptimizerKind::adamw);
    o.model.n_layers = 3;
    o.model.name = "tiny-3";
    Trainer other(o);
    const std::string msg = input_error([&] { load_checkpoint(path_.string(), other); });
    expect_contains(msg, "model differs");
    expect_contains(msg, "n_layers 2 (checkpoint) vs 3 (trainer)");
    EXPECT_EQ(msg.find("name"), std::string::npos) << "the name is not a shape: " << msg;
}

TEST_F(CheckpointRefuses, AnotherPrecision) {
    Trainer other(tiny_options(Precision::bf16_amp, OptimizerKind::adamw));
    expect_contains(input_error([&] { load_checkpoint(path_.string(), other); }),
                    "precision differs: fp32 (checkpoint) vs bf16-amp (trainer)");
}

TEST_F(CheckpointRefuses, AnotherOptimizer) {
    Trainer other(tiny_options(Precision::fp32, OptimizerKind::sgd));
    expect_contains(input_error([&] { load_checkpoint(path_.string(), other); }),
                    "optimizer differs: adamw (checkpoint) vs sgd (trainer)");
}

TEST_F(CheckpointRefuses, AnotherFinetuneOrRank) {
    TrainOptions o = tiny_options(Precision::fp32, OptimizerKind::adamw);
    o.plan.finetune = Finetune::lora;
    o.plan.lora_rank = 4;
    o.plan.lora_alpha = 4.0f;
    Trainer lora(o);
    expect_contains(input_error([&] { load_checkpoint(path_.string(), lora); }),
                    "finetune differs: full (checkpoint) vs lora (trainer)");
    // A LoRA checkpoint keeps its recipe; another rank is refused.
    const fs::path lora_path = scratch_dir() / "lora.safetensors";
    save_checkpoint(lora_path.string(), lora);
    const CheckpointInfo info = read_checkpoint_info(lora_path.string());
    EXPECT_EQ(info.options.plan.finetune, Finetune::lora);
    EXPECT_EQ(info.options.plan.lora_rank, 4);
    EXPECT_EQ(info.options.plan.lora_alpha, 4.0f);
    o.plan.lora_rank = 8;
    Trainer rank8(o);
    expect_contains(input_error([&] { load_checkpoint(lora_path.string(), rank8); }),
                    "lora rank differs: 4 (checkpoint) vs 8 (trainer)");
}

}  // namespace
}  // namespace napkin
