// Element types. One string table serves config, logs and file formats
// (safetensors names: F32, BF16, F16, I32, I64, F64).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace loom {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, f64, u8 };

constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::bf16: return 2;
        case DType::f16: return 2;
        case DType::i32: return 4;
        case DType::i64: return 8;
        case DType::f64: return 8;
        case DType::u8: return 1;
    }
    return 0;
}

// Lower-case name for logs and config ("f32", "bf16").
std::string_view dtype_name(DType t);
// safetensors name ("F32", "BF16").
std::string_view dtype_safetensors_name(DType t);
// PyTorch's name, as config.json's torch_dtype holds it ("float32", "bfloat16").
std::string_view dtype_torch_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view s);
std::optional<DType> dtype_from_name(std::string_view s);

// bf16 <-> f32 with round-to-nearest-even, as PyTorch converts.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

}  // namespace loom
