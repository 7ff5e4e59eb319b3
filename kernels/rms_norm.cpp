// CPU twin of rms_norm (see rms_norm.cuh).
#include "kernels/rms_norm.cuh"

#include <algorithm>

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

std::vector<bf16_t> norm_in_ref(const norm_in &n, int64_t n_rows, int64_t n_embd) {
    std::vector<bf16_t> out(static_cast<size_t>(n_rows * n_embd));
    rms_norm_params p;
    p.x = const_cast<float *>(n.x); // read only: no delta
    p.weight = n.weight;
    p.out = out.data();
    p.n_rows = n_rows;
    p.n_embd = n_embd;
    p.eps = n.eps;
    rms_norm_ref(p);
    if (n.out) std::copy(out.begin(), out.end(), n.out);
    return out;
}

} // namespace es
