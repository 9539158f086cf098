#include "core/engine/zero_checkpoint.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/bounded_read.h"
#include "core/check.h"
#include "core/comm/shard_layout.h"
#include "core/durable_file.h"
#include "core/engine/checkpoint_file.h"
#include "core/engine/checkpoint_state.h"
#include "core/json_reader.h"
#include "kernels/optimizer.h"
#include "kernels/quantize.h"

namespace napkin {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kStepPrefix = "step-";

const char* kind_name(StateKind kind) {
    switch (kind) {
        case StateKind::weights:
            return "weights";
        case StateKind::master:
            return "master";
        case StateKind::first_moment:
            return "opt.m";
        case StateKind::second_moment:
            return "opt.v";
    }
    return "?";
}

std::string step_folder_name(int step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%08d", kStepPrefix, step);
    return buf;
}

// The step of a folder named step-<digits>, or -1.
int step_of_folder(const std::string& name) {
    if (!name.starts_with(kStepPrefix) || name.size() == std::strlen(kStepPrefix)) return -1;
    int step = -1;
    const char* first = name.data() + std::strlen(kStepPrefix);
    const auto [ptr, ec] = std::from_chars(first, name.data() + name.size(), step);
    return ec == std::errc{} && ptr == name.data() + name.size() && step >= 0 ? step : -1;
}

std::uint64_t options_hash(const TrainOptions& o) {
    const std::string text = checkpoint_options_text(o);
    return fnv1a64(text.data(), text.size());
}

// One unit's state of one kind as this rank keeps it: the whole padded unit or its shard; or a
// tensor outside the units (`tensor`), whole and the same on every rank: a frozen parameter's
// stored bytes (fine-tuning), or the block absmax of an 8-bit moment (adamw-8bit, stage 0).
struct Piece {
    std::string name;  // "h.3.opt.m"; `tensor`: the whole-state checkpoint's ("wte", "<w>.nf4")
    std::size_t unit = 0;
    StateKind kind = StateKind::weights;
    DType dtype = DType::f32;
    std::int64_t lo = 0, elements = 0;  // [lo, lo + elements) of the padded unit
    bool whole = false;                 // the same on every rank: only rank 0's file holds it
    Tensor* tensor = nullptr;           // a tensor outside the units, saved whole
    std::uint64_t bytes() const {
        return storage_bytes(dtype, static_cast<std::uint64_t>(elements));
    }
};

// A unit's frozen storage group in a stage-3 shard: "h.0.frozen_nf4", "h.0.frozen".
const char* frozen_suffix(int group) {
    return group == 0 ? ".frozen_nf4" : ".frozen";
}

// The first parameter in a unit (a trained one): whether the recipe keeps a kind is its.
std::size_t first_trained(const ShardLayout& layout) {
    for (std::size_t i = 0; i < layout.param_unit.size(); ++i) {
        if (layout.param_unit[i] >= 0) return i;
    }
    NAPKIN_ASSERT(false, "the shard layout trains nothing");
    return 0;
}

// A frozen parameter's pieces, as the whole-state checkpoint names them (checkpoint.h): its
// weights in the working dtype, or its NF4 codes "<name>.nf4" and state "<name>.nf4_state".
void frozen_pieces(ParamSlot& p, std::vector<Piece>& out) {
    if (p.weight.dtype() == DType::nf4) {
        for (auto [suffix, x] : {std::pair{".nf4", &p.weight}, std::pair{".nf4_state", &p.quant}}) {
            out.push_back({p.name + suffix, 0, StateKind::weights, DType::i8, 0,
                           static_cast<std::int64_t>(x->bytes()), true, x});
        }
        return;
    }
    out.push_back({p.name, 0, StateKind::weights, p.weight.dtype(), 0, p.numel, true, &p.weight});
}

// fp8-amp's delayed-scaling state (core/engine/gpt_fp8.h): the amax histories and scale pairs,
// the same on every rank (the ranks reduce their amaxes each step, ZeroEngine::reduce_fp8_amaxes),
// so kept whole: rank 0's file holds them, 1-D, under the whole-state checkpoint's names. In the
// model's memory, like its weights. None with current scaling.
void fp8_pieces(Trainer& t, std::vector<Piece>& out) {
    Gpt& model = t.model();
    for (auto [name, x] : {std::pair{"fp8.amax_history", model.fp8_amax_history()},
                           std::pair{"fp8.scales", model.fp8_scales()}}) {
        if (x == nullptr || x->empty()) continue;
        out.push_back({name, 0, StateKind::weights, DType::f32, 0, x->numel(), true, x});
    }
}

// A shard written with another fp8 amax history length than this trainer's: refused by name on
// every rank before anything else is compared (the histories' shapes differ).
void check_fp8_history(const CheckpointReader& r, const TrainOptions& trainer) {
    const PlanInputs& saved = r.info().options.plan;
    if (saved.precision != Precision::fp8_amp || trainer.plan.precision != Precision::fp8_amp ||
        saved.fp8_amax_history == trainer.plan.fp8_amax_history)
        return;
    checkpoint_error(r.path(), "fp8 amax history length differs: " +
                                   std::to_string(saved.fp8_amax_history) + " (checkpoint) vs " +
                                   std::to_string(trainer.plan.fp8_amax_history) + " (trainer)");
}

// Every piece of trainer t, by unit then kind (the kinds the recipe keeps), then the frozen
// parameters' in parameter order, then fp8-amp's delayed-scaling state.
std::vector<Piece> pieces_of(Trainer& t) {
    ZeroEngine* z = t.zero();
    NAPKIN_ASSERT(z != nullptr, "sharded checkpoints need the ZeRO engine (a data-parallel run)");
    const ShardLayout& layout = z->layout();
    std::vector<Piece> out;
    for (const StateKind kind : kStateKinds) {
        const HeldState h = held_state(t, first_trained(layout), kind);
        if (!h.present) continue;
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            const ShardUnit& su = layout.units[u];
            if (su.numel == 0) continue;
            const bool whole = kept_whole(z->stage(), kind);
            out.push_back({su.name + "." + kind_name(kind), u, kind, h.dtype,
                           whole ? 0 : z->comm().rank() * su.shard, whole ? su.padded : su.shard,
                           whole});
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Piece& a, const Piece& b) { return a.unit < b.unit; });
    std::vector<ParamSlot>& params = t.model().params();
    const std::vector<FrozenUnit>& frozen = z->frozen_layout();
    if (!frozen.empty()) {
        // Stage 3 shards the frozen base: this rank's shard of each unit's frozen storage.
        for (std::size_t u = 0; u < frozen.size(); ++u) {
            for (int g = 0; g < 2; ++g) {
                const FrozenGroup& fg = frozen[u].groups[g];
                if (fg.padded == 0) continue;
                Tensor& x = z->frozen_shard(u, g);
                out.push_back({layout.units[u].name + frozen_suffix(g), u, StateKind::weights, x.dtype(),
                               z->comm().rank() * fg.shard, fg.shard, false, &x});
            }
        }
    } else {
        for (std::size_t i = 0; i < params.size(); ++i) {
            if (layout.param_unit[i] < 0) frozen_pieces(params[i], out);
        }
    }
    fp8_pieces(t, out);
    // adamw-8bit at stages 1-3: each unit's shard of each moment's block absmax, beside the
    // codes' shards ("<unit>.opt.m.absmax": S_u / kOptimizer8bitBlock floats).
    const auto block = static_cast<std::int64_t>(kOptimizer8bitBlock);
    if (z->stage() >= 1 && t.options().plan.optimizer == OptimizerKind::adamw_8bit) {
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            const ShardUnit& su = layout.units[u];
            if (su.numel == 0) continue;
            for (const StateKind kind : {StateKind::first_moment, StateKind::second_moment}) {
                Tensor& x = z->unit_absmax(u, kind);
                out.push_back({su.name + "." + kind_name(kind) + ".absmax", u, kind, DType::f32,
                               z->comm().rank() * su.shard / block, su.shard / block, false, &x});
            }
        }
    }
    // adamw-8bit at stage 0: each moment's block absmax, kept whole by the ordinary optimizer,
    // beside its codes (which are in the units).
    if (z->stage() == 0 && t.options().plan.optimizer == OptimizerKind::adamw_8bit) {
        Optimizer& opt = t.optimizer();
        for (std::size_t i = 0; i < params.size(); ++i) {
            if (layout.param_unit[i] < 0) continue;
            for (auto [kind, scales] : {std::pair{StateKind::first_moment, &opt.first_moment_absmax()},
                                        std::pair{StateKind::second_moment, &opt.second_moment_absmax()}}) {
                Tensor& x = scales->at(i);
                out.push_back({params[i].name + state_suffix(kind) + ".absmax", 0, kind, DType::f32, 0,
                               x.numel(), true, &x});
            }
        }
    }
    return out;
}

// Copies a piece between the trainer's state and a buffer laid out as the piece (to_buffer), or
// back. At stage 0 the state lives in per-parameter tensors; at stages 1-3 the engine's unit
// tensor is the piece itself.
// The state may live on the trainer's device: every byte goes through checkpoint_state.h's
// state_on_host / state_from_host.
void copy_piece(Trainer& t, const Piece& p, char* buf, bool to_buffer) {
    ZeroEngine& z = *t.zero();
    std::vector<char> staging;
    auto copy = [&](char* host, char* state, std::size_t n) {
        if (to_buffer)
            std::memcpy(host, state_on_host(t, p.kind, state, n, staging), n);
        else
            state_from_host(t, p.kind, state, host, n);
    };
    if (p.tensor != nullptr) {
        NAPKIN_ASSERT(p.tensor->bytes() == p.bytes(), "checkpoint piece " << p.name << " is "
                                                                          << p.tensor->bytes()
                                                                          << " bytes, expected "
                                                                          << p.bytes());
        copy(buf, static_cast<char*>(p.tensor->raw()), static_cast<std::size_t>(p.bytes()));
        return;
    }
    if (z.stage() >= 1) {
        Tensor& x = z.unit_state(p.unit, p.kind);
        NAPKIN_ASSERT(x.bytes() == p.bytes(), "checkpoint piece " << p.name << " is " << x.bytes()
                                                                  << " bytes, expected "
                                                                  << p.bytes());
        copy(buf, static_cast<char*>(x.raw()), static_cast<std::size_t>(x.bytes()));
        return;
    }
    const ShardLayout& layout = z.layout();
    if (to_buffer) std::memset(buf, 0, static_cast<std::size_t>(p.bytes()));  // the padding
    for (const std::size_t i : layout.units[p.unit].params) {
        const HeldState h = held_state(t, i, p.kind);
        const std::int64_t at = layout.param_offset[i] + h.first - p.lo;
        NAPKIN_ASSERT(at >= 0 && at + h.count <= p.elements,
                      "checkpoint piece " << p.name << " does not hold parameter " << i);
        char* b = buf + storage_bytes(p.dtype, static_cast<std::uint64_t>(at));
        const auto n =
            static_cast<std::size_t>(storage_bytes(p.dtype, static_cast<std::uint64_t>(h.count)));
        copy(b, h.data, n);
    }
}

fs::path shard_path(const Manifest& m, int rank) {
    return m.dir / m.shards.at(static_cast<std::size_t>(rank)).file;
}

// Opens rank's shard and checks it against the manifest: its rank, world and stage, its size and
// its checksum as recorded (the data itself is hashed by verify_checksum()).
CheckpointReader open_shard(const Manifest& m, int rank) {
    const std::string path = shard_path(m, rank).string();
    CheckpointReader r(path, kShardFormat);
    const ManifestShard& s = m.shards.at(static_cast<std::size_t>(rank));
    auto expect = [&](const char* key, std::int64_t want) {
        const std::int64_t got = r.meta_int(key, 0);
        if (got != want) {
            checkpoint_error(path, std::string("metadata key '") + key + "' is " +
                                       std::to_string(got) + ", the manifest says " +
                                       std::to_string(want));
        }
    };
    expect("rank", rank);
    expect("world", m.world);
    expect("zero", m.zero);
    if (r.info().steps_done != m.step) {
        checkpoint_error(path, "step " + std::to_string(r.info().steps_done) +
                                   ", the manifest's is " + std::to_string(m.step));
    }
    if (r.file_bytes() != s.file_bytes || r.info().checksum != s.checksum) {
        checkpoint_error(path, "does not match the manifest (" + std::to_string(r.file_bytes()) +
                                   " bytes, " + checksum_text(r.info().checksum) +
                                   "; the manifest records " + std::to_string(s.file_bytes) +
                                   " bytes, " + checksum_text(s.checksum) + ")");
    }
    if (options_hash(r.info().options) != m.options_hash) {
        checkpoint_error(path, "its run options do not hash to the manifest's options_hash");
    }
    return r;
}

void check_piece(const CheckpointReader& r, const std::string& name, DType dtype,
                 std::int64_t elements) {
    const CheckpointFileTensor* ft = r.find(name);
    if (ft == nullptr) checkpoint_error(r.path(), "tensor '" + name + "' missing");
    if (ft->dtype != dtype || ft->shape != std::vector<std::int64_t>{elements}) {
        checkpoint_error(r.path(), "tensor '" + name + "': " + safetensors_dtype_name(ft->dtype) +
                                       " " + dims_text(ft->shape) + ", expected " +
                                       safetensors_dtype_name(dtype) + " [" +
                                       std::to_string(elements) + "]");
    }
}

std::uint64_t parse_checksum(const std::string& text, const std::string& path) {
    std::uint64_t v = 0;
    const std::string prefix = "fnv1a64:";
    const char* last = text.data() + text.size();
    if (text.size() != prefix.size() + 16 || !text.starts_with(prefix) ||
        std::from_chars(text.data() + prefix.size(), last, v, 16).ptr != last) {
        checkpoint_error(path, "checksum \"" + text + "\": expected fnv1a64: and 16 hex digits");
    }
    return v;
}

// A sharded checkpoint read back whole, for one process: every rank's shard opened and verified,
// then each state rebuilt (a unit's shards back to back, or rank 0's whole copy) and cut into
// the whole-state checkpoint's tensors (checkpoint.h). The tensors point into buffers owned
// here, which never move (a deque).
class Consolidation {
public:
    explicit Consolidation(const Manifest& m);
    CheckpointInfo write(const std::string& out_path);

private:
    std::vector<char>& buffer(std::size_t bytes) { return buffers_.emplace_back(bytes); }
    // The ranks' shards of `name`, `shard` elements each, back to back into `flat`.
    void gather(const std::string& name, DType dtype, std::int64_t shard, std::vector<char>& flat);
    // Rank 0's whole copy of a tensor outside the units (a frozen parameter, an 8-bit moment's
    // absmax), 1-D, `shape` elements when given, else as the file says.
    void copy_whole(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape);
    void gather_units();
    void gather_absmax();
    void gather_frozen_storage();
    void add_parameter(std::size_t i);
    void add_fp8_state();

    const Manifest& m_;
    std::vector<CheckpointReader> readers_;
    CheckpointInfo info_;
    std::int64_t lora_rank_ = 0;
    ShardLayout layout_;
    std::vector<ParamTensor> shapes_;
    std::vector<std::pair<StateKind, DType>> kinds_;   // the states the run kept, their dtypes
    std::vector<std::vector<const char*>> unit_data_;  // per unit, per kind: the whole state
    std::vector<std::array<const char*, 2>> absmax_;   // per unit: the moments' absmax, whole
    std::vector<FrozenUnit> frozen_;                   // stage 3: the frozen base's layout
    std::vector<std::array<const char*, 2>> storage_;  // per unit: its frozen storage, whole
    std::vector<std::vector<std::pair<std::size_t, const FrozenBlob*>>> blobs_of_;
    std::deque<std::vector<char>> buffers_;
    std::vector<CheckpointTensor> tensors_;
};

Consolidation::Consolidation(const Manifest& m) : m_(m) {
    for (int rank = 0; rank < m.world; ++rank) {
        readers_.push_back(open_shard(m, rank));
        readers_.back().verify_checksum();
    }
    info_ = readers_[0].info();
    const PlanInputs& plan = info_.options.plan;
    lora_rank_ = plan.finetune != Finetune::full ? plan.lora_rank : 0;
    layout_ = shard_layout(info_.options.model, m.world, lora_rank_,
                           m.zero >= 1 ? shard_alignment(plan.optimizer) : 1);
    shapes_ = param_tensors(info_.options.model, lora_rank_);
    NAPKIN_ASSERT(shapes_.size() == layout_.param_unit.size(), "layout and parameters disagree");
    const ShardUnit& first =
        layout_.units[static_cast<std::size_t>(layout_.param_unit[first_trained(layout_)])];
    for (const StateKind kind : kStateKinds) {
        const CheckpointFileTensor* ft = readers_[0].find(first.name + "." + kind_name(kind));
        if (ft != nullptr) kinds_.emplace_back(kind, ft->dtype);
    }
}

void Consolidation::gather(const std::string& name, DType dtype, std::int64_t shard,
                           std::vector<char>& flat) {
    const auto shard_bytes =
        static_cast<std::size_t>(storage_bytes(dtype, static_cast<std::uint64_t>(shard)));
    flat.resize(shard_bytes * static_cast<std::size_t>(m_.world));
    for (int rank = 0; rank < m_.world; ++rank) {
        const CheckpointReader& r = readers_[static_cast<std::size_t>(rank)];
        check_piece(r, name, dtype, shard);
        r.read(*r.find(name), 0, flat.data() + static_cast<std::size_t>(rank) * shard_bytes,
               shard_bytes);
    }
}

void Consolidation::copy_whole(const std::string& name, DType dtype,
                               const std::vector<std::int64_t>& shape) {
    const CheckpointReader& r = readers_[0];
    const CheckpointFileTensor* ft = r.find(name);
    if (ft == nullptr) checkpoint_error(r.path(), "tensor '" + name + "' missing");
    std::uint64_t n = 1;
    for (const std::int64_t d : ft->shape)
        n *= static_cast<std::uint64_t>(d);
    std::int64_t want = 1;
    for (const std::int64_t d : shape)
        want *= d;
    if (ft->dtype != dtype || ft->shape.size() != 1 || (!shape.empty() && ft->shape[0] != want)) {
        checkpoint_error(r.path(), "tensor '" + name + "': " + safetensors_dtype_name(ft->dtype) +
                                       " " + dims_text(ft->shape) + ", expected 1-D " +
                                       safetensors_dtype_name(dtype) +
                                       (shape.empty() ? "" : " [" + std::to_string(want) + "]"));
    }
    std::vector<char>& bytes = buffer(static_cast<std::size_t>(storage_bytes(dtype, n)));
    r.read(*ft, 0, bytes.data(), bytes.size());
    tensors_.push_back({name, dtype, shape.empty() ? ft->shape : shape, bytes.data()});
}

// Each unit's state whole (P_u elements): rank 0's copy where the stage kept it whole, else the
// ranks' shards back to back.
void Consolidation::gather_units() {
    unit_data_.resize(layout_.units.size());
    for (std::size_t u = 0; u < layout_.units.size(); ++u) {
        const ShardUnit& su = layout_.units[u];
        if (su.numel == 0) continue;
        for (const auto& [kind, dtype] : kinds_) {
            const std::string name = su.name + "." + kind_name(kind);
            std::vector<char>& flat = buffer(0);
            if (kept_whole(m_.zero, kind)) {
                check_piece(readers_[0], name, dtype, su.padded);
                flat.resize(static_cast<std::size_t>(
                    storage_bytes(dtype, static_cast<std::uint64_t>(su.padded))));
                readers_[0].read(*readers_[0].find(name), 0, flat.data(), flat.size());
            } else {
                gather(name, dtype, su.shard, flat);
            }
            unit_data_[u].push_back(flat.data());
        }
    }
}

// adamw-8bit at stages 1-3: each unit's absmax whole again (P_u / block floats per moment), the
// ranks' shards back to back; each parameter's blocks are a run of them.
void Consolidation::gather_absmax() {
    absmax_.resize(layout_.units.size());
    if (m_.zero < 1 || info_.options.plan.optimizer != OptimizerKind::adamw_8bit) return;
    const auto block = static_cast<std::int64_t>(kOptimizer8bitBlock);
    for (std::size_t u = 0; u < layout_.units.size(); ++u) {
        const ShardUnit& su = layout_.units[u];
        if (su.numel == 0) continue;
        for (std::size_t k = 0; k < 2; ++k) {
            const StateKind kind = k == 0 ? StateKind::first_moment : StateKind::second_moment;
            std::vector<char>& flat = buffer(0);
            gather(su.name + "." + kind_name(kind) + ".absmax", DType::f32, su.shard / block, flat);
            absmax_[u][k] = flat.data();
        }
    }
}

// Stage 3 sharded the frozen base: each unit's storage whole again, the ranks' shards back to
// back, and each frozen tensor's blobs cut out of it (frozen_layout, core/comm/shard_layout.h).
void Consolidation::gather_frozen_storage() {
    blobs_of_.resize(shapes_.size());
    if (m_.zero != 3 || lora_rank_ == 0) return;
    const DType working = kinds_.front().second;
    const PlanInputs& plan = info_.options.plan;
    frozen_ = frozen_layout(info_.options.model, m_.world, lora_rank_,
                            plan.finetune == Finetune::qlora, storage_bytes(working, 1));
    storage_.resize(frozen_.size());
    for (std::size_t u = 0; u < frozen_.size(); ++u) {
        for (int g = 0; g < 2; ++g) {
            const FrozenGroup& fg = frozen_[u].groups[g];
            if (fg.padded == 0) continue;
            std::vector<char>& flat = buffer(0);
            gather(layout_.units[u].name + frozen_suffix(g), working, fg.shard, flat);
            storage_[u][static_cast<std::size_t>(g)] = flat.data();
        }
        for (const FrozenBlob& b : frozen_[u].blobs)
            blobs_of_[b.param].emplace_back(u, &b);
    }
}

// Parameter i's tensors of the whole-state checkpoint.
void Consolidation::add_parameter(std::size_t i) {
    const ParamTensor& p = shapes_[i];
    const PlanInputs& plan = info_.options.plan;
    const DType working = kinds_.front().second;
    if (layout_.param_unit[i] < 0 && !frozen_.empty()) {  // stage 3: cut from the storage
        for (const auto& [u, b] : blobs_of_[i]) {
            const char* data = storage_[u][static_cast<std::size_t>(b->group)] + b->offset;
            if (b->group == 1) {
                tensors_.push_back({p.name, working, p.shape, data});
            } else {
                tensors_.push_back({p.name + (b->nf4_state ? ".nf4_state" : ".nf4"),
                                    DType::i8,
                                    {static_cast<std::int64_t>(b->bytes)},
                                    data});
            }
        }
        return;
    }
    if (layout_.param_unit[i] < 0) {  // frozen, kept whole by rank 0
        if (plan.finetune == Finetune::qlora && p.linear_weight) {
            copy_whole(p.name + ".nf4", DType::i8, {});
            copy_whole(p.name + ".nf4_state", DType::i8, {});
        } else {
            copy_whole(p.name, working, p.shape);
        }
        return;
    }
    const auto u = static_cast<std::size_t>(layout_.param_unit[i]);
    for (std::size_t k = 0; k < kinds_.size(); ++k) {
        const auto [kind, dtype] = kinds_[k];
        tensors_.push_back({p.name + state_suffix(kind), dtype, p.shape,
                            unit_data_[u][k] + storage_bytes(dtype, static_cast<std::uint64_t>(
                                                                        layout_.param_offset[i]))});
    }
    if (plan.optimizer != OptimizerKind::adamw_8bit) return;
    for (std::size_t k = 0; k < 2; ++k) {
        const StateKind kind = k == 0 ? StateKind::first_moment : StateKind::second_moment;
        const std::string name = p.name + state_suffix(kind) + ".absmax";
        if (m_.zero == 0) {  // rank 0's, whole
            copy_whole(name, DType::f32, {});
            continue;
        }
        // The parameter's blocks of its unit's.
        const auto block = static_cast<std::int64_t>(kOptimizer8bitBlock);
        tensors_.push_back(
            {name,
             DType::f32,
             {optimizer_8bit_blocks(p.numel())},
             absmax_[u][k] +
                 static_cast<std::size_t>(layout_.param_offset[i] / block) * sizeof(float)});
    }
}

// fp8-amp's delayed-scaling state, rank 0's whole copy, shaped as the whole-state checkpoint
// holds it: (slots, H) and (slots, kFp8ScaleFloats).
void Consolidation::add_fp8_state() {
    const PlanInputs& plan = info_.options.plan;
    if (plan.precision != Precision::fp8_amp || plan.fp8_amax_history <= 0) return;
    const std::int64_t slots = fp8_slots(build_op_plan(info_.options.model, plan)).total();
    copy_whole("fp8.amax_history", DType::f32, {slots, plan.fp8_amax_history});
    copy_whole("fp8.scales", DType::f32, {slots, kFp8ScaleFloats});
}

CheckpointInfo Consolidation::write(const std::string& out_path) {
    gather_units();
    gather_absmax();
    gather_frozen_storage();
    for (std::size_t i = 0; i < shapes_.size(); ++i)
        add_parameter(i);
    add_fp8_state();
    // One process with the same global batch: it accumulates what the ranks did together.
    CheckpointInfo info = info_;
    info.options.grad_accum *= m_.world;
    const std::size_t tensor_count = tensors_.size();
    const WrittenCheckpoint w =
        write_checkpoint_file(out_path, kCheckpointFormat, info, {}, std::move(tensors_));
    info.data_bytes = w.data_bytes;
    info.checksum = w.checksum;
    info.tensor_count = tensor_count;
    return info;
}

}  // namespace

fs::path sharded_checkpoint_dir(const fs::path& run_dir, int step) {
    return run_dir / kShardedCheckpointsDir / step_folder_name(step);
}

fs::path save_sharded_checkpoint(const fs::path& run_dir, Trainer& t) {
    ZeroEngine* z = t.zero();
    NAPKIN_ASSERT(z != nullptr, "sharded checkpoints need the ZeRO engine (a data-parallel run)");
    Communicator& comm = z->comm();
    const CheckpointInfo info = checkpoint_info_of(t);
    const fs::path root = run_dir / kShardedCheckpointsDir;
    const fs::path dir = sharded_checkpoint_dir(run_dir, info.steps_done);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
        checkpoint_error(dir.string(),
                         "cannot create the checkpoint folder (" + ec.message() + ")");
    // A manifest left in this folder by an earlier run would name the shards about to be
    // replaced: it goes before any rank writes.
    if (comm.rank() == 0) fs::remove(dir / kManifestFileName, ec);
    comm.barrier();

    // Stage 0 keeps its state in per-parameter tensors: pack each unit; stages 1-3 write the
    // engine's unit tensors as they are (in host memory), or copied to the host (on a device).
    // What a stage keeps whole (stage 0: everything, stages 1-2: the weights) is the same on
    // every rank: rank 0 alone writes it, the others only their shards (at stage 0, none: their
    // files hold the metadata alone, which the loader checks against the manifest per rank).
    const int rank = comm.rank(), world = comm.world_size();
    const std::vector<Piece> pieces = pieces_of(t);
    std::vector<std::vector<char>> packed(pieces.size());
    std::vector<CheckpointTensor> tensors;
    for (std::size_t k = 0; k < pieces.size(); ++k) {
        const Piece& p = pieces[k];
        if (p.whole && rank != 0) continue;
        const char* data = nullptr;
        if (z->stage() >= 1 && p.tensor == nullptr) {
            Tensor& x = z->unit_state(p.unit, p.kind);
            data = state_on_host(t, p.kind, static_cast<const char*>(x.raw()),
                                 static_cast<std::size_t>(p.bytes()), packed[k]);
        } else {
            packed[k].resize(static_cast<std::size_t>(p.bytes()));
            copy_piece(t, p, packed[k].data(), true);
            data = packed[k].data();
        }
        tensors.push_back({p.name, p.dtype, {p.elements}, data});
    }
    const std::string file = "rank" + std::to_string(rank) + ".safetensors";
    const WrittenCheckpoint w = write_checkpoint_file((dir / file).string(), kShardFormat, info,
                                                      {{"rank", std::to_string(rank)},
                                                       {"world", std::to_string(world)},
                                                       {"zero", std::to_string(z->stage())}},
                                                      std::move(tensors));

    // Every rank has written and renamed its shard; rank 0 learns their sizes and checksums.
    comm.barrier();
    std::vector<ManifestShard> shards(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
        std::uint64_t sent[2] = {w.file_bytes, w.checksum};
        comm.broadcast(sent, sizeof sent, r, "checkpoint");
        shards[static_cast<std::size_t>(r)] = {r, "rank" + std::to_string(r) + ".safetensors",
                                               sent[0], sent[1]};
    }
    if (rank != 0) return dir;

    const ShardLayout& layout = z->layout();
    ojson units = ojson::array();
    for (const ShardUnit& su : layout.units) {
        units.push_back(
            {{"name", su.name}, {"numel", su.numel}, {"padded", su.padded}, {"shard", su.shard}});
    }
    ojson states = ojson::object();
    for (const StateKind kind : kStateKinds) {
        if (held_state(t, first_trained(layout), kind).present)
            states[kind_name(kind)] = kept_whole(z->stage(), kind) ? "whole" : "shard";
    }
    ojson files = ojson::array();
    for (const ManifestShard& s : shards) {
        files.push_back({{"rank", s.rank},
                         {"file", s.file},
                         {"bytes", s.file_bytes},
                         {"checksum", checksum_text(s.checksum)}});
    }
    const ojson manifest = {
        {"format", kManifestFormat},
        {"step", info.steps_done},
        {"world", world},
        {"zero", z->stage()},
        {"options_hash", checksum_text(options_hash(info.options))},
        {"layout", {{"units", units}, {"states", states}, {"whole_in_rank", 0}}},
        {"shards", files}};
    write_file_durably(dir / kManifestFileName, manifest.dump(2) + "\n");

    // The new checkpoint is complete: the others (older ones, a half-written one, those of an
    // earlier run in the same folder) go.
    for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
        if (e.path() != dir && step_of_folder(e.path().filename().string()) >= 0)
            fs::remove_all(e.path(), ec);
    }
    return dir;
}

Manifest read_manifest(const fs::path& manifest_path) {
    const std::string path = manifest_path.string();
    std::string text;
    if (std::string err = read_bounded_file(manifest_path, kMaxManifestBytes, text); !err.empty())
        checkpoint_error(path, err);
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        std::string msg = e.what();
        std::replace(msg.begin(), msg.end(), '\n', ' ');
        checkpoint_error(path, "not valid JSON: " + msg);
    }
    // Every field through the one JSON reader (core/json_reader.h): "<manifest>: shards[1].rank:
    // expected an integer >= 0, got 2.5", never a fraction taken as an integer.
    const JsonSource source = JsonSource::raising<InputError>(path);
    const JsonField root = JsonField(j, source).object();
    const std::string format = root["format"].string();
    if (format != kManifestFormat) {
        checkpoint_error(path, "format \"" + format + "\", expected \"" + kManifestFormat + "\"");
    }
    Manifest m;
    m.dir = manifest_path.parent_path();
    m.step = root["step"].integer<int>(0);
    m.world = root["world"].integer<int>(1);
    m.zero = root["zero"].integer<int>(0, 3);
    m.options_hash = parse_checksum(root["options_hash"].string(), path);
    const JsonField shards = root["shards"];
    m.shards = shards.elements([&](const JsonField& f) {
        ManifestShard s;
        s.rank = f["rank"].integer<int>(0);
        s.file = f["file"].string();
        s.file_bytes = f["bytes"].integer<std::uint64_t>();
        s.checksum = parse_checksum(f["checksum"].string(), path);
        return s;
    });
    if (m.shards.size() != static_cast<std::size_t>(m.world)) {
        shards.fail("expected an array of " + std::to_string(m.world) + " shards, one per rank");
    }
    for (std::size_t r = 0; r < m.shards.size(); ++r) {
        const ManifestShard& s = m.shards[r];
        if (s.rank != static_cast<int>(r) || s.file.empty() ||
            s.file.find('/') != std::string::npos || s.file == "." || s.file == "..") {
            checkpoint_error(path, "shard " + std::to_string(r) + ": expected rank " +
                                       std::to_string(r) +
                                       " and a file name within the step folder");
        }
    }
    return m;
}

std::optional<Manifest> last_complete_checkpoint(const fs::path& run_dir) {
    std::error_code ec;
    int best = -1;
    fs::path best_dir;
    for (const fs::directory_entry& e :
         fs::directory_iterator(run_dir / kShardedCheckpointsDir, ec)) {
        const int step = step_of_folder(e.path().filename().string());
        if (step > best && fs::is_regular_file(e.path() / kManifestFileName)) {
            best = step;
            best_dir = e.path();
        }
    }
    if (best < 0) return std::nullopt;
    return read_manifest(best_dir / kManifestFileName);
}

CheckpointInfo read_shard_info(const Manifest& m, int rank) {
    return open_shard(m, rank).info();
}

void check_resumable(const Manifest& m, int world, int zero) {
    if (m.world == world && m.zero == zero) return;
    const fs::path run_dir = m.dir.parent_path().parent_path();
    throw UsageError("{resume}: " + m.dir.string() + " was written by " + std::to_string(m.world) +
                     " rank" + (m.world == 1 ? "" : "s") + " at ZeRO-" + std::to_string(m.zero) +
                     ", this run has " + std::to_string(world) + " rank" + (world == 1 ? "" : "s") +
                     " at ZeRO-" + std::to_string(zero) + "; run `napkin ckpt consolidate " +
                     run_dir.string() + "` and resume from the file it writes ({resume} " +
                     (run_dir / kCheckpointFileName).string() + ")");
}

void load_sharded_checkpoint(const Manifest& m, Trainer& t) {
    ZeroEngine* z = t.zero();
    NAPKIN_ASSERT(z != nullptr, "sharded checkpoints need the ZeRO engine (a data-parallel run)");
    check_resumable(m, z->comm().world_size(), z->stage());
    const int rank = z->comm().rank();
    const CheckpointReader r = open_shard(m, rank);
    check_fp8_history(r, t.options());
    const std::string saved = checkpoint_options_text(r.info().options);
    if (saved != checkpoint_options_text(checkpoint_info_of(t).options)) {
        checkpoint_error(r.path(), "was written with other run options than this trainer's");
    }
    // The states kept whole are in rank 0's file; this rank's shards in its own.
    std::optional<CheckpointReader> rank0;
    if (rank != 0) rank0.emplace(open_shard(m, 0));
    const CheckpointReader& whole = rank0 ? *rank0 : r;
    const std::vector<Piece> pieces = pieces_of(t);
    std::size_t own = 0;
    for (const Piece& p : pieces) {
        check_piece(p.whole ? whole : r, p.name, p.dtype, p.elements);
        own += p.whole && rank != 0 ? 0 : 1;
    }
    // A shard of rank r > 0 written before whole states went to rank 0 alone holds them too
    // (the loader reads rank 0's copy, which is the same).
    if (r.tensors().size() != own && r.tensors().size() != pieces.size()) {
        checkpoint_error(r.path(), std::to_string(r.tensors().size()) +
                                       " tensors, this trainer's shard has " + std::to_string(own));
    }
    r.verify_checksum();
    if (rank0) rank0->verify_checksum();
    check_same_data(r.info(), t, r.path());

    // Every check has passed: the trainer's state is replaced.
    std::vector<char> buf;
    for (const Piece& p : pieces) {
        const CheckpointReader& from = p.whole ? whole : r;
        buf.resize(static_cast<std::size_t>(p.bytes()));
        from.read(*from.find(p.name), 0, buf.data(), buf.size());
        copy_piece(t, p, buf.data(), false);
    }
    restore_checkpoint_state(t, r.info());
}

CheckpointInfo consolidate_checkpoint(const Manifest& m, const std::string& out_path) {
    return Consolidation(m).write(out_path);
}

}  // namespace napkin
