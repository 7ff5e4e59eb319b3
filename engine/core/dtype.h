// Element types of weight files and the conversions the CPU backend needs (exact widening to fp32).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace es {

enum class dtype : uint8_t { f32, f16, bf16, f8_e4m3, f8_e5m2 };

size_t dtype_size(dtype t);
std::string_view dtype_name(dtype t);                       // safetensors spelling: "BF16", …
std::optional<dtype> dtype_from_name(std::string_view name); // "F32" "F16" "BF16" "F8_E4M3" "F8_E5M2"

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);

// Widen n elements of type t at src into dst (fp32). Exact for f32/f16/bf16.
void convert_to_f32(dtype t, const void *src, float *dst, size_t n);

} // namespace es
