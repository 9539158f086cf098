#include "core/engine/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "core/check.h"
#include "core/config_json.h"

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

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors library's own limit
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::string_view kChecksumPrefix = "fnv1a64:";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
    checkpoint_error(path, what);
}

std::string errno_text(int err) {
    return std::generic_category().message(err);
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
    v.optional_text("data_fingerprint", info.data_fingerprint);  // absent before 2026-11-25
    // Absent before 2026-11-26 (full fine-tuning only then).
    v.optional_enumeration("finetune", o.plan.finetune, kFinetuneNames);
    v.optional_number("lora_rank", o.plan.lora_rank, 0);
    v.optional_number("lora_alpha", o.plan.lora_alpha, 0.0f);
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
    MetaReader(const ojson& meta, const std::string& path) : meta_(meta), path_(path) {}

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

    // The whole text must parse: an integer >= min_value, or any float.
    template <class N>
    void number(const char* key, N& out,
                std::type_identity_t<N> min_value = std::numeric_limits<N>::lowest()) const {
        const std::string& s = get(key);
        const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        if (ec != std::errc{} || ptr != s.data() + s.size() || s.empty() || out < min_value) {
            const std::string want = std::is_integral_v<N>
                                         ? "an integer >= " + std::to_string(min_value)
                                         : std::string("a number");
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
        if (!it->is_string()) fail(key, ": expected a string");
        return it->get_ref<const std::string&>();
    }

    const ojson& meta_;
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

CheckpointInfo parse_metadata(const ojson& meta, const std::string& path) {
    CheckpointInfo info;
    MetaReader r(meta, path);
    visit_metadata(r, info);
    info.options.optimizer.kind = info.options.plan.optimizer;
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

// Makes the rename itself durable (best effort: some file systems refuse to fsync a folder).
void sync_parent_folder(const std::string& path) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    const std::string folder = parent.empty() ? "." : parent.string();
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

// ---- reading ----

std::FILE* open_for_reading(const std::string& path, std::uint64_t& file_bytes) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        const int err = errno;
        bad(path, "cannot open (" + errno_text(err) + ")");
    }
    struct stat st {};
    if (::fstat(::fileno(f), &st) != 0) {
        const int err = errno;
        std::fclose(f);
        bad(path, "cannot stat (" + errno_text(err) + ")");
    }
    if (!S_ISREG(st.st_mode)) {
        std::fclose(f);
        bad(path, "not a regular file");
    }
    file_bytes = static_cast<std::uint64_t>(st.st_size);
    return f;
}

void read_at(std::FILE* f, const std::string& path, std::uint64_t offset, void* out,
             std::size_t n) {
    if (::fseeko(f, static_cast<off_t>(offset), SEEK_SET) != 0 || std::fread(out, 1, n, f) != n) {
        const int err = errno;
        const std::string why =
            std::ferror(f) != 0 ? errno_text(err) : std::string("unexpected end of file");
        bad(path, "read failed at byte " + std::to_string(offset) + " (" + why + ")");
    }
}

CheckpointFileTensor parse_tensor(const std::string& name, const ojson& v, std::uint64_t data_bytes,
                                  const std::string& path) {
    const std::string what = "tensor '" + name + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
        bad(path, what + "expected an object with dtype, shape and data_offsets");
    }
    CheckpointFileTensor t;
    const ojson& dt = v["dtype"];
    const auto dtype = dt.is_string()
                           ? find_enum(kSafetensorsDTypes, dt.get_ref<const std::string&>())
                           : std::nullopt;
    if (!dtype)
        bad(path, what + "dtype " + dt.dump() + " is not one napkin stores (F32, BF16, F16, I8)");
    t.dtype = *dtype;
    const ojson& shape = v["shape"];
    if (!shape.is_array() || shape.size() > 8)
        bad(path, what + "shape: expected an array of at most 8 sizes");
    std::uint64_t numel = 1;
    for (const ojson& d : shape) {
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() > data_bytes) {
            bad(path, what + "shape: " + d.dump() + " is not a size that fits the file");
        }
        const std::uint64_t dim = d.get<std::uint64_t>();
        t.shape.push_back(static_cast<std::int64_t>(dim));
        // Saturates past the data section's size (which then fails the span check below)
        // rather than overflowing.
        numel = dim != 0 && numel > (data_bytes + 1) / dim ? data_bytes + 1 : numel * dim;
    }
    const ojson& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned() || off[0].get<std::uint64_t>() > off[1].get<std::uint64_t>() ||
        off[1].get<std::uint64_t>() > data_bytes) {
        bad(path, what + "data_offsets " + off.dump() + " do not lie within the " +
                      std::to_string(data_bytes) + "-byte data section");
    }
    t.begin = off[0].get<std::uint64_t>();
    t.end = off[1].get<std::uint64_t>();
    if (t.end - t.begin != storage_bytes(t.dtype, numel)) {
        bad(path, what + "data_offsets span " + std::to_string(t.end - t.begin) + " bytes, but " +
                      safetensors_dtype_name(t.dtype) + " " + dims_text(t.shape) + " needs " +
                      std::to_string(storage_bytes(t.dtype, numel)));
    }
    return t;
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
    const std::string header = header_text(meta, tensors);

    const std::string tmp = path + ".tmp";
    int err = 0;
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) {
        err = errno;
        bad(path, "cannot write the checkpoint (" + tmp + ": " + errno_text(err) + ")");
    }
    auto put = [&](const void* p, std::size_t n) {
        if (err == 0 && std::fwrite(p, 1, n, f) != n) err = errno != 0 ? errno : EIO;
    };
    unsigned char len[8];
    for (int i = 0; i < 8; ++i)
        len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    put(len, sizeof len);
    put(header.data(), header.size());
    for (const CheckpointTensor& t : tensors)
        put(t.data, static_cast<std::size_t>(tensor_bytes(t)));
    if (err == 0 && std::fflush(f) != 0) err = errno;
    if (err == 0 && ::fsync(::fileno(f)) != 0) err = errno;
    if (std::fclose(f) != 0 && err == 0) err = errno;
    if (err != 0) {
        std::remove(tmp.c_str());
        bad(path, "cannot write the checkpoint (" + tmp + ": " + errno_text(err) + ")");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        err = errno;
        std::remove(tmp.c_str());
        bad(path, "cannot rename " + tmp + " into place (" + errno_text(err) + ")");
    }
    sync_parent_folder(path);
    return {8 + header.size() + data_bytes, data_bytes, hash};
}

void write_text_file_durably(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    int err = f == nullptr ? errno : 0;
    if (f != nullptr) {
        if (std::fwrite(text.data(), 1, text.size(), f) != text.size())
            err = errno != 0 ? errno : EIO;
        if (err == 0 && std::fflush(f) != 0) err = errno;
        if (err == 0 && ::fsync(::fileno(f)) != 0) err = errno;
        if (std::fclose(f) != 0 && err == 0) err = errno;
    }
    if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err != 0) {
        std::remove(tmp.c_str());
        bad(path, "cannot write (" + tmp + ": " + errno_text(err) + ")");
    }
    sync_parent_folder(path);
}

// Everything but the checksum: the structure, the metadata, and the sizes (truncation).
CheckpointReader::CheckpointReader(const std::string& path, const std::string& expected_format)
    : path_(path), file_(open_for_reading(path, file_bytes_)) {
    if (file_bytes_ < 8) {
        bad(path_, "truncated or not a checkpoint: " + std::to_string(file_bytes_) +
                       " bytes, shorter than the 8-byte safetensors header length");
    }
    unsigned char len[8];
    read_at(file_.get(), path_, 0, len, sizeof len);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = (n << 8) | len[i];
    if (n > kMaxHeaderBytes) {
        bad(path_, "not a safetensors file (header length " + std::to_string(n) +
                       " bytes is implausible)");
    }
    if (8 + n > file_bytes_) {
        bad(path_, "truncated: the header needs " + std::to_string(n) + " bytes, " +
                       std::to_string(file_bytes_ - 8) + " follow its length");
    }
    std::string text(n, '\0');
    read_at(file_.get(), path_, 8, text.data(), text.size());
    ojson h;
    try {
        h = ojson::parse(text);
    } catch (const ojson::exception& e) {
        std::string msg = e.what();
        const auto pos = msg.find("parse error");
        if (pos != std::string::npos) msg = msg.substr(pos);
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        bad(path_, "header is not valid JSON: " + msg);
    }
    if (!h.is_object()) bad(path_, "header is not a JSON object");
    const auto meta = h.find("__metadata__");
    if (meta == h.end() || !meta->is_object())
        bad(path_, "not a napkin checkpoint (no __metadata__ in the header)");
    const auto format = meta->find("format");
    if (format == meta->end() || !format->is_string() ||
        format->get_ref<const std::string&>() != expected_format) {
        bad(path_, "not a napkin checkpoint (format " +
                       (format == meta->end() ? std::string("missing") : format->dump()) +
                       ", expected \"" + expected_format + "\")");
    }

    meta_ = *meta;
    info_ = parse_metadata(*meta, path_);
    data_start_ = 8 + n;
    const std::uint64_t present = file_bytes_ - data_start_, expected = info_.data_bytes;
    if (present < expected) {
        bad(path_, "truncated: the data section has " + std::to_string(present) + " of its " +
                       std::to_string(expected) + " bytes");
    }
    if (present > expected) {
        bad(path_, "size mismatch: " + std::to_string(present - expected) + " bytes past the " +
                       std::to_string(expected) + "-byte data section");
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& [name, v] : h.items()) {
        if (name == "__metadata__") continue;
        CheckpointFileTensor t = parse_tensor(name, v, expected, path_);
        spans.emplace_back(t.begin, t.end);
        tensors_.emplace(name, std::move(t));
    }
    // As the safetensors library requires: the tensors tile the data section, no gap, no overlap.
    std::sort(spans.begin(), spans.end());
    std::uint64_t at = 0;
    for (const auto& [begin, end] : spans) {
        if (begin != at)
            bad(path_, "tensor data_offsets leave a gap or overlap at byte " + std::to_string(at));
        at = end;
    }
    if (at != expected) {
        bad(path_, "the tensors cover " + std::to_string(at) + " bytes of the " +
                       std::to_string(expected) + "-byte data section");
    }
    info_.tensor_count = tensors_.size();
}

const CheckpointFileTensor* CheckpointReader::find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::int64_t CheckpointReader::meta_int(const char* key, std::int64_t min_value) const {
    MetaReader r(meta_, path_);
    std::int64_t v = 0;
    r.number(key, v, min_value);
    return v;
}

void CheckpointReader::read(const CheckpointFileTensor& t, std::uint64_t offset, void* out,
                            std::size_t n) const {
    NAPKIN_ASSERT(t.begin + offset + n <= t.end, "checkpoint read past a tensor's end");
    read_at(file_.get(), path_, data_start_ + t.begin + offset, out, n);
}

void CheckpointReader::verify_checksum() const {
    std::vector<unsigned char> buf(kChunkBytes);
    std::uint64_t hash = kFnv1a64Basis;
    for (std::uint64_t done = 0; done < info_.data_bytes;) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, info_.data_bytes - done));
        read_at(file_.get(), path_, data_start_ + done, buf.data(), n);
        hash = fnv1a64(buf.data(), n, hash);
        done += n;
    }
    if (hash != info_.checksum) {
        bad(path_, "checksum mismatch: the data section hashes to " + std::string(kChecksumPrefix) +
                       hex64(hash) + ", the header records " + std::string(kChecksumPrefix) +
                       hex64(info_.checksum) + " (the file is corrupt)");
    }
}

}  // namespace napkin
