// 16-bit floating-point storage types for the CPU backend: the bytes are real (2 per element),
// arithmetic upcasts to float. bf16 rounds to nearest even from float; fp16 is IEEE binary16
// through the compiler's _Float16 (g++ 12 on x86-64 supports it).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace napkin {

struct bf16_t {
    std::uint16_t bits = 0;
    bf16_t() = default;
    explicit bf16_t(float f) : bits(from_float(f)) {}
    explicit operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

    static std::uint16_t from_float(float f) {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
        const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
        return static_cast<std::uint16_t>((u + rounding) >> 16);
    }
};
static_assert(sizeof(bf16_t) == 2);

struct f16_t {
    _Float16 value = 0;
    f16_t() = default;
    explicit f16_t(float f) : value(static_cast<_Float16>(f)) {}
    explicit operator float() const { return static_cast<float>(value); }
};
static_assert(sizeof(f16_t) == 2);

// Uniform conversions for kernels templated on the storage type T (float, bf16_t, f16_t).
template <class T>
inline float to_float(T x) {
    return static_cast<float>(x);
}
template <class T>
inline T from_float(float f) {
    return T(f);
}

}  // namespace napkin
