// An fp8 reference for the tests, written from the OCP 8-bit Floating Point Specification
// (OFP8 v1.0, section 5) independently of core/fp8.h: a code's value by the spec's formula in
// double, and float -> code as the nearest value among all 256 codes (ties to the even code),
// with saturation to the largest finite value and NaN kept.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace napkin::test {

struct Fp8Spec {
    int exponent_bits, mantissa_bits;
    bool e4m3() const { return exponent_bits == 4; }
    int bias() const { return (1 << (exponent_bits - 1)) - 1; }
    // E4M3 (spec table 1): no infinities, S.1111.111 is NaN. E5M2: S.11111.00 infinity,
    // S.11111.{01,10,11} NaN.
    double value(std::uint8_t code) const {
        const int s = code >> 7;
        const int e = (code >> mantissa_bits) & ((1 << exponent_bits) - 1);
        const int m = code & ((1 << mantissa_bits) - 1);
        const int all_ones = (1 << exponent_bits) - 1;
        double v;
        if (e4m3() && e == all_ones && m == (1 << mantissa_bits) - 1) {
            v = std::numeric_limits<double>::quiet_NaN();
        } else if (!e4m3() && e == all_ones) {
            v = m == 0 ? std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::quiet_NaN();
        } else if (e == 0) {
            v = std::ldexp(static_cast<double>(m) / (1 << mantissa_bits), 1 - bias());  // subnormal
        } else {
            v = std::ldexp(1.0 + static_cast<double>(m) / (1 << mantissa_bits), e - bias());
        }
        return s != 0 ? -v : v;
    }
    double max_finite() const { return e4m3() ? 448.0 : 57344.0; }
    std::uint8_t max_code() const { return e4m3() ? 0x7e : 0x7b; }

    // The code whose value is nearest to x (ties: the even code), +-max beyond the range.
    std::uint8_t nearest(double x) const {
        if (std::isnan(x)) return 0x7f;
        const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
        const double a = std::fabs(x);
        if (a >= max_finite()) return sign | max_code();
        int best = 0;
        double best_err = std::numeric_limits<double>::infinity();
        for (int c = 0; c <= max_code(); ++c) {
            const double err = std::fabs(value(static_cast<std::uint8_t>(c)) - a);
            if (err < best_err || (err == best_err && (c & 1) == 0)) {
                best = c;
                best_err = err;
            }
        }
        return static_cast<std::uint8_t>(sign | best);
    }
};

inline constexpr Fp8Spec kE4M3Spec{4, 3};
inline constexpr Fp8Spec kE5M2Spec{5, 2};

}  // namespace napkin::test
