// CPU twin of moe_combine (see moe_combine.cuh).
#include "kernels/moe_combine.cuh"
#include "kernels/rms_norm.cuh"

namespace es {

void moe_combine_ref(const moe_combine_params &p) {
    const int64_t K = p.n_expert_used, H = p.n_embd;
    for (int64_t t = 0; t < p.n_tokens; ++t)
        for (int64_t i = 0; i < H; ++i) {
            float acc = p.x[t * H + i];
            if (p.y_shared) acc += p.y_shared[t * H + i];
            for (int64_t j = 0; j < K; ++j) acc += p.weights[t * K + j] * p.y[(t * K + j) * H + i];
            p.x[t * H + i] = acc;
        }
    if (p.norm_out) {
        rms_norm_params n;
        n.x = p.x;
        n.weight = p.norm_weight;
        n.out = p.norm_out;
        n.n_rows = p.n_tokens;
        n.n_embd = H;
        n.eps = p.norm_eps;
        rms_norm_ref(n);
    }
    for (int64_t r = 0; p.reset && r < p.n_reset; ++r) p.reset[r] = 0;
}

} // namespace es
