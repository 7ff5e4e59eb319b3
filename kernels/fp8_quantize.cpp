// CPU twin of fp8_quantize (see fp8_quantize.cuh).
#include "fp8_quantize.cuh"

#include <algorithm>

namespace es {

void fp8_quantize_ref(const fp8_quantize_params &p) {
    for (int64_t r = 0; r < p.n; ++r) {
        float amax = 0.0f;
        for (int64_t i = 0; i < p.k; ++i) amax = std::max(amax, std::fabs(bf16_bits_to_float(p.w[r * p.k + i])));
        const float s0 = amax / fp8_e4m3_max, s = s0 > 0.0f ? s0 : 1.0f;
        p.scale[r] = s;
        for (int64_t i = 0; i < p.k; ++i) p.q[r * p.k + i] = float_to_fp8_e4m3(bf16_bits_to_float(p.w[r * p.k + i]) / s);
    }
}

} // namespace es
