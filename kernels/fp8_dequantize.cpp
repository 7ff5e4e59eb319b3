// CPU twin of fp8_dequantize (see fp8_dequantize.cuh).
#include "kernels/fp8_dequantize.cuh"

namespace es {

void fp8_dequantize_ref(const fp8_dequantize_params &p) {
    for (int64_t r = 0; r < p.n; ++r)
        for (int64_t c = 0; c < p.k; ++c)
            p.out[r * p.k + c] = float_to_bf16_bits(fp8_e4m3_to_float(p.q[r * p.k + c]) *
                                                    p.scale[fp8_scale_index(r, c, p.k, p.layout)]);
}

} // namespace es
