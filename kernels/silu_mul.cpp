// CPU twin of silu_mul (see silu_mul.cuh).
#include "kernels/silu_mul.cuh"

namespace es {

void silu_mul_ref(const silu_mul_params &p) {
    for (int64_t t = 0; t < p.n_tokens; ++t)
        for (int64_t f = 0; f < p.n_ff; ++f) {
            const float g = p.gate_up[t * 2 * p.n_ff + f], u = p.gate_up[t * 2 * p.n_ff + p.n_ff + f];
            p.out[t * p.n_ff + f] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
        }
}

} // namespace es
