// CPU twin of gemm_lt and its alignment rule (see gemm_lt.cuh).
#include "gemm_lt.cuh"

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

} // namespace es
