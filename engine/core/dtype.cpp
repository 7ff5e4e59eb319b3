// Element types of weight files: sizes, safetensors spellings, and exact widening to fp32.
// The f16 path is integer-only (no subnormal float arithmetic, so FTZ/DAZ modes cannot change
// it) and branch-free, so the conversion loops vectorize. FP8 uses 256-entry tables
// (E4M3 is the "fn" variant: no infinities, S.1111.111 is NaN; E5M2 is the top byte of an f16).
#include "engine/core/dtype.h"

#include <array>
#include <bit>
#include <cmath>

namespace es {

size_t dtype_size(dtype t) {
    switch (t) {
    case dtype::f32:
        return 4;
    case dtype::f16:
        return 2;
    case dtype::bf16:
        return 2;
    case dtype::f8_e4m3:
        return 1;
    case dtype::f8_e5m2:
        return 1;
    }
    return 0;
}

std::string_view dtype_name(dtype t) {
    switch (t) {
    case dtype::f32:
        return "F32";
    case dtype::f16:
        return "F16";
    case dtype::bf16:
        return "BF16";
    case dtype::f8_e4m3:
        return "F8_E4M3";
    case dtype::f8_e5m2:
        return "F8_E5M2";
    }
    return "?";
}

std::optional<dtype> dtype_from_name(std::string_view name) {
    if (name == "F32") return dtype::f32;
    if (name == "F16") return dtype::f16;
    if (name == "BF16") return dtype::bf16;
    if (name == "F8_E4M3") return dtype::f8_e4m3;
    if (name == "F8_E5M2") return dtype::f8_e5m2;
    return std::nullopt;
}

namespace {

// Bits of the fp32 equal to the f16 h. Normals and inf/NaN re-bias the exponent; subnormals
// (exponent 0) are m * 2^-24, computed exactly as float(m) * 2^-24 (a normal fp32).
inline uint32_t f16_bits_to_f32_bits(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;
    const uint32_t exp = em >> 10;
    const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
    const uint32_t inf_nan = (em << 13) | 0x7f800000u;
    const uint32_t sub = std::bit_cast<uint32_t>(float(int32_t(em)) * 0x1p-24f);
    const uint32_t is_sub = 0u - uint32_t(exp == 0); // all ones or zero: selects, no branches
    const uint32_t is_inf_nan = 0u - uint32_t(exp == 31);
    const uint32_t mag = (sub & is_sub) | (inf_nan & is_inf_nan) | (normal & ~(is_sub | is_inf_nan));
    return sign | mag;
}

float e4m3_to_f32_slow(uint8_t b) {
    const float sign = (b & 0x80) ? -1.0f : 1.0f;
    const int exp = (b >> 3) & 0xf;
    const int man = b & 0x7;
    if (exp == 0xf && man == 0x7) return std::nanf("");
    if (exp == 0) return sign * std::ldexp(float(man), -9); // subnormal: m/8 * 2^-6
    return sign * std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
}

const std::array<float, 256> &e4m3_table() {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int i = 0; i < 256; ++i) t[size_t(i)] = e4m3_to_f32_slow(uint8_t(i));
        return t;
    }();
    return table;
}

const std::array<float, 256> &e5m2_table() {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int i = 0; i < 256; ++i) t[size_t(i)] = f16_to_f32(uint16_t(i << 8));
        return t;
    }();
    return table;
}

} // namespace

float f16_to_f32(uint16_t h) { return std::bit_cast<float>(f16_bits_to_f32_bits(h)); }

void convert_to_f32(dtype t, const void *src, float *dst, size_t n) {
    switch (t) {
    case dtype::f32:
        std::memcpy(dst, src, n * sizeof(float));
        return;
    case dtype::f16: {
        // Safetensors data is not guaranteed aligned: assemble each element from its bytes.
        const auto *s = static_cast<const uint8_t *>(src);
#pragma omp simd
        for (size_t i = 0; i < n; ++i) {
            const uint16_t h = uint16_t(s[2 * i] | (s[2 * i + 1] << 8));
            dst[i] = std::bit_cast<float>(f16_bits_to_f32_bits(h));
        }
        return;
    }
    case dtype::bf16: {
        const auto *s = static_cast<const uint8_t *>(src);
#pragma omp simd
        for (size_t i = 0; i < n; ++i)
            dst[i] = std::bit_cast<float>((uint32_t(s[2 * i]) << 16) | (uint32_t(s[2 * i + 1]) << 24));
        return;
    }
    case dtype::f8_e4m3: {
        const auto &table = e4m3_table();
        const auto *s = static_cast<const uint8_t *>(src);
        for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
        return;
    }
    case dtype::f8_e5m2: {
        const auto &table = e5m2_table();
        const auto *s = static_cast<const uint8_t *>(src);
        for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
        return;
    }
    }
}

} // namespace es
