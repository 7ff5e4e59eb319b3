// CPU twin of gemv (see gemv.cuh): fp32 accumulation in k order.
#include "gemv.cuh"

namespace es {

void gemv_ref(const gemv_params &p) {
    for (int64_t m = 0; m < p.n_tokens; ++m)
        for (int64_t n = 0; n < p.n; ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p.k; ++k)
                acc += weight_at(p.w, p.wfmt, n * p.k + k) * bf16_bits_to_float(p.x[m * p.ldx + k]);
            if (p.wfmt == weight_format::fp8_e4m3) acc *= p.w_scale[n];
            float &dst = p.y[m * p.ldy + n];
            dst = p.accumulate ? dst + acc : acc;
        }
}

} // namespace es
