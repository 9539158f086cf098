#include "estimator/parallel.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/comm/collective.h"

namespace napkin {

namespace {

std::string n(std::int64_t v) {
    return std::to_string(v);
}

void require_at_least_one(int v, const char* flag) {
    if (v < 1)
        throw UsageError(std::string(flag) + ": must be a positive integer (got " + n(v) + ")");
}

// A line of `calls` collectives (or sends) of `elements` elements each over `ranks` ranks.
GroupLine group_line(std::string what, Collective op, DType dtype, double calls,
                     std::int64_t elements, int ranks) {
    GroupLine l;
    l.what = std::move(what);
    l.op = std::string(enum_name(kCollectiveNames, op));
    l.dtype = dtype;
    l.calls = calls;
    l.elements = calls * static_cast<double>(elements);
    const RingTraffic t =
        ring_traffic(op, static_cast<std::uint64_t>(elements), storage_bytes(dtype, 1), ranks);
    l.sent_bytes = calls * static_cast<double>(t.sent_bytes);
    l.received_bytes = calls * static_cast<double>(t.received_bytes);
    return l;
}

GroupLine send_line(std::string what, DType dtype, double calls, std::int64_t elements) {
    GroupLine l;
    l.what = std::move(what);
    l.op = "send";
    l.dtype = dtype;
    l.calls = calls;
    l.elements = calls * static_cast<double>(elements);
    l.sent_bytes = l.received_bytes =
        calls * static_cast<double>(storage_bytes(dtype, static_cast<std::uint64_t>(elements)));
    return l;
}

void add(GroupTraffic& g, GroupLine l) {
    if (l.calls <= 0) return;
    g.sent_bytes += l.sent_bytes;
    g.received_bytes += l.received_bytes;
    g.lines.push_back(std::move(l));
}

void finish(GroupTraffic& g) {
    g.seconds = g.link.bytes_per_s > 0 ? g.sent_bytes / g.link.bytes_per_s : 0.0;
}

GroupTraffic group(std::string name, int ranks, const LinkChoice& link) {
    GroupTraffic g;
    g.group = std::move(name);
    g.ranks = ranks;
    g.link = link;
    return g;
}

// The tensor group's collectives (see model_parallel_traffic in the header).
GroupTraffic tensor_traffic(const ParallelLayout& p, int stage, const TrafficInputs& t,
                            const LinkChoice& link) {
    GroupTraffic g = group("tensor", p.tp, link);
    if (p.tp <= 1) return g;
    const std::int64_t btc = t.tokens * t.d_model;
    const double M = static_cast<double>(p.micro_batches);
    const double per_layers = M * stage_layers(p, stage);
    const double replay = t.full_recompute ? 2.0 : 0.0;  // the forward's collectives once more
    const DType a = t.activations;
    if (!p.sp) {
        add(g,
            group_line("blocks", Collective::all_reduce, a, (4 + replay) * per_layers, btc, p.tp));
    } else {
        add(g,
            group_line("blocks", Collective::all_gather, a, (6 + replay) * per_layers, btc, p.tp));
        add(g, group_line("blocks", Collective::reduce_scatter, a, (4 + replay) * per_layers, btc,
                          p.tp));
    }
    if (stage == 0) {
        add(g, group_line("embedding", p.sp ? Collective::reduce_scatter : Collective::all_reduce,
                          a, M, btc, p.tp));
    }
    if (stage == p.pp - 1) {
        if (!p.sp) {
            add(g, group_line("head input", Collective::all_reduce, a, M, btc, p.tp));
        } else {
            add(g, group_line("head input", Collective::all_gather, a, 2 * M, btc, p.tp));
            add(g, group_line("head input", Collective::reduce_scatter, a, M, btc, p.tp));
        }
        add(g,
            group_line("cross entropy", Collective::all_reduce, DType::f32, 3 * M, t.tokens, p.tp));
    }
    finish(g);
    return g;
}

GroupTraffic pipeline_traffic(const ParallelLayout& p, int stage, const TrafficInputs& t,
                              const LinkChoice& link) {
    GroupTraffic g = group("pipeline", p.pp, link);
    if (p.pp <= 1) return g;
    const bool first = stage == 0, last = stage == p.pp - 1;
    const std::int64_t btc = t.tokens * t.d_model;
    const std::int64_t message = p.sp ? (btc + p.tp - 1) / p.tp : btc;
    const double M = static_cast<double>(p.micro_batches);
    add(g, send_line("activations forward", t.activations, M * (p.vpp - (last ? 1 : 0)), message));
    add(g, send_line("gradients backward", t.activations, M * (p.vpp - (first ? 1 : 0)), message));
    if (t.tied_embeddings && (first || last)) {  // Megatron-LM's embedding group: 2 ranks
        add(g, group_line("tied embedding grads", Collective::all_reduce, t.grads, 1,
                          t.vocab_shard_rows * t.d_model, 2));
    }
    finish(g);
    return g;
}

}  // namespace

ParallelLayout parallel_layout(int gpus, int tp, int pp, int vpp, bool sp,
                               std::int64_t micro_batches, const ModelConfig& c) {
    require_at_least_one(tp, "{tp}");
    require_at_least_one(pp, "{pp}");
    require_at_least_one(vpp, "{vpp}");
    require_at_least_one(gpus, "{gpus}");
    ParallelLayout p;
    p.tp = tp;
    p.pp = pp;
    p.vpp = vpp;
    p.sp = sp;
    p.micro_batches = micro_batches;
    p.layers = c.n_layers;
    const std::int64_t replica = static_cast<std::int64_t>(tp) * pp;
    if (gpus % replica != 0) {
        throw UsageError("{gpus} " + n(gpus) + ": must be a multiple of {tp} " + n(tp) +
                         " x {pp} " + n(pp) + " = " + n(replica) +
                         " (data parallelism is gpus / (T P) model replicas)");
    }
    p.dp = static_cast<int>(gpus / replica);
    if (sp && tp == 1) throw UsageError("{sequence_parallel}: sequence parallelism needs {tp} > 1");
    if (c.n_heads % tp != 0 || c.n_kv_heads % tp != 0 || c.d_ff % tp != 0) {
        throw UsageError("{tp} " + n(tp) + ": must divide the " + n(c.n_heads) + " heads, the " +
                         n(c.n_kv_heads) + " kv-heads and d_ff " + n(c.d_ff) +
                         " (each rank holds whole heads)");
    }
    if (pp > c.n_layers) {
        throw UsageError("{pp} " + n(pp) + ": more stages than the model's " + n(c.n_layers) +
                         " layers");
    }
    if (vpp > 1 && pp == 1) throw UsageError("{vpp} " + n(vpp) + ": interleaving needs {pp} > 1");
    if (vpp > 1 && c.n_layers % (static_cast<std::int64_t>(vpp) * pp) != 0) {
        throw UsageError("{vpp} " + n(vpp) + " x {pp} " + n(pp) + ": must divide the model's " +
                         n(c.n_layers) + " layers (every chunk holds as many)");
    }
    return p;
}

int stage_layers(const ParallelLayout& p, int stage) {
    const int base = p.layers / p.pp, extra = p.layers % p.pp;
    return base + (stage < extra ? 1 : 0);
}

double in_flight_micro_batches(const ParallelLayout& p, int stage) {
    const std::int64_t M = p.micro_batches;
    if (p.vpp == 1) return static_cast<double>(std::min<std::int64_t>(p.pp - stage, M));
    // Megatron-LM's interleaved schedule: warm-up forwards, then one more before the first
    // backward frees a chunk.
    const std::int64_t warmup = 2 * static_cast<std::int64_t>(p.pp - stage - 1) +
                                static_cast<std::int64_t>(p.vpp - 1) * p.pp;
    const std::int64_t chunks = std::min(M * p.vpp, warmup + 1);
    return static_cast<double>(chunks) / p.vpp;
}

double bubble_fraction(const ParallelLayout& p) {
    return static_cast<double>(p.pp - 1) /
           (static_cast<double>(p.vpp) * static_cast<double>(p.micro_batches));
}

std::int64_t tp_padded_vocab(const ModelConfig& c, int tp) {
    const std::int64_t multiple = 128 * static_cast<std::int64_t>(tp);
    return (c.vocab_size + multiple - 1) / multiple * multiple;
}

ModelConfig tp_rank_config(const ModelConfig& c, int tp) {
    ModelConfig r = c;
    if (tp == 1) return r;
    r.name = c.name + " (one of " + n(tp) + " tensor-parallel ranks)";
    r.explicit_head_dim = c.head_dim();
    r.n_heads = c.n_heads / tp;
    r.n_kv_heads = c.n_kv_heads / tp;
    r.d_ff = c.d_ff / tp;
    r.vocab_size = tp_padded_vocab(c, tp) / tp;
    r.padded_vocab_size = r.vocab_size;
    return r;
}

GroupLinks group_links(const ParallelLayout& p, int gpus_per_node, const LinkChoice& node,
                       const LinkChoice& network) {
    const auto inside = [&](std::int64_t span) { return span <= gpus_per_node ? node : network; };
    GroupLinks l;
    l.tensor = inside(p.tp);
    l.data = inside(static_cast<std::int64_t>(p.tp) * p.dp);
    l.pipeline = inside(static_cast<std::int64_t>(p.tp) * p.dp * p.pp);
    return l;
}

ModelParallelTraffic model_parallel_traffic(const ParallelLayout& p, int stage,
                                            const TrafficInputs& t, const GroupLinks& links) {
    return {tensor_traffic(p, stage, t, links.tensor),
            pipeline_traffic(p, stage, t, links.pipeline)};
}

}  // namespace napkin
