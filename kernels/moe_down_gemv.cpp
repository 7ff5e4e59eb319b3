// CPU twin of moe_down_gemv (see moe_down_gemv.cuh).
#include "kernels/moe_down_gemv.cuh"

namespace es {

void moe_down_gemv_ref(const moe_down_gemv_params &p) {
    const int64_t K = p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    // Row n of expert e against slot sl's activations, its scale(s) applied.
    auto routed = [&](int64_t e, int64_t n, int64_t sl) {
        return scaled_row_dot_ref(p.w, p.wfmt, (e * H + n) * F, F, p.w_scale, p.w_layout, e, n, H,
                                  [&](int64_t f) { return bf16_bits_to_float(p.act[sl * F + f]); });
    };
    if (p.y_slots) {
        for (int64_t sl = 0; sl < p.n_tokens * K; ++sl)
            for (int64_t n = 0; n < H; ++n) p.y_slots[sl * H + n] = routed(p.ids[sl], n, sl);
        if (p.sh_w)
            for (int64_t t = 0; t < p.n_tokens; ++t)
                for (int64_t n = 0; n < H; ++n)
                    p.y_shared[t * H + n] = scaled_row_dot_ref(
                        p.sh_w, p.wfmt, n * p.n_ff_sh, p.n_ff_sh, p.sh_w_scale, p.w_layout, 0, n, H,
                        [&](int64_t f) { return bf16_bits_to_float(p.sh_act[t * p.n_ff_sh + f]); });
        return;
    }
    for (int64_t t = 0; t < p.n_tokens; ++t)
        for (int64_t n = 0; n < H; ++n) {
            float total = 0.0f;
            for (int64_t j = 0; j < K; ++j)
                total += p.weights[t * K + j] * routed(p.ids[t * K + j], n, t * K + j);
            p.y[t * H + n] += total;
        }
}

} // namespace es
