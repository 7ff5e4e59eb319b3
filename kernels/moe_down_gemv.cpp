// CPU twin of moe_down_gemv (see moe_down_gemv.cuh).
#include "moe_down_gemv.cuh"

namespace es {

void moe_down_gemv_ref(const moe_down_gemv_params &p) {
    const int64_t K = p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (p.y_slots) {
        for (int64_t sl = 0; sl < p.n_tokens * K; ++sl)
            for (int64_t n = 0; n < H; ++n) {
                const int64_t row = int64_t(p.ids[sl]) * H + n;
                float v = 0.0f;
                for (int64_t f = 0; f < F; ++f)
                    v += weight_at(p.w, p.wfmt, row * F + f) * bf16_bits_to_float(p.act[sl * F + f]);
                p.y_slots[sl * H + n] = fp8 ? v * p.w_scale[row] : v;
            }
        if (p.sh_w)
            for (int64_t t = 0; t < p.n_tokens; ++t)
                for (int64_t n = 0; n < H; ++n) {
                    float v = 0.0f;
                    for (int64_t f = 0; f < p.n_ff_sh; ++f)
                        v += weight_at(p.sh_w, p.wfmt, n * p.n_ff_sh + f) *
                             bf16_bits_to_float(p.sh_act[t * p.n_ff_sh + f]);
                    p.y_shared[t * H + n] = fp8 ? v * p.sh_w_scale[n] : v;
                }
        return;
    }
    for (int64_t t = 0; t < p.n_tokens; ++t)
        for (int64_t n = 0; n < H; ++n) {
            float total = 0.0f;
            for (int64_t j = 0; j < K; ++j) {
                const int64_t row = int64_t(p.ids[t * K + j]) * H + n;
                float v = 0.0f;
                for (int64_t f = 0; f < F; ++f)
                    v += weight_at(p.w, p.wfmt, row * F + f) * bf16_bits_to_float(p.act[(t * K + j) * F + f]);
                if (fp8) v *= p.w_scale[row];
                total += p.weights[t * K + j] * v;
            }
            p.y[t * H + n] += total;
        }
}

} // namespace es
