// Element types napkin stores and accounts for. Sizes are in bits because nf4 is half a byte;
// storage_bytes() rounds a whole tensor up to bytes. Quantization constants of blockwise
// formats (nf4 absmax, 8-bit optimizer scales) are accounted separately by whoever owns
// them (see estimator/napkin_formulas.h), not hidden in the element size.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "core/enum_names.h"

namespace napkin {

enum class DType : std::uint8_t {
    f32,     // IEEE binary32: 1 sign, 8 exponent, 23 fraction bits
    f16,     // IEEE binary16: 1, 5, 10
    bf16,    // bfloat16: 1, 8, 7 (fp32's range, 8 bits of precision)
    f8e4m3,  // OCP FP8 E4M3 (finite, max 448): forward activations and weights
    f8e5m2,  // OCP FP8 E5M2 (max 57344): gradients
    i8,      // int8, also the code size of 8-bit optimizer states
    nf4,     // 4-bit NormalFloat codes (QLoRA), two per byte
};

inline constexpr std::array kDTypeNames = {
    EnumName<DType>{DType::f32, "fp32"},       EnumName<DType>{DType::f16, "fp16"},
    EnumName<DType>{DType::bf16, "bf16"},      EnumName<DType>{DType::f8e4m3, "fp8e4m3"},
    EnumName<DType>{DType::f8e5m2, "fp8e5m2"}, EnumName<DType>{DType::i8, "int8"},
    EnumName<DType>{DType::nf4, "nf4"},
};

constexpr int dtype_bits(DType t) {
    switch (t) {
        case DType::f32: return 32;
        case DType::f16:
        case DType::bf16: return 16;
        case DType::f8e4m3:
        case DType::f8e5m2:
        case DType::i8: return 8;
        case DType::nf4: return 4;
    }
    return 0;
}

// Bytes for `numel` elements, rounded up to whole bytes.
constexpr std::uint64_t storage_bytes(DType t, std::uint64_t numel) {
    return (numel * static_cast<std::uint64_t>(dtype_bits(t)) + 7) / 8;
}

constexpr std::string_view dtype_name(DType t) { return enum_name(kDTypeNames, t); }

}  // namespace napkin
