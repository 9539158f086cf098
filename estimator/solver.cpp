#include "estimator/solver.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "estimator/parallel.h"

namespace napkin {

SolveResult solve_max_params(const EstimateInputs& base, Estimator& est) {
    EstimateInputs in = base;
    in.params_only = true;
    SolveResult r;
    auto fits = [&](double n) {
        in.params = n;
        return est.run(in).fits();
    };
    constexpr double kSmallest = 1e6;  // a million parameters
    ++r.evaluations;
    if (!fits(kSmallest)) {
        in.params = kSmallest;
        r.at = est.run(in);
        return r;
    }
    r.value = largest_fitting(kSmallest, kMaxParams, fits, r.evaluations);
    r.at_limit = r.value >= kMaxParams;
    in.params = r.value;
    r.at = est.run(in);
    return r;
}

SolveResult solve_max_micro_batch(const EstimateInputs& base, Estimator& est) {
    if (base.ignore_activations) {
        throw UsageError(
            "{solve} max-micro-batch with {ignore_activations}: the model states alone do not "
            "depend on the micro-batch");
    }
    constexpr double kLimit = 1 << 24;
    EstimateInputs in = base;
    SolveResult r;
    auto fits = [&](double b) {
        in.micro_batch = static_cast<std::int64_t>(b);
        return est.run(in).fits();
    };
    ++r.evaluations;
    if (!fits(1)) {
        in.micro_batch = 1;
        r.at = est.run(in);
        return r;
    }
    r.value = largest_fitting(1, kLimit, fits, r.evaluations);
    r.at_limit = r.value >= kLimit;
    in.micro_batch = static_cast<std::int64_t>(r.value);
    r.at = est.run(in);
    return r;
}

namespace {

// The micro-batches --solve fastest tries for one combination: powers of two up to the largest
// that fits, and that largest; none when B = 1 does not fit.
std::vector<std::int64_t> micro_batches_to_try(const EstimateInputs& in, Estimator& est,
                                               int& evaluations) {
    const SolveResult largest = solve_max_micro_batch(in, est);
    evaluations += largest.evaluations;
    std::vector<std::int64_t> out;
    const auto most = static_cast<std::int64_t>(largest.value);
    for (std::int64_t b = 1; b > 0 && b <= most; b *= 2)
        out.push_back(b);
    if (most > 0 && out.back() != most) out.push_back(most);
    return out;
}

struct Layout {
    int tp, pp;
};

SolveCandidate candidate(const EstimateInputs& in, const Estimate& e) {
    SolveCandidate c{in.precision,   in.micro_batch, in.checkpointing,
                     in.attention,   in.zero,        e.tokens_per_s,
                     e.step_seconds, e.mfu,          e.gpu.total()};
    c.tp = in.tp;
    c.pp = in.pp;
    c.vpp = in.vpp;
    c.dp = in.gpus / (in.tp * in.pp);
    c.micro_batches = in.grad_accum;
    return c;
}

// The fastest first (a stable sort: among equal rates, the first tried), the `keep` best into r.
void keep_fastest(std::vector<SolveCandidate>& found, int keep, SolveResult& r) {
    std::ranges::stable_sort(found, [](const SolveCandidate& a, const SolveCandidate& b) {
        return a.tokens_per_s > b.tokens_per_s;
    });
    if (found.empty()) return;
    r.value = found.front().tokens_per_s;
    found.resize(std::min<std::size_t>(found.size(), static_cast<std::size_t>(keep)));
    r.candidates = std::move(found);
}

// Every (T, P) the model admits, by T P, then the larger T first.
std::vector<Layout> layouts(const EstimateInputs& in) {
    const ModelConfig& c = in.model;
    std::vector<Layout> out;
    for (int t = 1; t <= in.gpus_per_node; ++t) {
        if (c.n_heads % t != 0 || c.n_kv_heads % t != 0 || c.d_ff % t != 0) continue;
        for (int p = 1; p <= c.n_layers; ++p) {
            const std::int64_t replica = static_cast<std::int64_t>(t) * p;
            if (in.gpus > 1 && in.gpus % replica != 0) continue;
            if (in.vpp > 1 && p > 1 && c.n_layers % (static_cast<std::int64_t>(in.vpp) * p) != 0)
                continue;
            out.push_back({t, p});
        }
    }
    std::ranges::stable_sort(out, [](const Layout& a, const Layout& b) {
        const int ra = a.tp * a.pp, rb = b.tp * b.pp;
        return ra != rb ? ra < rb : a.tp > b.tp;
    });
    return out;
}

}  // namespace

SolveResult solve_fastest(const EstimateInputs& base, Estimator& est,
                          const std::vector<Precision>& precisions, int keep) {
    if (base.mfu != 0 || base.profile == nullptr) {
        throw UsageError("{solve} fastest: needs the performance model's prediction (drop {mfu})");
    }
    SolveResult r;
    std::vector<SolveCandidate> found;
    EstimateInputs in = base;
    const std::vector<Precision> recipes =
        precisions.empty() ? std::vector<Precision>{base.precision} : precisions;
    const int top_stage = base.gpus > 1 ? 3 : 0;
    for (Precision p : recipes) {
        for (Checkpointing ck :
             {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
            for (AttentionImpl at : {AttentionImpl::flash, AttentionImpl::naive}) {
                // Selective recomputation with flash attention recomputes nothing: the same run.
                if (ck == Checkpointing::selective && at == AttentionImpl::flash) continue;
                for (int z = 0; z <= top_stage; ++z) {
                    in.precision = p;
                    in.checkpointing = ck;
                    in.attention = at;
                    in.zero = z;
                    for (std::int64_t b : micro_batches_to_try(in, est, r.evaluations)) {
                        in.micro_batch = b;
                        Estimate e = est.run(in);
                        ++r.evaluations;
                        if (!e.fits()) continue;
                        found.push_back(candidate(in, e));
                    }
                }
            }
        }
    }
    keep_fastest(found, keep, r);
    in = base;
    in.micro_batch = 1;
    if (!r.candidates.empty()) {
        const SolveCandidate& best = r.candidates.front();
        in.precision = best.precision;
        in.micro_batch = best.micro_batch;
        in.checkpointing = best.checkpointing;
        in.attention = best.attention;
        in.zero = best.zero;
    }
    r.at = est.run(in);
    return r;
}

EstimateInputs with_layout(const EstimateInputs& base, const SolveCandidate& c,
                           std::string* link_name) {
    EstimateInputs in = base;
    in.tp = c.tp;
    in.pp = c.pp;
    in.vpp = c.vpp;
    in.sequence_parallel = c.tp > 1;
    in.micro_batch = c.micro_batch;
    in.grad_accum = c.micro_batches;
    in.checkpointing = c.checkpointing;
    in.zero = c.zero;
    if (c.tp * c.pp == 1 && base.link_bytes_per_s == 0 && base.gpus > 1) {
        const ParallelLayout p = parallel_layout(base.gpus, 1, 1, 1, false, 1, base.model);
        const LinkChoice link =
            group_links(p, base.gpus_per_node, base.node_link, base.network_link).data;
        in.link_bytes_per_s = link.bytes_per_s;
        if (link_name != nullptr) *link_name = link.name;
    }
    return in;
}

namespace {

// The sequences per step of the base's layout, B G DP, which --solve fastest-layout keeps.
std::int64_t global_batch_sequences(const EstimateInputs& base) {
    const ParallelLayout p =
        parallel_layout(base.gpus, base.tp, base.pp, 1, false, base.grad_accum, base.model);
    return base.micro_batch * base.grad_accum * p.dp;
}

// Every micro-batch B = 1, 2, 4, ... dividing a replica's sequences, for one layout and recipe
// (`c`), while it fits (a larger B only holds more): each fitting estimate a candidate.
void try_micro_batches(const EstimateInputs& base, SolveCandidate c, std::int64_t sequences,
                       Estimator& est, SolveResult& r, std::vector<SolveCandidate>& found) {
    for (std::int64_t b = 1; b <= sequences && sequences % b == 0; b *= 2) {
        c.micro_batch = b;
        c.micro_batches = sequences / b;
        if (c.vpp > 1 && c.micro_batches % c.pp != 0) continue;  // the interleaved schedule's
        const EstimateInputs in = with_layout(base, c);
        const Estimate e = est.run(in);
        ++r.evaluations;
        if (!e.fits()) return;
        found.push_back(candidate(in, e));
    }
}

}  // namespace

SolveResult solve_fastest_layout(const EstimateInputs& base, Estimator& est, int keep) {
    NAPKIN_ASSERT(base.mfu == 0 && base.profile != nullptr && !base.params_only && base.gpus > 1,
                  "solve_fastest_layout: needs the performance model, a shape and several GPUs");
    validate(base.model);
    const std::int64_t sequences = global_batch_sequences(base);
    SolveResult r;
    std::vector<SolveCandidate> found;
    EstimateInputs any_vpp = base;
    any_vpp.vpp = 1;
    const int layers = base.model.n_layers;
    SolveCandidate c;
    c.precision = base.precision;
    c.attention = base.attention;
    for (const Layout& l : layouts(any_vpp)) {
        c.tp = l.tp;
        c.pp = l.pp;
        c.dp = base.gpus / (l.tp * l.pp);
        if (sequences % c.dp != 0) continue;
        const int top_stage = c.dp == 1 ? 0 : (l.pp > 1 ? 1 : 3);
        for (const int v : {1, 2, 4}) {
            if (v > 1 && (l.pp == 1 || layers % (v * l.pp) != 0)) continue;
            c.vpp = v;
            for (Checkpointing ck :
                 {Checkpointing::none, Checkpointing::selective, Checkpointing::full}) {
                // Selective recomputation with flash attention recomputes nothing: none again.
                if (ck == Checkpointing::selective && base.attention == AttentionImpl::flash)
                    continue;
                c.checkpointing = ck;
                for (c.zero = 0; c.zero <= top_stage; ++c.zero)
                    try_micro_batches(base, c, sequences / c.dp, est, r, found);
            }
        }
    }
    keep_fastest(found, keep, r);
    r.at = est.run(r.candidates.empty() ? base : with_layout(base, r.candidates.front()));
    return r;
}

SolveResult solve_min_tp_pp(const EstimateInputs& base, Estimator& est) {
    if (base.params_only) {
        throw UsageError(
            "{solve} min-tp-pp: needs a model shape ({model}, {config} or {layers}, "
            "{d_model} and {heads}), not {params}");
    }
    validate(base.model);
    SolveResult r;
    EstimateInputs in = base;
    const std::vector<Layout> candidates = layouts(base);
    if (candidates.empty()) {
        throw UsageError("{solve} min-tp-pp: no tensor x pipeline layout of " + base.model.name +
                         " divides {gpus} " + std::to_string(base.gpus));
    }
    for (const Layout& l : candidates) {
        in.tp = l.tp;
        in.pp = l.pp;
        in.vpp = l.pp > 1 ? base.vpp : 1;
        in.sequence_parallel = base.sequence_parallel && l.tp > 1;
        in.gpus = base.gpus > 1 ? base.gpus : l.tp * l.pp;
        ++r.evaluations;
        r.at = est.run(in);
        r.tp = l.tp;
        r.pp = l.pp;
        if (r.at.fits()) {
            r.value = l.tp * l.pp;
            return r;
        }
    }
    return r;  // nothing fits: `at`, tp and pp are the last (largest) layout's
}

}  // namespace napkin
