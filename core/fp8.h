// 8-bit floating-point storage types for fp8-amp, per the OCP 8-bit Floating Point
// Specification (OFP8, v1.0, 2023): the bytes are real (1 per element), arithmetic is fp32.
//   E4M3  1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is the one NaN
//         pattern, so the largest finite value is S.1111.110 = 448; smallest subnormal 2^-9.
//   E5M2  1, 5 (bias 15), 2: IEEE-like, S.11111.00 is infinity and S.11111.{01,10,11} NaN;
//         largest finite 57344, smallest subnormal 2^-16.
// From float: round to nearest even, saturating (the spec's SAT mode, CUDA's __NV_SATFINITE):
// a magnitude past the largest finite value, infinity included, becomes +-max; NaN becomes 0x7f
// (a NaN in both formats, as CUDA's conversion writes it); the sign of zero is kept. To float:
// exact (every fp8 value is a float), through a 256-entry table.
// Tested code by code against the spec in tests/kernels/quantize_test.cpp.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>

namespace napkin {

namespace fp8_detail {

// The format with E exponent and M mantissa bits.
template <int E, int M>
struct Format {
    static constexpr int kBias = (1 << (E - 1)) - 1;
    static constexpr int kMinNormalExp = 1 - kBias;
    // E4M3 reclaims the all-ones exponent for finite values but its last code (NaN).
    static constexpr std::uint8_t kMaxCode = E == 4 ? 0x7e : 0x7b;
    static constexpr std::uint8_t kNanCode = 0x7f;

    static constexpr float decode(std::uint8_t code) {
        const bool negative = (code & 0x80u) != 0;
        const int e = (code >> M) & ((1 << E) - 1);
        const int m = code & ((1 << M) - 1);
        float v = 0.0f;
        if ((code & 0x7fu) > kMaxCode) {  // E4M3's NaN; E5M2's infinity and NaNs
            v = E == 5 && m == 0 ? std::numeric_limits<float>::infinity()
                                 : std::numeric_limits<float>::quiet_NaN();
        } else if (e == 0) {
            v = static_cast<float>(m) * pow2(kMinNormalExp - M);
        } else {
            v = static_cast<float>((1 << M) + m) * pow2(e - kBias - M);
        }
        return negative ? -v : v;
    }

    static constexpr float pow2(int k) {
        float p = 1.0f;
        for (; k > 0; --k)
            p *= 2.0f;
        for (; k < 0; ++k)
            p *= 0.5f;
        return p;
    }

    // Codes rise with magnitude: in the binade of exponent e (clamped up to the smallest normal
    // one, where the subnormals share its quantum 2^(e - M)), the value is n quanta with n the
    // float's significand rounded to nearest even at that quantum, and the code is
    // ((e + bias - 1) << M) + n. n reaching 2^(M + 1) carries into the next binade's code.
    static std::uint8_t encode(float f) {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
        const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
        const std::uint32_t a = u & 0x7fffffffu;
        if (a > 0x7f800000u) return kNanCode;
        if (std::bit_cast<float>(a) >= decode(kMaxCode))
            return static_cast<std::uint8_t>(sign | kMaxCode);
        const int exp_field = static_cast<int>(a >> 23);
        if (exp_field == 0) return sign;  // float subnormals and zero: far below 2^-17
        const int e = exp_field - 127;
        const int q = (e > kMinNormalExp ? e : kMinNormalExp) - M;  // the quantum's exponent
        const std::uint32_t sig = (a & 0x7fffffu) | 0x800000u;      // value = sig * 2^(e - 23)
        const int shift = 23 + q - e;                               // >= 23 - M
        std::uint32_t n = 0;
        if (shift < 25) {  // else the value is at most half the smallest quantum: rounds to 0
            const std::uint32_t rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
            n = sig >> shift;
            if (rem > half || (rem == half && (n & 1u) != 0)) ++n;
        }
        const auto code = static_cast<std::uint32_t>((q + M + kBias - 1) << M) + n;
        return static_cast<std::uint8_t>(sign | (code > kMaxCode ? kMaxCode : code));
    }

    static constexpr std::array<float, 256> table() {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c)
            t[static_cast<std::size_t>(c)] = decode(static_cast<std::uint8_t>(c));
        return t;
    }
};

using E4M3 = Format<4, 3>;
using E5M2 = Format<5, 2>;
inline constexpr std::array<float, 256> kE4M3Values = E4M3::table();
inline constexpr std::array<float, 256> kE5M2Values = E5M2::table();

}  // namespace fp8_detail

struct f8e4m3_t {
    std::uint8_t bits = 0;
    static constexpr float kMax = 448.0f;
    f8e4m3_t() = default;
    explicit f8e4m3_t(float f) : bits(fp8_detail::E4M3::encode(f)) {}
    explicit operator float() const { return fp8_detail::kE4M3Values[bits]; }
};
static_assert(sizeof(f8e4m3_t) == 1);

struct f8e5m2_t {
    std::uint8_t bits = 0;
    static constexpr float kMax = 57344.0f;
    f8e5m2_t() = default;
    explicit f8e5m2_t(float f) : bits(fp8_detail::E5M2::encode(f)) {}
    explicit operator float() const { return fp8_detail::kE5M2Values[bits]; }
};
static_assert(sizeof(f8e5m2_t) == 1);

}  // namespace napkin
