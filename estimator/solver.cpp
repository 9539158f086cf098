#include "estimator/solver.h"

#include <cmath>

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

}  // namespace napkin
