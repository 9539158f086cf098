#include "core/comm/shard_layout.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/nf4.h"

namespace napkin {

namespace {

// extent: the unit's elements with alignment gaps; shards a multiple of align.
void finish(ShardUnit& u, std::int64_t extent, int world, std::int64_t align) {
    const std::int64_t w = world;
    u.shard = (extent + w * align - 1) / (w * align) * align;
    u.padded = u.shard * w;
}

}  // namespace

std::int64_t ShardLayout::numel() const {
    std::int64_t s = 0;
    for (const ShardUnit& u : units)
        s += u.numel;
    return s;
}
std::int64_t ShardLayout::padded() const {
    std::int64_t s = 0;
    for (const ShardUnit& u : units)
        s += u.padded;
    return s;
}
std::int64_t ShardLayout::shard() const {
    std::int64_t s = 0;
    for (const ShardUnit& u : units)
        s += u.shard;
    return s;
}
std::int64_t ShardLayout::gathered_per_micro_batch() const {
    std::int64_t s = 0;
    for (const ShardUnit& u : units)
        s += u.gathers_per_micro_batch * u.padded;
    return s;
}
std::int64_t ShardLayout::max_padded() const {
    std::int64_t m = 0;
    for (const ShardUnit& u : units)
        m = std::max(m, u.padded);
    return m;
}

std::int64_t shard_alignment(OptimizerKind optimizer) {
    return optimizer == OptimizerKind::adamw_8bit ? static_cast<std::int64_t>(kOptimizer8bitBlock) : 1;
}

ShardLayout shard_layout(const ModelConfig& cfg, int world, std::int64_t lora_rank, std::int64_t align) {
    if (world < 1)
        throw UsageError("world size: must be at least 1 (got " + std::to_string(world) + ")");
    NAPKIN_ASSERT(align >= 1, "shard alignment " << align);
    ShardLayout out;
    out.world = world;
    const bool adapters = lora_rank > 0;
    const std::vector<ParamTensor> params = param_tensors(cfg, lora_rank);
    out.units.resize(static_cast<std::size_t>(cfg.n_layers) + 2);
    out.units.front().name = "embedding";
    out.units.front().gathers_per_micro_batch = cfg.tied_embeddings ? 3 : 2;
    for (int l = 0; l < cfg.n_layers; ++l) {
        out.units[static_cast<std::size_t>(l) + 1].name = "h." + std::to_string(l);
        out.units[static_cast<std::size_t>(l) + 1].gathers_per_micro_batch = 2;
    }
    out.units.back().name = "head";
    out.units.back().gathers_per_micro_batch = 1;
    std::vector<std::int64_t> extent(out.units.size(), 0);  // each unit's end, gaps included
    for (std::size_t i = 0; i < params.size(); ++i) {
        const ParamTensor& p = params[i];
        out.param_numel.push_back(p.numel());
        if (adapters && !p.adapter) {  // frozen: replicated, in no unit
            out.param_unit.push_back(-1);
            out.param_offset.push_back(-1);
            continue;
        }
        std::size_t u = 0;
        if (p.layer >= 0)
            u = static_cast<std::size_t>(p.layer) + 1;
        else if (p.name != "wte" && p.name != "wpe")
            u = out.units.size() - 1;
        ShardUnit& unit = out.units[u];
        std::int64_t& end = extent[u];
        end = (end + align - 1) / align * align;
        out.param_unit.push_back(static_cast<int>(u));
        out.param_offset.push_back(end);
        unit.params.push_back(i);
        unit.numel += p.numel();
        end += p.numel();
    }
    for (std::size_t u = 0; u < out.units.size(); ++u) {
        finish(out.units[u], extent[u], world, align);
        if (out.units[u].numel == 0) out.units[u].gathers_per_micro_batch = 0;
    }
    return out;
}

std::vector<FrozenUnit> frozen_layout(const ModelConfig& cfg, int world, std::int64_t lora_rank,
                                      bool qlora, std::uint64_t element_bytes) {
    if (lora_rank < 1) throw UsageError("{lora_rank}: must be a positive integer");
    const std::vector<ParamTensor> params = param_tensors(cfg, lora_rank);
    // The unit of each frozen tensor is its full model's (shard_layout without adapters; the
    // base tensors keep their indices in the list with adapters), and so is how often it is read.
    const ShardLayout full = shard_layout(cfg, world);
    std::vector<FrozenUnit> out(full.units.size());
    for (std::size_t u = 0; u < out.size(); ++u)
        out[u].gathers_per_micro_batch = full.units[u].gathers_per_micro_batch;
    auto add = [&](std::size_t u, std::size_t param, bool state, int group, std::uint64_t bytes) {
        FrozenGroup& g = out[u].groups[group];
        g.bytes = (g.bytes + kFrozenBlobAlign - 1) / kFrozenBlobAlign * kFrozenBlobAlign;
        out[u].blobs.push_back({param, state, group, g.bytes, bytes});
        g.bytes += bytes;
    };
    for (std::size_t i = 0; i < params.size(); ++i) {
        const ParamTensor& p = params[i];
        if (p.adapter) continue;
        const auto u = static_cast<std::size_t>(full.param_unit[i]);
        if (qlora && p.linear_weight) {
            add(u, i, false, 0, nf4_code_bytes(p.numel()));
            add(u, i, true, 0, nf4_state_bytes(p.numel()));
        } else {
            add(u, i, false, 1, static_cast<std::uint64_t>(p.numel()) * element_bytes);
        }
    }
    const auto w = static_cast<std::int64_t>(world);
    for (FrozenUnit& f : out) {
        for (FrozenGroup& g : f.groups) {
            const auto e = static_cast<std::int64_t>((g.bytes + element_bytes - 1) / element_bytes);
            g.shard = (e + w - 1) / w;
            g.padded = g.shard * w;
        }
    }
    return out;
}

ShardLayout shard_layout_flat(std::int64_t numel, int world) {
    if (world < 1)
        throw UsageError("world size: must be at least 1 (got " + std::to_string(world) + ")");
    ShardLayout out;
    out.world = world;
    ShardUnit u;
    u.name = "model";
    u.numel = numel;
    u.gathers_per_micro_batch = 2;
    finish(u, numel, world, 1);
    out.units.push_back(u);
    return out;
}

}  // namespace napkin
