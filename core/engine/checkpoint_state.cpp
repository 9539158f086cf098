#include "core/engine/checkpoint_state.h"

#include <algorithm>
#include <cstring>

#include "kernels/optimizer.h"

namespace napkin {

const char* state_suffix(StateKind kind) {
    switch (kind) {
        case StateKind::weights:
            return "";
        case StateKind::master:
            return ".master";
        case StateKind::first_moment:
            return ".opt.m";
        case StateKind::second_moment:
            return ".opt.v";
    }
    return "";
}

bool kept_whole(int stage, StateKind kind) {
    return stage == 0 || (kind == StateKind::weights && stage <= 2);
}

namespace {

HeldState whole(Tensor& x, std::int64_t numel) {
    if (x.empty()) return {};
    return {true, x.dtype(), static_cast<char*>(x.raw()), 0, numel};
}

Tensor* moment(Trainer& t, std::size_t param, StateKind kind) {
    std::vector<Tensor>& m = kind == StateKind::first_moment ? t.optimizer().first_moments()
                                                             : t.optimizer().second_moments();
    return m.empty() ? nullptr : &m.at(param);
}

}  // namespace

HeldState held_state(Trainer& t, std::size_t param, StateKind kind) {
    ParamSlot& p = t.model().params().at(param);
    ZeroEngine* z = t.zero();
    if (z == nullptr || kept_whole(z->stage(), kind)) {
        // One process, stage 0, or stage 1-2 weights: the model's tensor (at stages 1-2 a view
        // into the engine's whole unit) or the ordinary optimizer's moment.
        switch (kind) {
            case StateKind::weights:
                return whole(p.weight, p.numel);
            case StateKind::master:
                return whole(p.master, p.numel);
            default: {
                Tensor* m = moment(t, param, kind);
                return m == nullptr ? HeldState{} : whole(*m, p.numel);
            }
        }
    }
    const ShardLayout& layout = z->layout();
    if (layout.param_unit[param] < 0) return {};  // frozen: its weights alone, kept whole above
    const auto u = static_cast<std::size_t>(layout.param_unit[param]);
    const ShardUnit& su = layout.units[u];
    Tensor& x = z->unit_state(u, kind);
    if (x.empty()) return {};
    const std::int64_t lo = z->comm().rank() * su.shard, hi = lo + su.shard;
    const std::int64_t offset = layout.param_offset[param];
    const std::int64_t a = std::max(offset, lo), b = std::min(offset + p.numel, hi);
    HeldState h{true, x.dtype(), nullptr, 0, 0};
    if (a < b) {
        h.data = static_cast<char*>(x.raw()) +
                 storage_bytes(x.dtype(), static_cast<std::uint64_t>(a - lo));
        h.first = a - offset;
        h.count = b - a;
    }
    return h;
}

HeldState held_absmax(Trainer& t, std::size_t param, StateKind moment) {
    ParamSlot& p = t.model().params().at(param);
    if (t.options().plan.optimizer != OptimizerKind::adamw_8bit || !p.trainable) return {};
    ZeroEngine* z = t.zero();
    if (z == nullptr || z->stage() == 0) {
        Optimizer& opt = t.optimizer();
        Tensor& x = (moment == StateKind::second_moment ? opt.second_moment_absmax() : opt.first_moment_absmax()).at(param);
        return whole(x, x.numel());
    }
    const ShardLayout& layout = z->layout();
    const auto u = static_cast<std::size_t>(layout.param_unit[param]);
    const ShardUnit& su = layout.units[u];
    Tensor& x = z->unit_absmax(u, moment);
    const auto block = static_cast<std::int64_t>(kOptimizer8bitBlock);
    const std::int64_t lo = z->comm().rank() * su.shard, hi = lo + su.shard;
    const std::int64_t offset = layout.param_offset[param];
    const std::int64_t a = std::max(offset, lo), b = std::min(offset + p.numel, hi);
    HeldState h{true, DType::f32, nullptr, 0, 0};
    if (a < b) {  // a - offset and a - lo are multiples of the block (the layout's alignment)
        h.data = reinterpret_cast<char*>(x.data<float>() + (a - lo) / block);
        h.first = (a - offset) / block;
        h.count = (b - a + block - 1) / block;
    }
    return h;
}

HeldState held_frozen(Trainer& t, std::size_t param, bool nf4_state) {
    ZeroEngine* z = t.zero();
    if (z == nullptr || z->frozen_layout().empty()) return {};
    const std::vector<FrozenUnit>& fl = z->frozen_layout();
    for (std::size_t u = 0; u < fl.size(); ++u) {
        for (const FrozenBlob& b : fl[u].blobs) {
            if (b.param != param || b.nf4_state != nf4_state) continue;
            Tensor& x = z->frozen_shard(u, b.group);
            const std::uint64_t esize = storage_bytes(x.dtype(), 1);
            const std::uint64_t unit = b.group == 0 ? 1 : esize;  // I8 bytes or elements
            const auto shard_bytes = static_cast<std::uint64_t>(fl[u].groups[b.group].shard) * esize;
            const std::uint64_t lo = static_cast<std::uint64_t>(z->comm().rank()) * shard_bytes, hi = lo + shard_bytes;
            const std::uint64_t a = std::max(b.offset, lo), e = std::min(b.offset + b.bytes, hi);
            HeldState h{true, b.group == 0 ? DType::i8 : x.dtype(), nullptr, 0, 0};
            if (a < e) {
                h.data = static_cast<char*>(x.raw()) + (a - lo);
                h.first = static_cast<std::int64_t>((a - b.offset) / unit);
                h.count = static_cast<std::int64_t>((e - a) / unit);
            }
            return h;
        }
    }
    return {};
}

namespace {

// The device holding state `kind`, or null when it is in host memory.
EngineDevice* device_of(Trainer& t, StateKind kind) {
    const ZeroEngine* z = t.zero();
    if (z != nullptr && z->in_host_memory(kind)) return nullptr;
    return t.device();
}

}  // namespace

const char* state_on_host(Trainer& t, StateKind kind, const char* state, std::size_t bytes,
                          std::vector<char>& staging) {
    EngineDevice* d = device_of(t, kind);
    if (d == nullptr || bytes == 0) return state;
    staging.resize(bytes);
    d->copy_to_host(staging.data(), state, bytes);
    return staging.data();
}

void state_from_host(Trainer& t, StateKind kind, char* state, const char* host, std::size_t bytes) {
    if (bytes == 0) return;
    if (EngineDevice* d = device_of(t, kind))
        d->copy_to_device(state, host, bytes);
    else
        std::memcpy(state, host, bytes);
}

int update_count(Trainer& t) {
    ZeroEngine* z = t.zero();
    return z != nullptr && z->stage() >= 1 ? z->update_count() : t.optimizer().update_count();
}

void set_update_count(Trainer& t, int count) {
    ZeroEngine* z = t.zero();
    if (z != nullptr && z->stage() >= 1)
        z->set_update_count(count);
    else
        t.optimizer().set_update_count(count);
}

CheckpointInfo checkpoint_info_of(Trainer& t) {
    CheckpointInfo info;
    info.options = t.options();
    // The ordinary optimizer's own configuration where there is one (ZeRO 1-3 step with the
    // run's).
    ZeroEngine* z = t.zero();
    if (z == nullptr || z->stage() == 0) info.options.optimizer = t.optimizer().config();
    info.steps_done = t.steps_done();
    info.update_count = update_count(t);
    info.data_position = t.data().position();
    info.data_fingerprint = t.data().fingerprint();
    info.loss_scale = t.loss_scale();
    info.good_steps = t.good_steps();
    return info;
}

void check_same_data(const CheckpointInfo& info, Trainer& t, const std::string& path) {
    if (info.data_fingerprint.empty()) return;  // the synthetic corpus, or an earlier checkpoint
    const std::string now = t.data().fingerprint();
    if (now != info.data_fingerprint) {
        throw InputError(
            path + ": the run's data " + info.options.data + " has changed since the checkpoint (" +
            info.data_fingerprint + "; now " + now +
            "): its position would point elsewhere, so the resumed run would not be the same run");
    }
}

void restore_checkpoint_state(Trainer& t, const CheckpointInfo& info) {
    set_update_count(t, info.update_count);
    t.data().set_position(info.data_position);
    t.restore_loop_state(info.steps_done, info.loss_scale, info.good_steps);
    t.model().fp8_state_restored(info.steps_done);
}

}  // namespace napkin
