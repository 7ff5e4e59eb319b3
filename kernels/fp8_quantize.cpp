// CPU twin of fp8_quantize (see fp8_quantize.cuh).
#include "kernels/fp8_quantize.cuh"

#include <algorithm>

namespace es {

void fp8_quantize_ref(const fp8_quantize_params &p) {
    if (p.layout == scale_layout::block128) {
        const int64_t nkb = (p.k + fp8_block - 1) / fp8_block;
        for (int64_t rb = 0; rb * fp8_block < p.n; ++rb)
            for (int64_t cb = 0; cb < nkb; ++cb) {
                const int64_t r1 = std::min(p.n, (rb + 1) * fp8_block), c1 = std::min(p.k, (cb + 1) * fp8_block);
                float amax = 0.0f;
                for (int64_t r = rb * fp8_block; r < r1; ++r)
                    for (int64_t c = cb * fp8_block; c < c1; ++c)
                        amax = std::max(amax, std::fabs(bf16_bits_to_float(p.w[r * p.k + c])));
                const float s0 = amax / fp8_e4m3_max, s = s0 > 0.0f ? s0 : 1.0f;
                p.scale[rb * nkb + cb] = s;
                for (int64_t r = rb * fp8_block; r < r1; ++r)
                    for (int64_t c = cb * fp8_block; c < c1; ++c)
                        p.q[r * p.k + c] = float_to_fp8_e4m3(bf16_bits_to_float(p.w[r * p.k + c]) / s);
            }
        return;
    }
    for (int64_t r = 0; r < p.n; ++r) {
        float amax = 0.0f;
        for (int64_t i = 0; i < p.k; ++i) amax = std::max(amax, std::fabs(bf16_bits_to_float(p.w[r * p.k + i])));
        const float s0 = amax / fp8_e4m3_max, s = s0 > 0.0f ? s0 : 1.0f;
        p.scale[r] = s;
        for (int64_t i = 0; i < p.k; ++i) p.q[r * p.k + i] = float_to_fp8_e4m3(bf16_bits_to_float(p.w[r * p.k + i]) / s);
    }
}

} // namespace es
