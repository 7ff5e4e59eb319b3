// CPU twin of rms_norm (see rms_norm.cuh).
#include "rms_norm.cuh"

namespace es {

void rms_norm_ref(const rms_norm_params &p) {
    for (int64_t r = 0; r < p.n_rows; ++r) {
        const int64_t s = p.rows ? p.rows[r] : r;
        float *x = p.x + s * p.n_embd;
        float ss = 0.0f;
        for (int64_t i = 0; i < p.n_embd; ++i) {
            if (p.delta) x[i] += p.delta[s * p.n_embd + i];
            ss += x[i] * x[i];
        }
        const float scale = 1.0f / std::sqrt(ss / float(p.n_embd) + p.eps);
        for (int64_t i = 0; i < p.n_embd; ++i)
            p.out[r * p.n_embd + i] = float_to_bf16_bits(bf16_bits_to_float(p.weight[i]) * (x[i] * scale));
    }
}

} // namespace es
