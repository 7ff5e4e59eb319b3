// CPU twin of moe_gate_up_gemv (see moe_gate_up_gemv.cuh).
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/fp8_tile_major.cuh"
#include "kernels/rms_norm.cuh"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace es {

bool moe_gate_up_gemv_norm_ok(const moe_gate_up_gemv_params &p) {
    auto al = [](const void *q, uintptr_t a) { return (reinterpret_cast<uintptr_t>(q) & (a - 1)) == 0; };
    return p.n_embd > 0 && p.n_embd % 4 == 0 && p.n_embd * 2 <= 48 * 1024 && al(p.norm.x, 16) &&
           al(p.norm.weight, 8) && al(p.norm.out, 16);
}

void moe_gate_up_gemv_ref(const moe_gate_up_gemv_params &p) {
    const int64_t F = p.n_ff_exp, H = p.n_embd, K = p.n_expert_used;
    if (p.w_tile_major) { // the experts the slots use, back to row-major, and the same again
        if (p.wfmt != weight_format::fp8_e4m3)
            throw std::invalid_argument("moe_gate_up_gemv: a tile-major stack is FP8");
        fp8_tile_major_check(F, H);
        int64_t experts = 1;
        for (int64_t s = 0; p.ids && s < p.n_tokens * K; ++s)
            experts = std::max<int64_t>(experts, p.ids[s] + 1);
        const std::vector<fp8_t> rm = fp8_tile_major_undone(p.w, experts, F, H);
        moe_gate_up_gemv_params q = p;
        q.w = rm.data();
        q.w_tile_major = false;
        moe_gate_up_gemv_ref(q);
        return;
    }
    std::vector<bf16_t> xn;
    if (p.norm.on()) xn = norm_in_ref(p.norm, p.n_tokens, H);
    const bf16_t *x = p.norm.on() ? xn.data() : p.x;
    for (int64_t s = 0; s < p.n_tokens * K; ++s) {
        const int64_t t = s / K, e = p.ids ? p.ids[s] : 0;
        // Rows on OpenMP threads (each row's sums as alone).
#pragma omp parallel for schedule(static)
        for (int64_t f = 0; f < F; ++f) {
            const int64_t gr = e * 2 * F + f, ur = gr + F;
            auto xv = [&](int64_t i) { return bf16_bits_to_float(x[t * H + i]); };
            const float g = scaled_row_dot_ref(p.w, p.wfmt, gr * H, H, p.w_scale, p.w_layout, e, f, 2 * F,
                                               xv),
                        u = scaled_row_dot_ref(p.w, p.wfmt, ur * H, H, p.w_scale, p.w_layout, e, F + f, 2 * F,
                                               xv);
            p.act[s * F + f] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
        }
        if (p.slot_rows_done) p.slot_rows_done[s] += unsigned(F); // every row of the slot reported
    }
}

} // namespace es
