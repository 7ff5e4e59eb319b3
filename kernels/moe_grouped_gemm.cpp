// CPU twin of moe_grouped_gemm (see moe_grouped_gemm.cuh): walks the plan's groups slot by slot.
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/fp8_tile_major.cuh"

#include <stdexcept>
#include <utility>
#include <vector>

namespace es {

void moe_grouped_gemm_ref(const moe_grouped_gemm_params &p) {
    if (p.w_tile_major) { // the stack back to row-major, and the same again
        if (p.wfmt != weight_format::fp8_e4m3 || !p.glu)
            throw std::invalid_argument("moe_grouped_gemm: a tile-major stack is an FP8 gate/up (glu) stack");
        fp8_tile_major_check(p.n, p.k);
        const std::vector<fp8_t> rm = fp8_tile_major_undone(p.w, p.n_expert, p.n, p.k);
        moe_grouped_gemm_params q = p;
        q.w = rm.data();
        q.w_tile_major = false;
        moe_grouped_gemm_ref(q);
        return;
    }
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    const int64_t k = p.k, n = p.n, w_rows = p.glu ? 2 * n : n;
    if (p.a_q) {
        if (!fp8 || p.w_layout != scale_layout::channel || !p.a_scale)
            throw std::invalid_argument(
                "moe_grouped_gemm: FP8 activations take FP8 weights with per-row scales");
        // The codes' products summed in fp32, then both scales (the GPU's order). Codes decoded
        // through tables, slots split over threads (each writes its own output rows).
        float lw[256], la[256];
        for (int v = 0; v < 256; ++v) {
            lw[v] = fp8_e4m3_to_float(fp8_t(v));
            la[v] = fp8_to_float(fp8_t(v), p.a_fmt);
        }
        const fp8_t *wq = static_cast<const fp8_t *>(p.w);
        std::vector<std::pair<int64_t, int64_t>> work; // (expert, slot)
        for (int64_t e = 0; e < p.n_expert; ++e)
            for (int64_t i = p.offsets[e]; i < p.offsets[e + 1]; ++i) work.emplace_back(e, p.sorted_slots[i]);
#pragma omp parallel for schedule(dynamic, 4)
        for (int64_t wi = 0; wi < int64_t(work.size()); ++wi) {
            // Plain names, not a structured binding: the lambda below captures e (clang 14).
            const int64_t e = work[static_cast<size_t>(wi)].first,
                          slot = work[static_cast<size_t>(wi)].second;
            const int64_t ar = slot / p.a_row_div;
            const float sa = p.a_scale[ar];
            std::vector<float> a(static_cast<size_t>(k));
            for (int64_t i = 0; i < k; ++i) a[static_cast<size_t>(i)] = la[p.a_q[ar * p.lda + i]];
            auto qdot = [&](int64_t row) {
                const fp8_t *wr = wq + (e * w_rows + row) * k;
                float acc = 0.0f;
                for (int64_t i = 0; i < k; ++i) acc += lw[wr[i]] * a[static_cast<size_t>(i)];
                return acc * p.w_scale[e * w_rows + row];
            };
            for (int64_t c = 0; c < n; ++c) {
                if (p.glu) {
                    const float g = sa * qdot(c), u = sa * qdot(n + c);
                    p.out_act[slot * p.ldo + c] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
                } else {
                    p.out_f32[slot * p.ldo + c] = sa * qdot(c);
                }
            }
        }
        return;
    }
    auto row_dot = [&](int64_t e, int64_t row, const bf16_t *a) {
        const int64_t base = (e * w_rows + row) * k;
        float acc = 0.0f;
        if (fp8 && p.w_layout == scale_layout::block128) { // weights as fp8_dequantize widens them
            for (int64_t i = 0; i < k; ++i) {
                const float s = p.w_scale[fp8_stack_scale_index(e, row, i, w_rows, k, p.w_layout)];
                acc += round_bf16(weight_at(p.w, p.wfmt, base + i) * s) * bf16_bits_to_float(a[i]);
            }
            return acc;
        }
        for (int64_t i = 0; i < k; ++i) acc += weight_at(p.w, p.wfmt, base + i) * bf16_bits_to_float(a[i]);
        return fp8 ? acc * p.w_scale[e * w_rows + row] : acc;
    };
    for (int64_t e = 0; e < p.n_expert; ++e)
        for (int64_t i = p.offsets[e]; i < p.offsets[e + 1]; ++i) {
            const int64_t slot = p.sorted_slots[i];
            const bf16_t *a = p.a + (slot / p.a_row_div) * p.lda;
            for (int64_t c = 0; c < n; ++c) {
                if (p.glu) {
                    const float g = row_dot(e, c, a), u = row_dot(e, n + c, a);
                    p.out_act[slot * p.ldo + c] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
                } else {
                    p.out_f32[slot * p.ldo + c] = row_dot(e, c, a);
                }
            }
        }
}

} // namespace es
