// weight_matrix (see cpu_weights.h): storage and encoding from fp32 rows.
#include "engine/cpu/cpu_weights.h"

#include "kernels/fp8_quantize.cuh"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace es::cpu {

weight_matrix::weight_matrix(weight_type t, int64_t rows, int64_t cols)
    : m_type(t), m_rows(rows), m_cols(cols), m_data(size_t(rows * cols) * weight_type_bytes(t)) {
    if (t == weight_type::e4m3) m_scale.assign(size_t(rows), 1.0f);
}

size_t weight_matrix::bytes_for(weight_type t, int64_t rows, int64_t cols) {
    return size_t(rows * cols) * weight_type_bytes(t) +
           (t == weight_type::e4m3 ? size_t(rows) * sizeof(float) : 0);
}

void weight_matrix::set_rows(int64_t row0, int64_t n, const float *src) {
    if (row0 < 0 || n < 0 || row0 + n > m_rows)
        throw std::out_of_range("weight_matrix: rows [" + std::to_string(row0) + ", " +
                                std::to_string(row0 + n) + ") outside a matrix of " + std::to_string(m_rows));
    const size_t count = size_t(n * m_cols);
    uint8_t *dst = m_data.data() + size_t(row0 * m_cols) * weight_type_bytes(m_type);
    switch (m_type) {
    case weight_type::f32:
        std::memcpy(dst, src, count * sizeof(float));
        return;
    case weight_type::bf16:
        for (size_t i = 0; i < count; ++i) {
            const bf16_t b = float_to_bf16_bits(src[i]);
            std::memcpy(dst + 2 * i, &b, 2);
        }
        return;
    case weight_type::e4m3: {
        std::vector<bf16_t> b(static_cast<size_t>(m_cols));
        for (int64_t r = 0; r < n; ++r) {
            for (int64_t c = 0; c < m_cols; ++c) b[size_t(c)] = float_to_bf16_bits(src[r * m_cols + c]);
            uint8_t *codes = dst + r * m_cols;
            fp8_quantize_ref({b.data(), codes, &m_scale[size_t(row0 + r)], 1, m_cols});
            for (int64_t c = 0; c < m_cols; ++c)
                if ((codes[c] & 0x7f) == 0x7f) m_scale[size_t(row0 + r)] = NAN; // see cpu_weights.h
        }
        return;
    }
    }
}

} // namespace es::cpu
