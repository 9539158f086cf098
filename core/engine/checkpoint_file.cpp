#include "core/engine/checkpoint_file.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <type_traits>

#include "core/check.h"
#include "core/config_json.h"
#include "core/durable_file.h"
#include "core/safetensors.h"

namespace napkin {

// Tensors go to the file as they lie in memory; safetensors is little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoints assume a little-endian host");

std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t hash) {
    constexpr std::uint64_t kPrime = 0x100000001b3ull;
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) {
        hash ^= p[i];
        hash *= kPrime;
    }
    return hash;
}

void checkpoint_error(const std::string& path, const std::string& what) {
    throw InputError(path + ": " + what);
}

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // keeps the header in file order, for people reading it

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::string_view kChecksumPrefix = "fnv1a64:";
constexpr const char* kHeaderChecksumKey = "header_checksum";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    checkpoint_error(path, what);
}

std::string hex64(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// The element types napkin stores, by their safetensors names.
// I8 holds bytes: a QLoRA weight's NF4 codes and state (kernels/nf4.h).
constexpr std::array kSafetensorsDTypes = {
    EnumName<DType>{DType::f32, "F32"}, EnumName<DType>{DType::bf16, "BF16"},
    EnumName<DType>{DType::f16, "F16"}, EnumName<DType>{DType::i8, "I8"}};

std::uint64_t tensor_bytes(const CheckpointTensor& t) {
    std::uint64_t n = 1;
    for (const std::int64_t d : t.shape)
        n *= static_cast<std::uint64_t>(d);
    return storage_bytes(t.dtype, n);
}

template <class E, std::size_t N>
std::string name_of(const std::array<EnumName<E>, N>& table, E value) {
    return std::string(enum_name(table, value));
}

// ---- metadata: safetensors keeps a map of strings to strings, so numbers go as text ----

// Every metadata key but "format", each named once: MetaWriter writes them, MetaReader reads
// them back, so a key cannot be saved and then forgotten.
template <class V>
void visit_metadata(V& v, CheckpointInfo& info) {
    TrainOptions& o = info.options;
    OptimizerConfig& oc = o.optimizer;
    v.model("model", o.model);
    v.enumeration("precision", o.plan.precision, kPrecisionNames);
    v.enumeration("optimizer", o.plan.optimizer, kOptimizerNames);
    v.number("step", info.steps_done, 0);
    v.number("update_count", info.update_count, 0);
    v.number("data_position", info.data_position, 0);
    v.number("loss_scale", info.loss_scale);
    v.number("good_steps", info.good_steps, 0);
    v.number("seed", o.seed, 0);
    v.number("micro_batch", o.plan.micro_batch, 1);
    v.number("seq_len", o.plan.seq_len, 1);
    v.number("grad_accum", o.grad_accum, 1);
    v.number("steps", o.steps, 1);
    v.text("data", o.data);
    v.enumeration("checkpointing", o.plan.checkpointing, kCheckpointingNames);
    v.enumeration("attention", o.plan.attention, kAttentionNames);
    v.boolean("grads_fp32", o.plan.grads_fp32);
    v.number("loss_chunk_rows", o.plan.loss_chunk_rows, 0);
    v.number("lr", oc.lr);
    v.number("min_lr_frac", oc.min_lr_frac);
    v.number("warmup_steps", oc.warmup_steps, 0);
    v.number("total_steps", oc.total_steps, 0);
    v.number("beta1", oc.beta1);
    v.number("beta2", oc.beta2);
    v.number("eps", oc.eps);
    v.number("weight_decay", oc.weight_decay);
    v.number("grad_clip", oc.grad_clip);
    v.number("loss_scale_init", o.loss_scale_init);
    v.number("loss_scale_window", o.loss_scale_window, 1);
    // Optional: checkpoints written before these keys existed lack them (and those without
    // "finetune" are full fine-tuning runs, the default).
    v.optional_text("data_fingerprint", info.data_fingerprint);
    v.optional_enumeration("finetune", o.plan.finetune, kFinetuneNames);
    v.optional_number("lora_rank", o.plan.lora_rank, 0);
    v.optional_number("lora_alpha", o.plan.lora_alpha, 0.0f);
    v.optional_number("fp8_amax_history", o.plan.fp8_amax_history, std::int64_t{0});
    v.number("data_bytes", info.data_bytes, 0);
    v.checksum("checksum", info.checksum);
}

class MetaWriter {
public:
    explicit MetaWriter(ojson& meta) : meta_(meta) {}
    void model(const char* key, const ModelConfig& c) {
        meta_[key] = model_config_to_json(c).dump();
    }
    template <class E, std::size_t N>
    void enumeration(const char* key, E value, const std::array<EnumName<E>, N>& table) {
        meta_[key] = name_of(table, value);
    }
    template <class N>
    void number(const char* key, N value, std::type_identity_t<N> /*min*/ = {}) {
        if constexpr (std::is_floating_point_v<N>) {
            char buf[32];  // the shortest text that reads back to the same value
            meta_[key] = std::string(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);
        } else {
            meta_[key] = std::to_string(value);
        }
    }
    void text(const char* key, const std::string& value) { meta_[key] = value; }
    void optional_text(const char* key, const std::string& value) { meta_[key] = value; }
    template <class E, std::size_t N>
    void optional_enumeration(const char* key, E value, const std::array<EnumName<E>, N>& table) {
        enumeration(key, value, table);
    }
    template <class N>
    void optional_number(const char* key, N value, std::type_identity_t<N> min = {}) {
        number(key, value, min);
    }
    void boolean(const char* key, bool value) { meta_[key] = value ? "true" : "false"; }
    void checksum(const char* key, std::uint64_t value) {
        meta_[key] = std::string(kChecksumPrefix) + hex64(value);
    }

private:
    ojson& meta_;
};

// Each failure names the key.
class MetaReader {
public:
    MetaReader(const std::map<std::string, std::string>& meta, const std::string& path)
        : meta_(meta), path_(path) {}

    void model(const char* key, ModelConfig& out) const {
        json doc;
        try {
            doc = json::parse(get(key));
        } catch (const json::exception&) {
            fail(key, " is not valid JSON");
        }
        try {
            out = model_config_from_json(doc, path_ + " (metadata key '" + key + "')");
        } catch (const UsageError& e) {
            throw InputError(e.what());
        }
    }

    template <class E, std::size_t N>
    void enumeration(const char* key, E& out, const std::array<EnumName<E>, N>& table) const {
        const std::string& s = get(key);
        const auto v = find_enum(table, s);
        if (!v) fail(key, ": unknown value '" + s + "' (expected " + enum_choices(table) + ")");
        out = *v;
    }

    // The whole text must parse: an integer >= min_value, or a finite float (a NaN learning
    // rate would otherwise surface steps later as NaN gradients, blaming the wrong thing).
    template <class N>
    void number(const char* key, N& out,
                std::type_identity_t<N> min_value = std::numeric_limits<N>::lowest()) const {
        const std::string& s = get(key);
        const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        bool finite = true;
        if constexpr (std::is_floating_point_v<N>) finite = std::isfinite(out);
        if (ec != std::errc{} || ptr != s.data() + s.size() || s.empty() || !finite ||
            out < min_value) {
            const std::string want = std::is_integral_v<N>
                                         ? "an integer >= " + std::to_string(min_value)
                                         : std::string("a finite number");
            fail(key, ": expected " + want + " (got \"" + s + "\")");
        }
    }

    void text(const char* key, std::string& out) const { out = get(key); }
    void optional_text(const char* key, std::string& out) const {
        out = meta_.contains(key) ? get(key) : std::string();
    }
    // Absent: `out` keeps its default.
    template <class E, std::size_t N>
    void optional_enumeration(const char* key, E& out,
                              const std::array<EnumName<E>, N>& table) const {
        if (meta_.contains(key)) enumeration(key, out, table);
    }
    template <class N>
    void optional_number(const char* key, N& out, std::type_identity_t<N> min_value) const {
        if (meta_.contains(key)) number(key, out, min_value);
    }

    void boolean(const char* key, bool& out) const {
        const std::string& s = get(key);
        if (s != "true" && s != "false") fail(key, ": expected true or false (got \"" + s + "\")");
        out = s == "true";
    }

    void checksum(const char* key, std::uint64_t& out) const {
        const std::string& s = get(key);
        const char* first = s.data() + kChecksumPrefix.size();
        const char* last = s.data() + s.size();
        const bool prefixed =
            s.size() == kChecksumPrefix.size() + 16 && s.starts_with(kChecksumPrefix);
        if (!prefixed || std::from_chars(first, last, out, 16).ptr != last) {
            fail(key, ": expected fnv1a64: and 16 hex digits (got \"" + s + "\")");
        }
    }

private:
    [[noreturn]] void fail(const char* key, const std::string& what) const {
        bad(path_, std::string("metadata key '") + key + "'" + what);
    }

    const std::string& get(const char* key) const {
        const auto it = meta_.find(key);
        if (it == meta_.end()) fail(key, " missing");
        return it->second;
    }

    const std::map<std::string, std::string>& meta_;
    const std::string& path_;
};

ojson metadata_of(const std::string& format, const CheckpointInfo& info) {
    ojson meta = ojson::object();
    meta["format"] = format;
    MetaWriter w(meta);
    CheckpointInfo copy = info;
    visit_metadata(w, copy);
    return meta;
}

CheckpointInfo parse_metadata(const std::map<std::string, std::string>& meta,
                              const std::string& path) {
    CheckpointInfo info;
    // Without the key: current scaling, which every fp8-amp run used before delayed scaling.
    info.options.plan.fp8_amax_history = 0;
    MetaReader r(meta, path);
    visit_metadata(r, info);
    info.options.optimizer.kind = info.options.plan.optimizer;
    const PlanInputs& plan = info.options.plan;  // else the trainer would blame --lora-rank
    if (plan.finetune != Finetune::full && plan.lora_rank <= 0) {
        bad(path, "metadata key 'lora_rank': expected an integer >= 1 with finetune '" +
                      std::string(enum_name(kFinetuneNames, plan.finetune)) + "' (got " +
                      (meta.contains("lora_rank") ? "\"" + meta.at("lora_rank") + "\""
                                                  : std::string("none")) +
                      ")");
    }
    return info;
}

// The JSON header, space-padded to a multiple of 8 bytes (as the safetensors library pads it).
std::string header_text(const ojson& metadata, const std::vector<CheckpointTensor>& tensors) {
    ojson h = ojson::object();
    h["__metadata__"] = metadata;
    std::uint64_t offset = 0;
    for (const CheckpointTensor& t : tensors) {
        const std::uint64_t n = tensor_bytes(t);
        h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                     {"shape", t.shape},
                     {"data_offsets", ojson::array({offset, offset + n})}};
        offset += n;
    }
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
}

// The DType of a tensor napkin stores, or InputError naming it.
DType stored_dtype(const SafetensorsTensor& t, const std::string& path) {
    const auto dtype = find_enum(kSafetensorsDTypes, t.dtype_name);
    if (!dtype) {
        bad(path, "tensor '" + t.name + "': dtype " + t.dtype_name +
                      " is not one napkin stores (F32, BF16, F16, I8)");
    }
    return *dtype;
}

// One tensor of the table, as the header hash sees it: "F32 [384, 128] 0 196608".
std::string table_line(const std::string& dtype, const std::vector<std::int64_t>& shape,
                       std::uint64_t begin, std::uint64_t end) {
    return dtype + " " + dims_text(shape) + " " + std::to_string(begin) + " " + std::to_string(end);
}

// FNV-1a 64 of the header as napkin reads it: every metadata key but "header_checksum" with its
// value, then every tensor's table line, each list by name, fields NUL-separated. The data
// checksum cannot see the header: without this a flipped bit of "step" or "lr" resumes a
// different run silently.
std::uint64_t header_hash(const std::map<std::string, std::string>& meta,
                          const std::map<std::string, std::string>& table) {
    std::uint64_t hash = kFnv1a64Basis;
    for (const auto* list : {&meta, &table}) {
        for (const auto& [key, value] : *list) {
            if (list == &meta && key == kHeaderChecksumKey) continue;
            hash = fnv1a64(key.data(), key.size() + 1, hash);  // with its NUL
            hash = fnv1a64(value.data(), value.size() + 1, hash);
        }
    }
    return hash;
}

// The header hash of what write_checkpoint_file is about to write (offsets as header_text
// assigns them).
std::uint64_t header_hash_of(const ojson& meta, const std::vector<CheckpointTensor>& tensors) {
    std::map<std::string, std::string> m, table;
    for (const auto& [key, value] : meta.items())
        m[key] = value.get<std::string>();
    std::uint64_t offset = 0;
    for (const CheckpointTensor& t : tensors) {
        const std::uint64_t n = tensor_bytes(t);
        table[t.name] = table_line(std::string(enum_name(kSafetensorsDTypes, t.dtype)), t.shape,
                                   offset, offset + n);
        offset += n;
    }
    return header_hash(m, table);
}

}  // namespace

std::string safetensors_dtype_name(DType t) {
    return std::string(enum_name(kSafetensorsDTypes, t));
}

std::string dims_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string checksum_text(std::uint64_t hash) {
    return std::string(kChecksumPrefix) + hex64(hash);
}

std::string checkpoint_options_text(const TrainOptions& options) {
    CheckpointInfo info;
    info.options = options;
    ojson meta = metadata_of("", info);
    for (const char* loop_key : {"format", "step", "update_count", "data_position", "loss_scale",
                                 "good_steps", "data_bytes", "checksum"})
        meta.erase(loop_key);
    return meta.dump();
}

WrittenCheckpoint write_checkpoint_file(
    const std::string& path, const std::string& format, CheckpointInfo info,
    const std::vector<std::pair<std::string, std::string>>& extra,
    std::vector<CheckpointTensor> tensors) {
    std::stable_sort(tensors.begin(), tensors.end(),
                     [](const CheckpointTensor& a, const CheckpointTensor& b) {
                         return dtype_bits(a.dtype) > dtype_bits(b.dtype);
                     });
    std::uint64_t data_bytes = 0, hash = kFnv1a64Basis;
    for (const CheckpointTensor& t : tensors) {
        const std::uint64_t n = tensor_bytes(t);
        hash = fnv1a64(t.data, static_cast<std::size_t>(n), hash);
        data_bytes += n;
    }
    info.data_bytes = data_bytes;
    info.checksum = hash;
    ojson meta = metadata_of(format, info);
    for (const auto& [key, value] : extra)
        meta[key] = value;
    meta[kHeaderChecksumKey] = checksum_text(header_hash_of(meta, tensors));
    const std::string header = header_text(meta, tensors);

    DurableFile f(path);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
        len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    f.write(len, sizeof len);
    f.write(header);
    for (const CheckpointTensor& t : tensors)
        f.write(t.data, static_cast<std::size_t>(tensor_bytes(t)));
    if (!f.commit()) throw InputError(f.error());
    return {8 + header.size() + data_bytes, data_bytes, hash};
}

// Everything but the checksum: the safetensors structure (core/safetensors.h), the format, the
// metadata, the sizes (truncation, trailing bytes), napkin's dtypes and the tiling.
CheckpointReader::CheckpointReader(const std::string& path, const std::string& expected_format)
    : file_(std::make_unique<const SafetensorsFile>(path)) {
    const std::map<std::string, std::string>& meta = file_->metadata();
    const auto format = meta.find("format");
    if (format == meta.end() || format->second != expected_format) {
        bad(path, "not a napkin checkpoint (format " +
                      (format == meta.end() ? std::string("missing from __metadata__")
                                            : "\"" + format->second + "\"") +
                      ", expected \"" + expected_format + "\")");
    }
    info_ = parse_metadata(meta, path);
    const std::uint64_t present = file_->data_bytes(), expected = info_.data_bytes;
    if (present < expected) {
        bad(path, "truncated: the data section has " + std::to_string(present) + " of its " +
                      std::to_string(expected) + " bytes");
    }
    if (present > expected) {
        bad(path, "size mismatch: " + std::to_string(present - expected) + " bytes past the " +
                      std::to_string(expected) + "-byte data section");
    }
    std::map<std::string, std::string> table;
    for (const SafetensorsTensor& t : file_->tensors()) {
        tensors_.emplace(t.name,
                         CheckpointFileTensor{stored_dtype(t, path), t.shape, t.begin, t.end});
        table[t.name] = table_line(t.dtype_name, t.shape, t.begin, t.end);
    }
    verify_header(meta, table);
    // As the safetensors library requires: the tensors tile the data section, no gap, no overlap.
    file_->check_tiled();
    info_.tensor_count = tensors_.size();
}

void CheckpointReader::verify_header(const std::map<std::string, std::string>& meta,
                                     const std::map<std::string, std::string>& table) const {
    const auto it = meta.find(kHeaderChecksumKey);
    // Files of napkin before the header checksum have none: their header is trusted as before.
    if (it == meta.end()) return;
    const std::uint64_t hash = header_hash(meta, table);
    if (it->second != checksum_text(hash)) {
        bad(path(), "header checksum mismatch: the metadata and tensor table hash to " +
                        checksum_text(hash) + ", the header records " + it->second +
                        " (a value of the header was changed; the file is corrupt)");
    }
}

const CheckpointFileTensor* CheckpointReader::find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::int64_t CheckpointReader::meta_int(const char* key, std::int64_t min_value) const {
    MetaReader r(file_->metadata(), path());
    std::int64_t v = 0;
    r.number(key, v, min_value);
    return v;
}

void CheckpointReader::read(const CheckpointFileTensor& t, std::uint64_t offset, void* out,
                            std::size_t n) const {
    NAPKIN_ASSERT(t.begin + offset + n <= t.end, "checkpoint read past a tensor's end");
    file_->read(t.begin + offset, out, n);
}

void CheckpointReader::verify_checksum() const {
    std::vector<unsigned char> buf(kChunkBytes);
    std::uint64_t hash = kFnv1a64Basis;
    for (std::uint64_t done = 0; done < info_.data_bytes;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, info_.data_bytes - done));
        file_->read(done, buf.data(), n);
        hash = fnv1a64(buf.data(), n, hash);
        done += n;
    }
    if (hash != info_.checksum) {
        bad(path(), "checksum mismatch: the data section hashes to " +
                        std::string(kChecksumPrefix) + hex64(hash) + ", the header records " +
                        std::string(kChecksumPrefix) + hex64(info_.checksum) +
                        " (the file is corrupt)");
    }
}

}  // namespace napkin
