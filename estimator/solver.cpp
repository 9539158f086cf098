#include "estimator/solver.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"

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
                        found.push_back({p, b, ck, at, z, e.tokens_per_s, e.step_seconds, e.mfu,
                                         e.gpu.total()});
                    }
                }
            }
        }
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const SolveCandidate& a, const SolveCandidate& b) {
                         return a.tokens_per_s > b.tokens_per_s;
                     });
    in = base;
    in.micro_batch = 1;
    if (!found.empty()) {
        const SolveCandidate& best = found.front();
        in.precision = best.precision;
        in.micro_batch = best.micro_batch;
        in.checkpointing = best.checkpointing;
        in.attention = best.attention;
        in.zero = best.zero;
        r.value = best.tokens_per_s;
        found.resize(std::min<std::size_t>(found.size(), static_cast<std::size_t>(keep)));
        r.candidates = std::move(found);
    }
    r.at = est.run(in);
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
