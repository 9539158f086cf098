// GPT-2 weight import (core/engine/weights_import.h) and the safetensors reader beneath it
// (core/safetensors.h): random weights written in llm.c's format (fp32 v3, bf16 v5) and as a
// Hugging Face GPT-2 safetensors file (Conv1D (in, out) weights, with and without the
// "transformer." prefix, F32/BF16/F16, aligned and unaligned data), imported with every load
// strategy and compared parameter by parameter; the shape read back from each file; the errors,
// each an InputError naming the file; and napkin's own checkpoints as the weights of a new run
// (any architecture, full or with adapters on top), a fine-tuning checkpoint refused.
#include "core/engine/weights_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/engine/checkpoint.h"
#include "core/engine/trainer.h"
#include "core/half.h"
#include "core/safetensors.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;
using Weights = std::map<std::string, std::vector<float>>;  // napkin layout, by parameter name

constexpr std::array kStrategies = {LoadStrategy::read_all, LoadStrategy::sequential,
                                    LoadStrategy::mmap};

ModelConfig small_gpt2(int layers = 2, std::int64_t C = 32, int heads = 4, std::int64_t V = 50,
                       std::int64_t Vp = 64, std::int64_t ctx = 16) {
    ModelConfig c;
    c.name = "test";
    c.vocab_size = V;
    c.padded_vocab_size = Vp;
    c.context_length = ctx;
    c.n_layers = layers;
    c.d_model = C;
    c.n_heads = heads;
    c.n_kv_heads = heads;
    c.d_ff = 4 * C;
    return c;  // layernorm, learned positions, gelu, bias, tied: the defaults
}

struct Engine {
    HostMemory host;
    AccountingAllocator alloc{host};
    std::unique_ptr<Gpt> model;
    explicit Engine(const ModelConfig& cfg, std::uint64_t seed = 7) {
        PlanInputs in;
        in.micro_batch = 1;
        in.seq_len = 8;
        in.precision = Precision::fp32;
        model = Gpt::create(cfg, in, alloc, seed);
    }
    std::vector<float> param(const std::string& name) const {
        for (std::size_t i = 0; i < model->params().size(); ++i) {
            if (model->params()[i].name == name) {
                std::vector<float> v(static_cast<std::size_t>(model->params()[i].numel));
                model->get_param(i, v.data());
                return v;
            }
        }
        ADD_FAILURE() << "no parameter " << name;
        return {};
    }
};

// Random values for every parameter; wte gets `wte_rows` rows (what the file holds).
Weights random_weights(const ModelConfig& cfg, std::int64_t wte_rows, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    Weights w;
    for (const ParamTensor& t : param_tensors(cfg)) {
        const std::int64_t n = t.name == "wte" ? wte_rows * cfg.d_model : t.numel();
        auto& v = w[t.name];
        for (std::int64_t i = 0; i < n; ++i) {
            v.push_back(dist(rng));
        }
    }
    return w;
}

float round_to(const std::string& dtype, float x) {
    if (dtype == "BF16") return static_cast<float>(bf16_t(x));
    if (dtype == "F16") return static_cast<float>(f16_t(x));
    return x;
}

std::vector<unsigned char> encode(const std::vector<float>& v, const std::string& dtype) {
    std::vector<unsigned char> out;
    for (float x : v) {
        unsigned char b[4];
        if (dtype == "F32") {
            std::memcpy(b, &x, 4);
            out.insert(out.end(), b, b + 4);
        } else {
            const std::uint16_t bits =
                dtype == "BF16" ? bf16_t(x).bits : std::bit_cast<std::uint16_t>(f16_t(x));
            std::memcpy(b, &bits, 2);
            out.insert(out.end(), b, b + 2);
        }
    }
    return out;
}

std::vector<float> transposed(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
    std::vector<float> t(v.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            t[static_cast<std::size_t>(c * rows + r)] = v[static_cast<std::size_t>(r * cols + c)];
        }
    }
    return t;
}

// ---- llm.c files ----

struct LlmcSpec {
    int version = 3;
    std::int64_t Vp = 64;  // rows of wte in the file
    std::int32_t magic = 20240326;
};

void write_llmc(const fs::path& path, const ModelConfig& cfg, const Weights& w,
                const LlmcSpec& spec) {
    std::int32_t h[256] = {};
    h[0] = spec.magic;
    h[1] = spec.version;
    h[2] = static_cast<std::int32_t>(cfg.context_length);
    h[3] = static_cast<std::int32_t>(cfg.vocab_size);
    h[4] = cfg.n_layers;
    h[5] = cfg.n_heads;
    h[6] = static_cast<std::int32_t>(cfg.d_model);
    h[7] = static_cast<std::int32_t>(spec.Vp);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(h), sizeof h);
    const std::string dtype = spec.version == 5 ? "BF16" : "F32";
    auto put = [&](const std::string& name) {
        const auto bytes = encode(w.at(name), dtype);
        out.write(reinterpret_cast<const char*>(bytes.data()),
                  static_cast<std::streamsize>(bytes.size()));
    };
    put("wte");
    put("wpe");
    for (const char* kind : {"ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias",
                             "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias",
                             "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"}) {
        for (int l = 0; l < cfg.n_layers; ++l) {
            put("h." + std::to_string(l) + "." + kind);
        }
    }
    put("ln_f.weight");
    put("ln_f.bias");
}

// Every parameter equals the written value rounded to `dtype`; wte rows past the file's are 0.
void expect_weights(const Engine& e, const Weights& w, const std::string& dtype) {
    const std::int64_t C = e.model->plan().config->d_model;
    for (const ParamSlot& p : e.model->params()) {
        const std::vector<float> got = e.param(p.name);
        const std::vector<float>& src = w.at(p.name);
        int mismatches = 0;
        for (std::size_t k = 0; k < got.size(); ++k) {
            const float want = k < src.size() ? round_to(dtype, src[k]) : 0.0f;
            if (got[k] != want && ++mismatches <= 3) {
                ADD_FAILURE() << p.name << "[" << k << "] (row " << static_cast<std::int64_t>(k) / C
                              << "): got " << got[k] << ", want " << want;
            }
        }
        EXPECT_EQ(mismatches, 0) << p.name;
    }
}

// ---- safetensors files ----

struct StEntry {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
    std::vector<unsigned char> bytes;
};

// Header padded with spaces to a multiple of 8 when `aligned`, else left as is (so F32 data
// may start at an odd address).
void write_safetensors(const fs::path& path, const std::vector<StEntry>& entries,
                       const nlohmann::json& metadata, bool aligned = true) {
    nlohmann::ordered_json h;
    if (!metadata.is_null()) h["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const StEntry& e : entries) {
        h[e.name] = {{"dtype", e.dtype},
                     {"shape", e.shape},
                     {"data_offsets", {offset, offset + e.bytes.size()}}};
        offset += e.bytes.size();
    }
    std::string text = h.dump();
    if (aligned) {
        text.append((8 - text.size() % 8) % 8, ' ');
    } else if (text.size() % 4 == 0) {
        text += ' ';
    }
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << text;
    for (const StEntry& e : entries) {
        out.write(reinterpret_cast<const char*>(e.bytes.data()),
                  static_cast<std::streamsize>(e.bytes.size()));
    }
}

struct HfSpec {
    std::string dtype = "F32";
    std::string prefix;
    bool lm_head = false;  // a tied copy of wte
    bool aligned = true;
    bool reversed = false;  // data in reverse order: wte last, after larger tensors
};

// Hugging Face's GPT-2 layout from napkin-layout weights (wte holding V rows).
std::vector<StEntry> hf_entries(const ModelConfig& cfg, const Weights& w, const HfSpec& spec) {
    const std::int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.context_length;
    std::vector<StEntry> out;
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape,
                   const std::vector<float>& v) {
        out.push_back(
            StEntry{spec.prefix + name, spec.dtype, std::move(shape), encode(v, spec.dtype)});
    };
    add("wte.weight", {V, C}, w.at("wte"));
    add("wpe.weight", {T, C}, w.at("wpe"));
    for (int l = 0; l < cfg.n_layers; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        add(p + "ln_1.weight", {C}, w.at(p + "ln_1.weight"));
        add(p + "ln_1.bias", {C}, w.at(p + "ln_1.bias"));
        // The causal mask buffer, as older transformers saved it: not a parameter.
        out.push_back(StEntry{spec.prefix + p + "attn.bias",
                              "BOOL",
                              {1, 1, T, T},
                              std::vector<unsigned char>(static_cast<std::size_t>(T * T), 1)});
        add(p + "attn.c_attn.weight", {C, 3 * C},
            transposed(w.at(p + "attn.qkv.weight"), 3 * C, C));
        add(p + "attn.c_attn.bias", {3 * C}, w.at(p + "attn.qkv.bias"));
        add(p + "attn.c_proj.weight", {C, C}, transposed(w.at(p + "attn.proj.weight"), C, C));
        add(p + "attn.c_proj.bias", {C}, w.at(p + "attn.proj.bias"));
        add(p + "attn.masked_bias", {}, {-1e4f});
        add(p + "ln_2.weight", {C}, w.at(p + "ln_2.weight"));
        add(p + "ln_2.bias", {C}, w.at(p + "ln_2.bias"));
        add(p + "mlp.c_fc.weight", {C, 4 * C}, transposed(w.at(p + "mlp.fc.weight"), 4 * C, C));
        add(p + "mlp.c_fc.bias", {4 * C}, w.at(p + "mlp.fc.bias"));
        add(p + "mlp.c_proj.weight", {4 * C, C}, transposed(w.at(p + "mlp.proj.weight"), C, 4 * C));
        add(p + "mlp.c_proj.bias", {C}, w.at(p + "mlp.proj.bias"));
    }
    add("ln_f.weight", {C}, w.at("ln_f.weight"));
    add("ln_f.bias", {C}, w.at("ln_f.bias"));
    if (spec.lm_head) {
        out.push_back(
            StEntry{"lm_head.weight", spec.dtype, {V, C}, encode(w.at("wte"), spec.dtype)});
    }
    if (spec.reversed) std::reverse(out.begin(), out.end());
    return out;
}

StEntry& entry(std::vector<StEntry>& entries, const std::string& name) {
    for (StEntry& e : entries) {
        if (e.name == name) return e;
    }
    throw std::runtime_error("test: no entry " + name);
}

// Raw bytes: an 8-byte length (possibly lying) and a header text, then `data`.
void write_raw(const fs::path& path, std::uint64_t length, const std::string& header,
               std::size_t data_bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << std::string(data_bytes, '\0');
}

class WeightsImport : public testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("napkin_weights_" + std::to_string(::getpid()) + "_" +
                testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string file(const std::string& name) const { return (dir_ / name).string(); }

    // Calls fn, expects an InputError whose message starts with the path and contains `what`.
    template <class F>
    void expect_input_error(const std::string& path, const std::string& what, F fn) {
        try {
            fn();
            ADD_FAILURE() << "no InputError, expected one containing '" << what << "'";
        } catch (const InputError& e) {
            const std::string msg = e.what();
            EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
            EXPECT_NE(msg.find(what), std::string::npos) << msg;
        }
    }

    fs::path dir_;
};

TEST_F(WeightsImport, LlmcEveryVersionPaddingAndStrategy) {
    const ModelConfig cfg = small_gpt2();
    // The file's Vp equal to, above and below the model's 64 (50 = V: no padding rows at all).
    for (const LlmcSpec spec :
         {LlmcSpec{3, 64}, LlmcSpec{5, 64}, LlmcSpec{3, 80}, LlmcSpec{5, 50}}) {
        const Weights w = random_weights(cfg, spec.Vp, 11);
        const std::string path =
            file("model_v" + std::to_string(spec.version) + "_" + std::to_string(spec.Vp) + ".bin");
        write_llmc(path, cfg, w, spec);
        for (LoadStrategy s : kStrategies) {
            SCOPED_TRACE(path + " " + std::string(enum_name(kLoadStrategyNames, s)));
            Engine e(cfg);
            const ImportReport r = import_weights(path, *e.model, s);
            EXPECT_EQ(r.format, "llm.c");
            EXPECT_EQ(r.tensors, static_cast<std::int64_t>(e.model->params().size()));
            expect_weights(e, w, spec.version == 5 ? "BF16" : "F32");
        }
    }
}

TEST_F(WeightsImport, SafetensorsTransposesEveryVariantAndStrategy) {
    const ModelConfig cfg = small_gpt2();
    const Weights w = random_weights(cfg, cfg.vocab_size, 12);
    const HfSpec specs[] = {
        {"F32", "", false, true},
        {"F32", "transformer.", true, false},         // unaligned F32 data, tied lm_head
        {"BF16", "transformer.", false, true, true},  // in this config c_fc (4C, C) > wte (Vp, C)
        {"F16", "", true, false}};
    int n = 0;
    for (const HfSpec& spec : specs) {
        const std::string path = file("model" + std::to_string(n++) + ".safetensors");
        write_safetensors(path, hf_entries(cfg, w, spec), {{"format", "pt"}}, spec.aligned);
        for (LoadStrategy s : kStrategies) {
            SCOPED_TRACE(path + " " + spec.dtype + " prefix '" + spec.prefix + "' " +
                         std::string(enum_name(kLoadStrategyNames, s)));
            Engine e(cfg);
            const ImportReport r = import_weights(path, *e.model, s);
            EXPECT_EQ(r.format, "safetensors");
            expect_weights(e, w, spec.dtype);  // wte rows 50..63 zero
        }
    }
}

TEST_F(WeightsImport, BytesReadAndTimePerStrategy) {
    const ModelConfig cfg = small_gpt2();
    const Weights w = random_weights(cfg, cfg.padded_vocab_size, 13);
    std::int64_t params = 0;
    for (const ParamTensor& t : param_tensors(cfg)) {
        params += t.numel();
    }
    const std::string bin = file("m.bin");
    write_llmc(bin, cfg, w, LlmcSpec{});
    Weights hf = w;
    hf["wte"].resize(static_cast<std::size_t>(cfg.vocab_size * cfg.d_model));
    const std::string st = file("m.safetensors");
    write_safetensors(st, hf_entries(cfg, hf, HfSpec{}), nullptr);
    const std::int64_t st_params = params - (cfg.padded_vocab_size - cfg.vocab_size) * cfg.d_model;
    for (LoadStrategy s : kStrategies) {
        SCOPED_TRACE(enum_name(kLoadStrategyNames, s));
        for (const auto& [path, bytes] :
             {std::pair{bin, params * 4}, std::pair{st, st_params * 4}}) {
            Engine e(cfg);
            const ImportReport r = import_weights(path, *e.model, s);
            EXPECT_EQ(r.bytes_read, bytes)
                << path;  // the parameters only, not the header or buffers
            EXPECT_TRUE(std::isfinite(r.seconds));
            EXPECT_GE(r.seconds, 0.0);
            EXPECT_GE(r.peak_rss_increase_bytes, -1);
        }
    }
    EXPECT_EQ(static_cast<std::int64_t>(fs::file_size(bin)), 1024 + params * 4);
}

TEST_F(WeightsImport, PeakRssFollowsTheStrategy) {
    // 14 MB of fp32 weights whose largest tensor is 1 MiB: reading all of it must show in the
    // peak, reading tensor by tensor must not.
    const ModelConfig cfg = small_gpt2(4, 256, 4, 1024, 1024, 64);
    const std::string path = file("big.bin");
    write_llmc(path, cfg, random_weights(cfg, cfg.padded_vocab_size, 14), LlmcSpec{3, 1024});
    const auto file_bytes = static_cast<std::int64_t>(fs::file_size(path));
    Engine e(cfg);
    const ImportReport all = import_weights(path, *e.model, LoadStrategy::read_all);
    const ImportReport seq = import_weights(path, *e.model, LoadStrategy::sequential);
    if (all.peak_rss_increase_bytes < 0) GTEST_SKIP() << "/proc/self/status is not readable here";
    EXPECT_GE(all.peak_rss_increase_bytes, file_bytes * 9 / 10);
    if (all.peak_rss_reset) {
        EXPECT_LT(seq.peak_rss_increase_bytes, file_bytes / 2)
            << "sequential should hold one tensor at a time";
    }
}

TEST_F(WeightsImport, ConfigFromWeights) {
    const ModelConfig cfg = small_gpt2();
    const std::string bin = file("m.bin");
    write_llmc(bin, cfg, random_weights(cfg, 64, 15), LlmcSpec{5, 64});
    const ModelConfig a = config_from_weights(bin);
    EXPECT_EQ(a.n_layers, 2);
    EXPECT_EQ(a.d_model, 32);
    EXPECT_EQ(a.n_heads, 4);
    EXPECT_EQ(a.n_kv_heads, 4);
    EXPECT_EQ(a.d_ff, 128);
    EXPECT_EQ(a.vocab_size, 50);
    EXPECT_EQ(a.padded_vocab_size, 64);  // the header's Vp
    EXPECT_EQ(a.context_length, 16);
    EXPECT_EQ(a.norm, NormKind::layernorm);
    EXPECT_TRUE(a.tied_embeddings);

    Weights w = random_weights(cfg, cfg.vocab_size, 16);
    const std::string st = file("m.safetensors");
    write_safetensors(st, hf_entries(cfg, w, HfSpec{"F32", "transformer.", false, true}),
                      {{"n_head", "4"}});
    const ModelConfig b = config_from_weights(st);
    EXPECT_EQ(b.n_layers, 2);
    EXPECT_EQ(b.d_model, 32);
    EXPECT_EQ(b.n_heads, 4);
    EXPECT_EQ(b.vocab_size, 50);
    EXPECT_EQ(b.padded_vocab_size, pad_vocab(50));
    EXPECT_EQ(b.context_length, 16);

    // Without metadata the heads are C / 64; C = 32 cannot say.
    write_safetensors(st, hf_entries(cfg, w, HfSpec{}), nullptr);
    expect_input_error(st, "n_head", [&] { config_from_weights(st); });
    const ModelConfig wide = small_gpt2(1, 128, 2);
    write_safetensors(st, hf_entries(wide, random_weights(wide, 50, 17), HfSpec{}), nullptr);
    EXPECT_EQ(config_from_weights(st).n_heads, 2);

    // The preset's name when the shape is GPT-2 small's (a sparse file of the right size).
    const ModelConfig& g = preset_or_throw("gpt2");
    const std::string gpt2 = file("gpt2_124M.bin");
    {
        std::int32_t h[256] = {20240326, 3, 1024, 50257, 12, 12, 768, 50304};
        std::ofstream(gpt2, std::ios::binary).write(reinterpret_cast<const char*>(h), sizeof h);
    }
    fs::resize_file(gpt2, 1024 + static_cast<std::uintmax_t>(count_params(g).allocated) * 4);
    EXPECT_EQ(config_from_weights(gpt2).name, "gpt2");
}

TEST_F(WeightsImport, LlmcErrorsNameTheFile) {
    const ModelConfig cfg = small_gpt2();
    const Weights w = random_weights(cfg, 64, 18);
    Engine e(cfg);
    const std::string path = file("m.bin");

    write_llmc(path, cfg, w, LlmcSpec{3, 64, 12345});
    expect_input_error(path, "bad magic 12345",
                       [&] { import_weights(path, *e.model, LoadStrategy::sequential); });
    write_llmc(path, cfg, w, LlmcSpec{4, 64});
    expect_input_error(path, "version 4",
                       [&] { import_weights(path, *e.model, LoadStrategy::sequential); });

    write_llmc(path, cfg, w, LlmcSpec{});
    const auto full = fs::file_size(path);
    fs::resize_file(path, full - 100);
    const std::string truncated = "truncated: expected " + std::to_string(full) + " bytes, found " +
                                  std::to_string(full - 100);
    expect_input_error(path, truncated,
                       [&] { import_weights(path, *e.model, LoadStrategy::mmap); });
    expect_input_error(path, truncated, [&] { config_from_weights(path); });

    // The model must match the file, field by field, and be GPT-2-shaped.
    write_llmc(path, cfg, w, LlmcSpec{});
    Engine deeper(small_gpt2(3));
    expect_input_error(path, "n_layers 2, the model 3",
                       [&] { import_weights(path, *deeper.model, LoadStrategy::read_all); });
    Engine other_vocab(small_gpt2(2, 32, 4, 60, 64));
    expect_input_error(path, "vocab_size", [&] {
        import_weights(path, *other_vocab.model, LoadStrategy::read_all);
    });
    Engine other_heads(small_gpt2(2, 32, 2));
    expect_input_error(path, "n_heads", [&] {
        import_weights(path, *other_heads.model, LoadStrategy::read_all);
    });
    ModelConfig rms = cfg;
    rms.norm = NormKind::rmsnorm;
    Engine rms_model(rms);
    expect_input_error(path, "norm is rmsnorm", [&] {
        import_weights(path, *rms_model.model, LoadStrategy::read_all);
    });

    const std::string text = file("notes.txt");
    std::ofstream(text) << "hello, these are not weights";
    expect_input_error(text, "neither an llm.c checkpoint",
                       [&] { import_weights(text, *e.model, LoadStrategy::read_all); });
    expect_input_error(file("absent.bin"), "cannot open",
                       [&] { config_from_weights(file("absent.bin")); });
}

TEST_F(WeightsImport, SafetensorsErrorsNameTheFileAndTensor) {
    const ModelConfig cfg = small_gpt2();
    const Weights w = random_weights(cfg, cfg.vocab_size, 19);
    const std::string path = file("m.safetensors");
    Engine e(cfg);
    const std::vector<float> before = e.param("h.0.attn.qkv.weight");
    auto import = [&] { import_weights(path, *e.model, LoadStrategy::sequential); };

    auto entries = hf_entries(cfg, w, HfSpec{});
    entry(entries, "h.1.mlp.c_fc.weight").shape = {4 * 32, 32};  // stored (out, in): not Conv1D
    write_safetensors(path, entries, nullptr);
    expect_input_error(path, "'h.1.mlp.c_fc.weight' has shape (128, 32), expected (32, 128)",
                       import);

    entries = hf_entries(cfg, w, HfSpec{"F32", "transformer."});
    std::erase_if(entries, [](const StEntry& x) { return x.name == "transformer.h.1.ln_2.bias"; });
    write_safetensors(path, entries, nullptr);
    expect_input_error(path, "missing tensor 'transformer.h.1.ln_2.bias' (expected shape (32))",
                       import);
    EXPECT_EQ(e.param("h.0.attn.qkv.weight"), before)
        << "nothing is written before every check passed";

    entries = hf_entries(cfg, w, HfSpec{});
    entry(entries, "ln_f.weight").dtype = "I32";  // 4 bytes an element, so the offsets still fit
    write_safetensors(path, entries, nullptr);
    expect_input_error(path, "tensor 'ln_f.weight' has dtype I32 (expected F32, F16 or BF16)",
                       import);
    entry(entries, "ln_f.weight").dtype = "Q4";
    write_safetensors(path, entries, nullptr);
    expect_input_error(path, "tensor 'ln_f.weight' has unknown dtype 'Q4'", import);

    entries = hf_entries(cfg, w, HfSpec{"F32", "", true});
    entry(entries, "lm_head.weight").bytes[5] ^= 0x40;
    write_safetensors(path, entries, nullptr);
    expect_input_error(path, "'lm_head.weight' differs from 'wte.weight'", import);

    Engine longer(small_gpt2(2, 32, 4, 50, 64, 32));
    write_safetensors(path, hf_entries(cfg, w, HfSpec{}), nullptr);
    expect_input_error(path, "context_length 16, the model 32",
                       [&] { import_weights(path, *longer.model, LoadStrategy::mmap); });
    write_safetensors(path, hf_entries(cfg, w, HfSpec{}), {{"n_head", "8"}});
    expect_input_error(path, "n_heads 8, the model 4", import);
}

TEST_F(WeightsImport, SafetensorsHeaderErrors) {
    const std::string path = file("bad.safetensors");
    auto open = [&] { SafetensorsFile f(path); };
    const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    write_raw(path, 1000, ok, 8);
    expect_input_error(path, "header length 1000 goes beyond the file", open);
    write_raw(path, 9, "{\"a\": [1,", 8);
    expect_input_error(path, "not valid JSON", open);
    write_raw(path, 2, "[]", 0);
    expect_input_error(path, "must be a JSON object", open);
    std::ofstream(path, std::ios::binary) << "abc";
    expect_input_error(path, "too short", open);

    const std::string beyond = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
    write_raw(path, beyond.size(), beyond, 8);
    expect_input_error(path, "lie beyond the data section (8 bytes", open);
    const std::string overlap =
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[6,10]}})";
    write_raw(path, overlap.size(), overlap, 16);
    expect_input_error(path, "overlap", open);
    const std::string size = R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})";
    write_raw(path, size.size(), size, 8);
    expect_input_error(path, "needs 6", open);
    const std::string no_shape = R"({"a":{"dtype":"F32","data_offsets":[0,8]}})";
    write_raw(path, no_shape.size(), no_shape, 8);
    expect_input_error(path, "missing \"shape\"", open);

    // A model import reports the same through its own entry point.
    Engine e(small_gpt2());
    write_raw(path, 1000, ok, 8);
    expect_input_error(path, "goes beyond the file",
                       [&] { import_weights(path, *e.model, LoadStrategy::read_all); });
}

TEST_F(WeightsImport, SafetensorsReaderReadsEachFloatType) {
    const std::vector<float> v = {1.0f, -2.5f, 3.140625f, 1e-3f, 65504.0f, -0.0f, 0.333f};
    const std::string path = file("t.safetensors");
    write_safetensors(path,
                      {StEntry{"f32", "F32", {7}, encode(v, "F32")},
                       StEntry{"bf16", "BF16", {7, 1}, encode(v, "BF16")},
                       StEntry{"f16", "F16", {1, 7}, encode(v, "F16")},
                       StEntry{"ids", "I64", {2}, std::vector<unsigned char>(16)},
                       StEntry{"empty", "F32", {0, 3}, {}}},
                      {{"format", "pt"}}, false);
    const SafetensorsFile f(path);
    EXPECT_EQ(f.tensors().size(), 5u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_EQ(f.find("nope"), nullptr);
    ASSERT_NE(f.find("bf16"), nullptr);
    EXPECT_EQ(shape_text(f.find("bf16")->shape), "(7, 1)");
    for (const char* name : {"f32", "bf16", "f16"}) {
        const SafetensorsTensor* t = f.find(name);
        ASSERT_NE(t, nullptr);
        std::vector<float> out(7, NAN);
        f.read_f32(*t, out.data());
        for (std::size_t i = 0; i < v.size(); ++i) {
            EXPECT_EQ(out[i], round_to(t->dtype_name, v[i])) << name << "[" << i << "]";
        }
    }
    EXPECT_EQ(f.find("empty")->numel(), 0);
    std::vector<float> out(2);
    expect_input_error(path, "tensor 'ids' has dtype I64",
                       [&] { f.read_f32(*f.find("ids"), out.data()); });
}

// napkin's own checkpoint starts another run: its weights exactly (Llama-shaped here, which the
// GPT-2 formats cannot hold), under full fine-tuning, LoRA and QLoRA (the NF4 base quantized
// from them); the shape comes from the file. A LoRA run's checkpoint and another shape are
// refused, naming the file.
TEST_F(WeightsImport, NapkinCheckpointStartsAnotherRun) {
    TrainOptions o;
    o.model.name = "llama-test";
    o.model.vocab_size = 256;  // the synthetic corpus's bytes
    o.model.padded_vocab_size = 256;
    o.model.context_length = 16;
    o.model.n_layers = 2;
    o.model.d_model = 64;
    o.model.n_heads = 4;
    o.model.n_kv_heads = 2;
    o.model.d_ff = 96;
    o.model.norm = NormKind::rmsnorm;
    o.model.positions = PositionKind::rope;
    o.model.mlp = MlpKind::swiglu;
    o.model.bias = false;
    o.model.tied_embeddings = false;
    o.plan.micro_batch = 2;
    o.plan.seq_len = 8;
    o.steps = 2;
    const std::string base = file("base.safetensors");
    Trainer a(o);
    a.step();
    a.step();
    save_checkpoint(base, a);
    const ModelConfig read = config_from_weights(base);
    EXPECT_EQ(read.name, "llama-test");
    EXPECT_EQ(read.n_kv_heads, 2);
    EXPECT_EQ(read.mlp, MlpKind::swiglu);

    for (const Finetune ft : {Finetune::full, Finetune::lora, Finetune::qlora}) {
        SCOPED_TRACE(enum_name(kFinetuneNames, ft));
        TrainOptions f = o;
        f.seed = 99;  // other random weights, all replaced
        f.plan.finetune = ft;
        f.plan.lora_rank = ft == Finetune::full ? 0 : 4;
        ImportReport report;
        Trainer b(f, nullptr, "",
                  [&](Gpt& m) { report = import_weights(base, m, LoadStrategy::sequential); });
        EXPECT_EQ(report.format, "napkin checkpoint");
        for (std::size_t i = 0; i < b.model().params().size(); ++i) {
            const ParamSlot& p = b.model().params()[i];
            if (p.adapter) continue;
            std::vector<float> want(static_cast<std::size_t>(p.numel)), got(want.size());
            a.model().get_param(i, want.data());
            b.model().get_param(i, got.data());
            if (p.weight.dtype() == DType::nf4) {
                // Within half the widest NF4 level gap of a block scale, which is at most the
                // tensor's largest magnitude plus one 8-bit absmax step (kernels/nf4.h).
                float top = 0.0f;
                for (float v : want) top = std::max(top, std::fabs(v));
                for (std::size_t k = 0; k < got.size(); ++k)
                    ASSERT_NEAR(got[k], want[k], 0.1520f * top * (1.0f + 1.0f / 255.0f))
                        << p.name << "[" << k << "]";
            } else {
                EXPECT_EQ(got, want) << p.name;
            }
        }
    }

    TrainOptions l = o;
    l.plan.finetune = Finetune::lora;
    l.plan.lora_rank = 4;
    Trainer lora(l);
    const std::string adapted = file("lora.safetensors");
    save_checkpoint(adapted, lora);
    expect_input_error(adapted, "adapters are not merged", [&] { config_from_weights(adapted); });
    expect_input_error(adapted, "adapters are not merged",
                       [&] { import_weights(adapted, lora.model(), LoadStrategy::mmap); });
    TrainOptions wider = o;
    wider.model.d_model = 32;
    Trainer other(wider);
    expect_input_error(base, "the checkpoint's model differs: d_model 64 (file) vs 32 (model)",
                       [&] { import_weights(base, other.model(), LoadStrategy::read_all); });
}

}  // namespace
}  // namespace napkin
