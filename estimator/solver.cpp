#include "estimator/solver.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"

namespace napkin {

namespace {

// Largest integer x in [lo, limit] with fits(x), given fits(lo); fits is assumed monotone.
template <class Fits>
double largest_fitting(double lo, double limit, Fits&& fits, int& evaluations) {
    double hi = lo * 2;
    while (hi <= limit && (++evaluations, fits(hi))) {
        lo = hi;
        hi *= 2;
    }
    if (hi > limit) hi = limit + 1;
    while (hi - lo > 1) {
        const double mid = std::floor((lo + hi) / 2);
        ++evaluations;
        if (fits(mid)) lo = mid;
        else hi = mid;
    }
    return lo;
}

}  // namespace

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
            "--solve max-micro-batch with --ignore-activations: the model states alone do not "
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

SolveResult solve_min_tp_pp(const EstimateInputs& base, Estimator& est) {
    if (base.params_only) {
        throw UsageError(
            "--solve min-tp-pp: needs a model shape (--model, --config or --layers, "
            "--d-model and --heads), not --params");
    }
    validate(base.model);
    SolveResult r;
    EstimateInputs in = base;
    const std::vector<Layout> candidates = layouts(base);
    if (candidates.empty()) {
        throw UsageError("--solve min-tp-pp: no tensor x pipeline layout of " + base.model.name +
                         " divides --gpus " + std::to_string(base.gpus));
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
