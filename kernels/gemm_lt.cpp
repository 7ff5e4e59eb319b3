// CPU twins of gemm_lt (BF16 and FP8) and their alignment rules (see gemm_lt.cuh).
#include "kernels/gemm_lt.cuh"

#include <vector>

namespace es {

namespace {
bool al16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
} // namespace

bool gemm_lt_shape_ok(const gemm_lt_params &p) {
    return al16(p.a) && al16(p.w) && al16(p.y) && p.lda % 8 == 0 && p.ldw % 8 == 0 && p.ldy % 4 == 0 && p.k % 8 == 0 &&
           p.lda >= p.k && p.ldw >= p.k && p.ldy >= p.n;
}

void gemm_lt_ref(const gemm_lt_params &p) {
    for (int64_t m = 0; m < p.m; ++m)
        for (int64_t n = 0; n < p.n; ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p.k; ++k)
                acc += bf16_bits_to_float(p.a[m * p.lda + k]) * bf16_bits_to_float(p.w[n * p.ldw + k]);
            float &dst = p.y[m * p.ldy + n];
            dst = p.accumulate ? dst + acc : acc;
        }
}

bool gemm_lt_fp8_dims_ok(int64_t n, int64_t k) { return n > 0 && k > 0 && k % 16 == 0 && n % 16 == 0; }

bool gemm_lt_fp8_shape_ok(const gemm_lt_fp8_params &p) {
    return gemm_lt_fp8_dims_ok(p.n, p.k) && al16(p.a) && al16(p.w) && al16(p.y) && al16(p.a_scale) &&
           al16(p.w_scale) && p.lda % 16 == 0 && p.ldw % 16 == 0 && p.ldy % 4 == 0 && p.lda >= p.k &&
           p.ldw >= p.k && p.ldy >= p.n;
}

void gemm_lt_fp8_ref(const gemm_lt_fp8_params &p) {
    if (p.m <= 0 || p.n <= 0) return;
    // Dequantized operands first (one conversion per element, not per product).
    std::vector<float> a(static_cast<size_t>(p.m * p.k)), w(static_cast<size_t>(p.n * p.k));
    for (int64_t m = 0; m < p.m; ++m)
        for (int64_t k = 0; k < p.k; ++k)
            a[size_t(m * p.k + k)] = fp8_to_float(p.a[m * p.lda + k], p.a_fmt) * p.a_scale[m];
    for (int64_t n = 0; n < p.n; ++n)
        for (int64_t k = 0; k < p.k; ++k)
            w[size_t(n * p.k + k)] = fp8_e4m3_to_float(p.w[n * p.ldw + k]) * p.w_scale[n];
    for (int64_t m = 0; m < p.m; ++m) {
        const float *ar = a.data() + m * p.k;
        for (int64_t n = 0; n < p.n; ++n) {
            const float *wr = w.data() + n * p.k;
            float part[8] = {}; // eight running sums (a summation order like a GPU's, and fast)
            int64_t k = 0;
            for (; k + 8 <= p.k; k += 8)
                for (int j = 0; j < 8; ++j) part[j] += ar[k + j] * wr[k + j];
            for (; k < p.k; ++k) part[k % 8] += ar[k] * wr[k];
            const float acc =
                ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
            float &dst = p.y[m * p.ldy + n];
            dst = p.accumulate ? dst + acc : acc;
        }
    }
}

} // namespace es
