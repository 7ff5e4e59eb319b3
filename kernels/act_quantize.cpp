// CPU twin of act_quantize (see act_quantize.cuh): the same max, the same IEEE division and the
// device's saturating round-to-nearest-even conversion (kernel_common.h), so codes and scales
// are bit-identical to the GPU's.
#include "kernels/act_quantize.cuh"

namespace es {

void act_quantize_ref(const act_quantize_params &p) {
    const float fmax = fp8_format_max(p.fmt);
    for (int64_t r = 0; r < p.m; ++r) {
        const bf16_t *x = p.x + r * p.ldx;
        float amax = 0.0f;
        for (int64_t i = 0; i < p.k; ++i) {
            const float a = std::fabs(bf16_bits_to_float(x[i]));
            if (a > amax) amax = a; // as fmaxf: a NaN never replaces the running max
        }
        const float s0 = amax / fmax, s = s0 > 0.0f ? s0 : 1.0f;
        p.scale[r] = s;
        fp8_t *q = p.q + r * p.k;
        for (int64_t i = 0; i < p.k; ++i) q[i] = float_to_fp8(bf16_bits_to_float(x[i]) / s, p.fmt);
    }
}

} // namespace es
