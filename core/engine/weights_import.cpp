// Weights into the engine, one planner per format (llm.c, Hugging Face GPT-2, napkin's own
// checkpoints). Each format becomes one list of copies (file offset, dtype, stored (rows, cols),
// transpose or not, target parameter), checked in full against the model before anything is
// written; then the copies run in file order over one of three byte sources (the load
// strategies, weights_source.h). The big buffers are anonymous mappings, not heap blocks, so the
// peak RSS a strategy adds is what it touches, whatever malloc had cached before, and goes back
// to the system when the import ends.
#include "core/engine/weights_import.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/config_json.h"
#include "core/engine/checkpoint.h"
#include "core/engine/checkpoint_file.h"
#include "core/engine/weights_source.h"
#include "core/safetensors.h"

namespace napkin {

namespace {

using namespace weights_detail;

constexpr std::int32_t kLlmcMagic = 20240326;
constexpr std::uint64_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);

// ---- the model ---------------------------------------------------------------------------------

void check_field(const std::string& path, const char* field, std::int64_t file,
                 std::int64_t model) {
    if (file != model) {
        bad(path, "the file has " + std::string(field) + " " + std::to_string(file) +
                      ", the model " + std::to_string(model));
    }
}

// GPT-2's architecture: what both formats can hold.
void check_gpt2_shaped(const std::string& path, const ModelConfig& m) {
    auto need = [&](bool ok, const std::string& field, const std::string& has,
                    const std::string& want) {
        if (!ok) {
            bad(path, "GPT-2 weights need a GPT-2-shaped model: " + field + " is " + has +
                          " (expected " + want + ")");
        }
    };
    need(m.norm == NormKind::layernorm, "norm", std::string(enum_name(kNormNames, m.norm)),
         "layernorm");
    need(m.positions == PositionKind::learned, "positions",
         std::string(enum_name(kPositionNames, m.positions)), "learned");
    need(m.mlp == MlpKind::gelu, "mlp", std::string(enum_name(kMlpNames, m.mlp)), "gelu");
    need(m.bias, "bias", "false", "true");
    need(m.tied_embeddings, "tied_embeddings", "false", "true");
    need(m.n_kv_heads == m.n_heads, "n_kv_heads", std::to_string(m.n_kv_heads),
         "n_heads = " + std::to_string(m.n_heads));
    need(m.d_ff == 4 * m.d_model, "d_ff", std::to_string(m.d_ff),
         "4 * d_model = " + std::to_string(4 * m.d_model));
}


ModelConfig gpt2_config(std::int64_t ctx, std::int64_t V, std::int64_t Vp, int L, int NH,
                        std::int64_t C) {
    ModelConfig c;
    c.vocab_size = V;
    c.padded_vocab_size = Vp;
    c.context_length = ctx;
    c.n_layers = L;
    c.d_model = C;
    c.n_heads = NH;
    c.n_kv_heads = NH;
    c.d_ff = 4 * C;
    for (const ModelConfig& p : model_presets()) {
        if (p.norm == c.norm && p.positions == c.positions && p.mlp == c.mlp && p.tied_embeddings &&
            p.bias && p.vocab_size == V && p.padded_vocab_size == Vp && p.context_length == ctx &&
            p.n_layers == L && p.d_model == C && p.n_heads == NH && p.d_ff == c.d_ff) {
            c.name = p.name;
        }
    }
    return c;
}

// ---- llm.c -----------------------------------------------------------------------------------

struct LlmcHeader {
    int version = 0;
    DType dtype = DType::f32;
    std::int64_t maxT = 0, V = 0, L = 0, NH = 0, C = 0, Vp = 0;
    std::uint64_t param_count = 0;
};

LlmcHeader read_llmc_header(const std::string& path, const Fd& fd) {
    if (fd.bytes() < kLlmcHeaderBytes) {
        bad(path,
            "too short for llm.c's 1024-byte header (" + std::to_string(fd.bytes()) + " bytes)");
    }
    std::int32_t h[256];
    pread_exact(fd.get(), h, sizeof h, 0, path);
    if (h[0] != kLlmcMagic) {
        bad(path, "bad magic " + std::to_string(h[0]) + " (expected llm.c's " +
                      std::to_string(kLlmcMagic) + ")");
    }
    LlmcHeader r;
    r.version = h[1];
    if (r.version == 3) {
        r.dtype = DType::f32;
    } else if (r.version == 5) {
        r.dtype = DType::bf16;
    } else {
        bad(path, "unsupported llm.c version " + std::to_string(r.version) +
                      " (expected 3: fp32 or 5: bf16)");
    }
    // Bounds keep every size below 2^62 (and each is far beyond any GPT-2).
    auto field = [&](int slot, const char* name, std::int64_t max) {
        const std::int64_t v = h[slot];
        if (v < 1 || v > max) {
            bad(path, "header field " + std::string(name) + " = " + std::to_string(v) +
                          " is out of range [1, " + std::to_string(max) + "]");
        }
        return v;
    };
    r.maxT = field(2, "maxT", std::int64_t{1} << 24);
    r.V = field(3, "V", std::int64_t{1} << 24);
    r.L = field(4, "L", std::int64_t{1} << 12);
    r.NH = field(5, "NH", std::int64_t{1} << 16);
    r.C = field(6, "C", std::int64_t{1} << 18);
    r.Vp = field(7, "Vp", std::int64_t{1} << 24);
    if (r.Vp < r.V) {
        bad(path, "header has Vp " + std::to_string(r.Vp) + " < V " + std::to_string(r.V));
    }
    if (r.C % r.NH != 0) {
        bad(path,
            "header has C " + std::to_string(r.C) + " not divisible by NH " + std::to_string(r.NH));
    }
    const std::int64_t C = r.C, L = r.L;
    r.param_count =
        static_cast<std::uint64_t>(r.Vp * C + r.maxT * C + L * (12 * C * C + 13 * C) + 2 * C);
    const std::uint64_t expected =
        kLlmcHeaderBytes + r.param_count * static_cast<std::uint64_t>(element_bytes(r.dtype));
    if (fd.bytes() < expected) {
        bad(path, "truncated: expected " + std::to_string(expected) + " bytes, found " +
                      std::to_string(fd.bytes()));
    }
    if (fd.bytes() > expected) {
        bad(path, "expected " + std::to_string(expected) +
                      " bytes for the shape in its header, found " + std::to_string(fd.bytes()) +
                      " (trailing data)");
    }
    return r;
}

ImportPlan plan_llmc(const std::string& path, const Fd& fd, Gpt& model) {
    const LlmcHeader h = read_llmc_header(path, fd);
    const ModelConfig& m = *model.plan().config;
    check_gpt2_shaped(path, m);
    check_field(path, "n_layers", h.L, m.n_layers);
    check_field(path, "d_model", h.C, m.d_model);
    check_field(path, "n_heads", h.NH, m.n_heads);
    check_field(path, "context_length", h.maxT, m.context_length);
    check_field(path, "vocab_size", h.V, m.vocab_size);

    const auto index = param_indices(model);
    const std::int64_t C = h.C;
    const auto es = static_cast<std::uint64_t>(element_bytes(h.dtype));
    ImportPlan plan;
    plan.format = "llm.c";
    std::uint64_t offset = kLlmcHeaderBytes;
    auto add = [&](const std::string& name, std::int64_t rows, std::int64_t cols) {
        plan.copies.push_back(Copy{param_index(index, name), offset, h.dtype, rows, cols, false});
    };
    // The file's Vp rows and the model's may differ: the first min(Vp) rows, the rest zero.
    add("wte", std::min(h.Vp, m.padded_vocab_size), C);
    offset += static_cast<std::uint64_t>(h.Vp * C) * es;
    add("wpe", h.maxT, C);
    offset += static_cast<std::uint64_t>(h.maxT * C) * es;
    // Then per kind, all layers: (suffix, rows, cols) in llm.c's order.
    const struct {
        const char* suffix;
        std::int64_t rows, cols;
    } kinds[] = {
        {"ln_1.weight", 1, C},       {"ln_1.bias", 1, C},           {"attn.qkv.weight", 3 * C, C},
        {"attn.qkv.bias", 1, 3 * C}, {"attn.proj.weight", C, C},    {"attn.proj.bias", 1, C},
        {"ln_2.weight", 1, C},       {"ln_2.bias", 1, C},           {"mlp.fc.weight", 4 * C, C},
        {"mlp.fc.bias", 1, 4 * C},   {"mlp.proj.weight", C, 4 * C}, {"mlp.proj.bias", 1, C}};
    for (const auto& k : kinds) {
        for (std::int64_t l = 0; l < h.L; ++l) {
            add("h." + std::to_string(l) + "." + k.suffix, k.rows, k.cols);
            offset += static_cast<std::uint64_t>(k.rows * k.cols) * es;
        }
    }
    add("ln_f.weight", 1, C);
    offset += static_cast<std::uint64_t>(C) * es;
    add("ln_f.bias", 1, C);
    offset += static_cast<std::uint64_t>(C) * es;
    NAPKIN_ASSERT(offset == fd.bytes(),
                  "llm.c layout walked to " << offset << " of " << fd.bytes() << " bytes");
    return plan;
}

// ---- safetensors -----------------------------------------------------------------------------

struct HfShape {
    std::string prefix;  // "" or "transformer."
    std::int64_t V = 0, C = 0, ctx = 0;
    int L = 0;
    std::optional<int> NH;  // from __metadata__
};

const SafetensorsTensor& need_tensor(const SafetensorsFile& st, const std::string& name,
                                     const std::string& expected) {
    const SafetensorsTensor* t = st.find(name);
    if (t == nullptr) {
        bad(st.path(), "missing tensor '" + name + "' (expected shape " + expected + ")");
    }
    return *t;
}

HfShape read_hf_shape(const SafetensorsFile& st) {
    HfShape s;
    if (st.find("wte.weight") == nullptr && st.find("transformer.wte.weight") != nullptr) {
        s.prefix = "transformer.";
    }
    const SafetensorsTensor& wte = need_tensor(st, s.prefix + "wte.weight", "(V, C)");
    if (wte.shape.size() != 2) {
        bad(st.path(),
            "tensor '" + wte.name + "' has shape " + shape_text(wte.shape) + " (expected (V, C))");
    }
    s.V = wte.shape[0];
    s.C = wte.shape[1];
    const SafetensorsTensor& wpe =
        need_tensor(st, s.prefix + "wpe.weight", "(ctx, " + std::to_string(s.C) + ")");
    if (wpe.shape.size() != 2) {
        bad(st.path(), "tensor '" + wpe.name + "' has shape " + shape_text(wpe.shape) +
                           " (expected (ctx, " + std::to_string(s.C) + "))");
    }
    s.ctx = wpe.shape[0];
    // L: one past the highest block index.
    const std::string h = s.prefix + "h.";
    for (const SafetensorsTensor& t : st.tensors()) {
        if (t.name.compare(0, h.size(), h) != 0) continue;
        const std::size_t dot = t.name.find('.', h.size());
        const std::string digits =
            t.name.substr(h.size(), dot == std::string::npos ? std::string::npos : dot - h.size());
        if (digits.empty() || digits.size() > 6 ||
            !std::all_of(digits.begin(), digits.end(),
                         [](char ch) { return ch >= '0' && ch <= '9'; })) {
            continue;
        }
        s.L = std::max(s.L, std::stoi(digits) + 1);
    }
    if (s.L == 0) bad(st.path(), "no transformer blocks ('" + h + "<l>.*' tensors)");
    for (const char* key : {"n_head", "num_attention_heads"}) {
        const auto it = st.metadata().find(key);
        if (it == st.metadata().end()) continue;
        int v = 0;
        try {
            v = std::stoi(it->second);
        } catch (const std::exception&) {
            v = 0;
        }
        if (v < 1) {
            bad(st.path(), "__metadata__ " + std::string(key) + " '" + it->second +
                               "' is not a positive integer");
        }
        s.NH = v;
        break;
    }
    return s;
}

// Reads both tensors a chunk at a time: the engine ties the head to wte, so a file's separate
// lm_head must hold the same values.
std::uint64_t check_tied_head(const SafetensorsFile& st, const SafetensorsTensor& head,
                              const SafetensorsTensor& wte) {
    const std::string expected = shape_text(wte.shape);
    if (head.shape != wte.shape) {
        bad(st.path(), "tensor '" + head.name + "' has shape " + shape_text(head.shape) +
                           ", expected " + expected + " (tied to wte)");
    }
    const DType hd = st.readable_dtype(head), wd = st.readable_dtype(wte);
    if (head.begin == wte.begin && head.end == wte.end) return 0;
    constexpr std::size_t kChunk = std::size_t{1} << 16;  // elements
    std::vector<unsigned char> raw(kChunk * 4);
    std::vector<float> a(kChunk), b(kChunk);
    const auto n = static_cast<std::size_t>(wte.numel());
    for (std::size_t i = 0; i < n; i += kChunk) {
        const std::size_t m = std::min(kChunk, n - i);
        pread_exact(st.fd(), raw.data(), m * static_cast<std::size_t>(element_bytes(hd)),
                    st.data_start() + head.begin + i * static_cast<std::size_t>(element_bytes(hd)),
                    st.path());
        convert_to_f32(hd, raw.data(), m, a.data());
        pread_exact(st.fd(), raw.data(), m * static_cast<std::size_t>(element_bytes(wd)),
                    st.data_start() + wte.begin + i * static_cast<std::size_t>(element_bytes(wd)),
                    st.path());
        convert_to_f32(wd, raw.data(), m, b.data());
        for (std::size_t j = 0; j < m; ++j) {
            if (a[j] != b[j]) {
                bad(st.path(),
                    "tensor '" + head.name + "' differs from '" + wte.name + "' at element " +
                        std::to_string(i + j) +
                        ": the engine ties the head to the token embedding, as GPT-2 does");
            }
        }
    }
    return head.bytes() + wte.bytes();
}

ImportPlan plan_safetensors(const SafetensorsFile& st, Gpt& model) {
    const std::string& path = st.path();
    const ModelConfig& m = *model.plan().config;
    check_gpt2_shaped(path, m);
    const HfShape s = read_hf_shape(st);
    check_field(path, "n_layers", s.L, m.n_layers);
    check_field(path, "d_model", s.C, m.d_model);
    if (s.NH) check_field(path, "n_heads", *s.NH, m.n_heads);
    check_field(path, "context_length", s.ctx, m.context_length);
    check_field(path, "vocab_size", s.V, m.vocab_size);

    const auto index = param_indices(model);
    const std::int64_t C = s.C;
    ImportPlan plan;
    plan.format = "safetensors";
    // A 1-D file shape is (1, n) for the copy.
    auto add = [&](const std::string& param, const std::string& file_name,
                   std::vector<std::int64_t> shape, bool transpose) {
        const std::string name = s.prefix + file_name;
        const SafetensorsTensor& t = need_tensor(st, name, shape_text(shape));
        if (t.shape != shape) {
            bad(path, "tensor '" + name + "' has shape " + shape_text(t.shape) + ", expected " +
                          shape_text(shape));
        }
        const DType dt = st.readable_dtype(t);
        const std::int64_t rows = shape.size() == 2 ? shape[0] : 1;
        plan.copies.push_back(Copy{param_index(index, param), st.data_start() + t.begin, dt, rows,
                                   shape.back(), transpose});
    };
    add("wte", "wte.weight", {s.V, C}, false);  // V rows; the model's rows up to Vp are zeroed
    add("wpe", "wpe.weight", {s.ctx, C}, false);
    for (int l = 0; l < m.n_layers; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        add(p + "ln_1.weight", p + "ln_1.weight", {C}, false);
        add(p + "ln_1.bias", p + "ln_1.bias", {C}, false);
        add(p + "attn.qkv.weight", p + "attn.c_attn.weight", {C, 3 * C}, true);  // Conv1D (in, out)
        add(p + "attn.qkv.bias", p + "attn.c_attn.bias", {3 * C}, false);
        add(p + "attn.proj.weight", p + "attn.c_proj.weight", {C, C}, true);
        add(p + "attn.proj.bias", p + "attn.c_proj.bias", {C}, false);
        add(p + "ln_2.weight", p + "ln_2.weight", {C}, false);
        add(p + "ln_2.bias", p + "ln_2.bias", {C}, false);
        add(p + "mlp.fc.weight", p + "mlp.c_fc.weight", {C, 4 * C}, true);
        add(p + "mlp.fc.bias", p + "mlp.c_fc.bias", {4 * C}, false);
        add(p + "mlp.proj.weight", p + "mlp.c_proj.weight", {4 * C, C}, true);
        add(p + "mlp.proj.bias", p + "mlp.c_proj.bias", {C}, false);
    }
    add("ln_f.weight", "ln_f.weight", {C}, false);
    add("ln_f.bias", "ln_f.bias", {C}, false);
    // HF's GPT2LMHeadModel keeps the head at the top level, outside "transformer.".
    for (const std::string& name : {std::string("lm_head.weight"), s.prefix + "lm_head.weight"}) {
        if (const SafetensorsTensor* head = st.find(name)) {
            plan.extra_bytes_read = check_tied_head(st, *head, *st.find(s.prefix + "wte.weight"));
            break;
        }
    }
    return plan;
}

// ---- napkin checkpoints ----------------------------------------------------------------------

bool is_napkin_checkpoint(const SafetensorsFile& st) {
    const auto it = st.metadata().find("format");
    return it != st.metadata().end() && it->second == kCheckpointFormat;
}

// The model a napkin checkpoint was trained with (its "model" metadata, docs/CHECKPOINTS.md).
// Only a full model's weights start another run: a fine-tuning checkpoint's adapters are not
// merged into its frozen base (QLoRA's base is NF4 bytes).
ModelConfig napkin_checkpoint_config(const SafetensorsFile& st) {
    const auto& meta = st.metadata();
    const auto ft = meta.find("finetune");
    if (ft != meta.end() && ft->second != "full") {
        bad(st.path(), "a {finetune} " + ft->second +
                           " checkpoint: its adapters are not merged into the base weights; start "
                           "from the checkpoint of a full run (or {resume} this one)");
    }
    const auto model = meta.find("model");
    if (model == meta.end()) bad(st.path(), "metadata key 'model' missing");
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(model->second);
    } catch (const nlohmann::json::exception&) {
        bad(st.path(), "metadata key 'model' is not valid JSON");
    }
    try {
        return model_config_from_json(doc, st.path() + " (metadata key 'model')");
    } catch (const UsageError& e) {
        throw InputError(e.what());
    }
}

// A napkin checkpoint's weights by the engine's own names and shapes (param_tensors), whatever
// the architecture; its master copies and moments are left alone. The model must have the
// checkpoint's shape (its name aside).
ImportPlan plan_napkin_checkpoint(const SafetensorsFile& st, Gpt& model) {
    const ModelConfig saved = napkin_checkpoint_config(st);
    const ModelConfig& m = *model.plan().config;
    nlohmann::json a = model_config_to_json(saved), b = model_config_to_json(m);
    a.erase("name");
    b.erase("name");
    if (a != b) {
        std::string diff;
        for (const auto& [key, value] : a.items()) {
            if (b.contains(key) && b[key] == value) continue;
            diff += (diff.empty() ? "" : ", ") + key + " " + value.dump() + " (file) vs " +
                    (b.contains(key) ? b[key].dump() : "none") + " (model)";
        }
        bad(st.path(), "the checkpoint's model differs: " + diff);
    }
    ImportPlan plan;
    plan.format = "napkin checkpoint";
    for (std::size_t i = 0; i < model.params().size(); ++i) {
        const ParamSlot& p = model.params()[i];
        if (p.adapter) continue;  // the fine-tuning run's own, B = 0
        const SafetensorsTensor* t = st.find(p.name);
        if (t == nullptr) bad(st.path(), "missing tensor '" + p.name + "'");
        if (t->numel() != p.numel) {
            bad(st.path(), "tensor '" + p.name + "' has shape " + shape_text(t->shape) + ", " +
                               std::to_string(p.numel) + " elements expected");
        }
        plan.copies.push_back(
            Copy{i, st.data_start() + t->begin, st.readable_dtype(*t), 1, p.numel, false});
    }
    return plan;
}

// ---- format and measurement ------------------------------------------------------------------

enum class Format { llmc, safetensors };

// llm.c's magic in the first int32, else a safetensors header ('{' after the 8-byte length, or
// the file's name says so).
Format detect_format(const std::string& path, const Fd& fd) {
    unsigned char head[9] = {};
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(fd.bytes(), sizeof head));
    pread_exact(fd.get(), head, n, 0, path);
    std::int32_t magic = 0;
    if (n >= 4) std::memcpy(&magic, head, 4);
    if (magic == kLlmcMagic) return Format::llmc;
    const bool named = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
    if (named || (n == 9 && head[8] == '{')) return Format::safetensors;
    bad(path, "bad magic " + std::to_string(magic) + ": neither an llm.c checkpoint (magic " +
                  std::to_string(kLlmcMagic) +
                  ") nor a safetensors file (JSON header after an 8-byte length)");
}


}  // namespace

ModelConfig config_from_weights(const std::string& path) {
    const Fd fd(path);
    if (detect_format(path, fd) == Format::llmc) {
        const LlmcHeader h = read_llmc_header(path, fd);
        return gpt2_config(h.maxT, h.V, h.Vp, static_cast<int>(h.L), static_cast<int>(h.NH), h.C);
    }
    const SafetensorsFile st(path);
    if (is_napkin_checkpoint(st)) return napkin_checkpoint_config(st);
    const HfShape s = read_hf_shape(st);
    int heads = 0;
    if (s.NH) {
        heads = *s.NH;
    } else if (s.C % 64 == 0) {
        heads = static_cast<int>(s.C / 64);  // GPT-2's head size, at every size
    } else {
        bad(path, "cannot infer the number of heads: d_model " + std::to_string(s.C) +
                      " is not a multiple of GPT-2's head size 64 and __metadata__ has no n_head");
    }
    if (s.C % heads != 0) {
        bad(path, "__metadata__ n_head " + std::to_string(heads) + " does not divide d_model " +
                      std::to_string(s.C));
    }
    return gpt2_config(s.ctx, s.V, pad_vocab(s.V), s.L, heads, s.C);
}

ImportReport import_weights(const std::string& path, Gpt& model, LoadStrategy strategy) {
    const RssProbe probe = start_rss_probe();
    const auto t0 = std::chrono::steady_clock::now();
    ImportReport r;
    {
        const Fd fd(path);
        if (detect_format(path, fd) == Format::llmc) {
            const ImportPlan plan = plan_llmc(path, fd, model);
            execute(model, plan, fd.get(), fd.bytes(), path, strategy, r);
        } else {
            const SafetensorsFile st(path);
            // A napkin checkpoint carries a checksum: --init-from verifies it as --resume does.
            if (is_napkin_checkpoint(st))
                CheckpointReader(path, kCheckpointFormat).verify_checksum();
            const ImportPlan plan = is_napkin_checkpoint(st) ? plan_napkin_checkpoint(st, model)
                                                             : plan_safetensors(st, model);
            execute(model, plan, st.fd(), st.file_bytes(), path, strategy, r);
        }
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    finish_rss_probe(probe, r);
    return r;
}

}  // namespace napkin
