// Shared helpers for the kernel tests (tests/kernels/<op>_test.cpp): fresh random inputs whose
// seed the tests report through SCOPED_TRACE, conversions to and from the storage types,
// per-dtype tolerances, an element-wise comparison that prints the first mismatches and fails on
// NaN, and central finite differences of a double-precision reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"

namespace napkin::test {

using Vec = std::vector<double>;

// A fresh seed on every run; tests put it in a SCOPED_TRACE so a failure names the seed that
// reproduces it: NAPKIN_TEST_SEED=<that seed> gives it to every test of the run.
inline unsigned fresh_seed() {
    if (const char* s = std::getenv("NAPKIN_TEST_SEED"); s != nullptr && *s != 0)
        return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
    return std::random_device{}();
}

inline Vec random_normal(std::mt19937& rng, std::int64_t n, double mean = 0.0,
                         double stddev = 1.0) {
    std::normal_distribution<double> d(mean, stddev);
    Vec v(static_cast<std::size_t>(n));
    for (double& x : v)
        x = d(rng);
    return v;
}

template <class T>
std::vector<T> to_storage(const Vec& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = from_float<T>(static_cast<float>(v[i]));
    return out;
}

// The values as a kernel reads them (rounded to T), for the reference to start from.
template <class T>
Vec as_seen(const std::vector<T>& v) {
    Vec out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
        out[i] = to_float(v[i]);
    return out;
}

// Outputs start as NaN so an element the kernel forgets to write fails the comparison.
template <class T>
std::vector<T> nan_filled(std::int64_t n) {
    return std::vector<T>(static_cast<std::size_t>(n),
                          from_float<T>(std::numeric_limits<float>::quiet_NaN()));
}

template <class T>
const char* dtype_name() {
    if constexpr (std::is_same_v<T, float>) return "f32";
    if constexpr (std::is_same_v<T, bf16_t>) return "bf16";
    if constexpr (std::is_same_v<T, f16_t>) return "f16";
    return "?";
}

// Element i passes when |got - want| <= abs + rel * |want|.
struct Tolerance {
    double abs = 0.0;
    double rel = 0.0;
};

// Per storage type: fp32 arithmetic with a few roundings (f32); for 16-bit storage one final
// rounding of the result dominates, half an ulp being at most 2^-8 (bf16) or 2^-11 (f16)
// relative, with headroom for the fp32 work before it.
template <class T>
Tolerance tolerance() {
    if constexpr (std::is_same_v<T, bf16_t>) return {1e-2, 1e-2};
    if constexpr (std::is_same_v<T, f16_t>) return {2e-3, 2e-3};
    return {1e-5, 1e-5};
}

// A sum of `terms` O(1) values in fp32: partial sums grow to about sqrt(terms), each addition
// rounds to half an ulp of them, so the absolute error grows to about terms * 2^-24 whatever
// the sum's own (possibly cancelled) size.
inline Tolerance for_sum_of(Tolerance tol, std::int64_t terms) {
    return {tol.abs + static_cast<double>(terms) * 0x1p-23, tol.rel};
}

// The double reference against its own finite differences: only truncation and rounding of
// the differences themselves.
inline constexpr Tolerance kFiniteDifferenceTol = {1e-6, 1e-6};

// Expects got[i] close to want[i] for all i; NaN or inf in got fails. Prints how many elements
// failed and the first few. `slack`, when given, widens element i's bound by slack[i]: for
// kernels whose error depends on the data, as a bound the test computes for each element.
inline void expect_close(const std::string& what, const Vec& got, const Vec& want, Tolerance tol,
                         const Vec* slack = nullptr) {
    ASSERT_EQ(got.size(), want.size()) << what;
    if (slack != nullptr) {
        ASSERT_EQ(slack->size(), got.size()) << what;
    }
    constexpr int kShown = 5;
    std::size_t bad = 0;
    std::string first;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(got[i] - want[i]);
        const double extra = slack != nullptr ? (*slack)[i] : 0.0;
        const bool ok =
            std::isfinite(got[i]) && err <= tol.abs + tol.rel * std::fabs(want[i]) + extra;
        if (ok) continue;
        if (bad++ < kShown) {
            first += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                     std::to_string(want[i]) + " err " + std::to_string(err);
            if (slack != nullptr) first += " slack " + std::to_string(extra);
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside "
                       << tol.abs << " + " << tol.rel << " * |want|" << first;
}

inline double dot(const Vec& a, const Vec& b) {
    double s = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i)
        s += a[i] * b[i];
    return s;
}

inline Vec plus(const Vec& a, const Vec& b) {
    Vec out(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        out[i] = a[i] + b[i];
    return out;
}

// Up to max_count distinct indices in [0, n), in order; all of them when n <= max_count.
inline std::vector<std::size_t> sample_indices(std::mt19937& rng, std::size_t n,
                                               std::size_t max_count) {
    std::vector<std::size_t> idx;
    if (n <= max_count) {
        for (std::size_t i = 0; i < n; ++i)
            idx.push_back(i);
        return idx;
    }
    // Selection sampling (Knuth's algorithm S): each index kept with the right probability.
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (std::size_t i = 0; i < n && idx.size() < max_count; ++i) {
        if (u(rng) * static_cast<double>(n - i) < static_cast<double>(max_count - idx.size()))
            idx.push_back(i);
    }
    return idx;
}

// d loss / d x[i] by the fourth-order central difference
// (-L(x+2h) + 8 L(x+h) - 8 L(x-h) + L(x-2h)) / 12h, whose h^4 truncation stays far below the
// tolerance even where the function bends sharply (RMSNorm of a near-zero row bends on the scale
// sqrt(eps)); loss() reads x, which is restored afterwards.
template <class Loss>
double central_difference(Loss&& loss, Vec& x, std::size_t i, double h = 1e-5) {
    const double saved = x[i];
    auto at = [&](double step) {
        x[i] = saved + step;
        return loss();
    };
    const double d = (8.0 * (at(h) - at(-h)) - (at(2.0 * h) - at(-2.0 * h))) / (12.0 * h);
    x[i] = saved;
    return d;
}

// Checks one gradient a backward kernel accumulated: `got` (the buffer after the call, as
// seen in double) against `prefill` + the reference's analytic gradient `ref` at every element,
// and against `prefill` + central differences of loss() with respect to x at up to
// `max_samples` sampled elements, where the analytic reference must agree with the finite
// differences tightly. `slack` widens each element's bound as in expect_close.
template <class Loss>
void expect_gradient(const std::string& what, Loss&& loss, Vec& x, const Vec& got,
                     const Vec& prefill, const Vec& ref, Tolerance tol, std::mt19937& rng,
                     std::size_t max_samples = 48, const Vec* slack = nullptr) {
    ASSERT_EQ(got.size(), x.size()) << what;
    expect_close(what + " vs analytic reference", got, plus(prefill, ref), tol, slack);
    Vec got_s, want_s, ref_s, fd_s, slack_s;
    for (std::size_t i : sample_indices(rng, x.size(), max_samples)) {
        const double fd = central_difference(loss, x, i);
        got_s.push_back(got[i]);
        want_s.push_back(prefill[i] + fd);
        ref_s.push_back(ref[i]);
        fd_s.push_back(fd);
        slack_s.push_back(slack != nullptr ? (*slack)[i] : 0.0);
    }
    expect_close(what + " vs finite differences", got_s, want_s, tol, &slack_s);
    expect_close(what + " analytic reference vs finite differences", ref_s, fd_s,
                 kFiniteDifferenceTol);
}

}  // namespace napkin::test
