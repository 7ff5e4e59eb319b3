// A weight matrix in the CPU backend's memory, in one of the GEMM's weight types (cpu_gemm.h):
// fp32, BF16, or E4M3 codes with one fp32 scale per row. It is filled from fp32 rows, encoded
// as the type holds them: BF16 rounded to nearest even (exact for a BF16 or FP8 checkpoint's
// values), E4M3 quantized per row exactly as the GPU quantizes at load (through BF16, by
// fp8_quantize's CPU twin), so the CPU holds the GPU's FP8 weights bit for bit. (One exception,
// where a weight is NaN: its row's scale becomes NaN, so that the GEMM needs no NaN test per code
// and the row's dot products are NaN, as with the NaN among fp32 weights.)
#pragma once

#include "engine/cpu/cpu_gemm.h"

#include <cstdint>
#include <vector>

namespace es::cpu {

class weight_matrix {
public:
    weight_matrix() = default;
    weight_matrix(weight_type t, int64_t rows, int64_t cols);

    // Bytes a [rows, cols] matrix of type t holds: its elements and, for E4M3, a scale a row.
    static size_t bytes_for(weight_type t, int64_t rows, int64_t cols);

    // Stores rows [row0, row0 + n) from n · cols fp32 values.
    void set_rows(int64_t row0, int64_t n, const float *src);
    // Row r widened to fp32: the values the GEMM multiplies by.
    void widen_row(int64_t r, float *out) const { cpu::widen_row(view(), m_cols, r, out); }

    weights_view view() const { return {m_type, m_data.data(), m_scale.empty() ? nullptr : m_scale.data()}; }
    weight_type type() const { return m_type; }
    int64_t rows() const { return m_rows; }
    int64_t cols() const { return m_cols; }
    size_t bytes() const { return m_data.size() + m_scale.size() * sizeof(float); }

private:
    weight_type m_type = weight_type::f32;
    int64_t m_rows = 0, m_cols = 0;
    std::vector<uint8_t> m_data; // rows · cols elements of m_type
    std::vector<float> m_scale;  // e4m3: [rows]
};

} // namespace es::cpu
