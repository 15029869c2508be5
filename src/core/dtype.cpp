#include "core/dtype.h"

#include <bit>

namespace loom {

namespace {
struct Names {
    DType t;
    std::string_view lower, st, torch;
};
constexpr Names k_names[] = {
    {DType::f32, "f32", "F32", "float32"}, {DType::bf16, "bf16", "BF16", "bfloat16"},
    {DType::f16, "f16", "F16", "float16"}, {DType::i32, "i32", "I32", "int32"},
    {DType::i64, "i64", "I64", "int64"},   {DType::f64, "f64", "F64", "float64"},
    {DType::u8, "u8", "U8", "uint8"},
};
}  // namespace

std::string_view dtype_name(DType t) {
    for (const auto& n : k_names)
        if (n.t == t) return n.lower;
    return "?";
}
std::string_view dtype_safetensors_name(DType t) {
    for (const auto& n : k_names)
        if (n.t == t) return n.st;
    return "?";
}
std::string_view dtype_torch_name(DType t) {
    for (const auto& n : k_names)
        if (n.t == t) return n.torch;
    return "?";
}
std::optional<DType> dtype_from_safetensors_name(std::string_view s) {
    for (const auto& n : k_names)
        if (n.st == s) return n.t;
    return std::nullopt;
}
std::optional<DType> dtype_from_name(std::string_view s) {
    for (const auto& n : k_names)
        if (n.lower == s || n.torch == s) return n.t;
    if (s == "float32" || s == "fp32") return DType::f32;
    if (s == "bfloat16") return DType::bf16;
    if (s == "float16" || s == "fp16") return DType::f16;
    return std::nullopt;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: renormalise
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) {
                man <<= 1;
                --exp;
            }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return std::bit_cast<float>(u);
}

uint16_t f32_to_f16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffffu;
    if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00u | (man ? 0x200u : 0));
    if (exp >= 31) return uint16_t(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return uint16_t(sign);
        man |= 0x800000u;
        uint32_t shift = uint32_t(14 - exp);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) ++half;
        return uint16_t(sign | half);
    }
    uint32_t half = sign | (uint32_t(exp) << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
    return uint16_t(half);
}

}  // namespace loom
