// Helpers shared by the kernel-twin suites (test_kernel_twins.cpp, test_kernel_twins_moe.cpp,
// test_twin_model.cpp): a seeded generator with random BF16 and fp32 data, rms_norm's rows, NMSE,
// and grouped-GEMM params reading through a moe_plan. Header-only; each suite includes it once and
// draws from its own generator.
#pragma once

#include "engine/core/compare.h"
#include "engine/core/dtype.h"

#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/rms_norm.cuh"

#include <cstdint>
#include <random>
#include <vector>

namespace es_test {

using es::nmse;

inline std::mt19937 g_rng(7);

inline std::vector<es::bf16_t> rand_bf16(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<es::bf16_t> v(n);
    for (auto &x : v) x = es::float_to_bf16_bits(d(g_rng));
    return v;
}

inline std::vector<float> rand_f32(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = d(g_rng);
    return v;
}

// rms_norm's output rows for x [T, H] and the weight w (x is the kernel's scratch: a copy).
inline std::vector<es::bf16_t> rms_rows(std::vector<float> x, const std::vector<es::bf16_t> &w, int64_t T, int64_t H) {
    std::vector<es::bf16_t> out(static_cast<size_t>(T * H));
    es::rms_norm_params p;
    p.x = x.data();
    p.weight = w.data();
    p.out = out.data();
    p.n_rows = T;
    p.n_embd = H;
    es::rms_norm_ref(p);
    return out;
}

// moe_plan over ids (their slots, E experts) and grouped-GEMM params reading through it; the
// caller sets the operands (a, lda, a_row_div, w, k, n, glu, outputs).
struct grouped_case {
    std::vector<int32_t> counts, off, toff, sorted;
    es::moe_grouped_gemm_params p;
};
inline grouped_case grouped_over(const std::vector<int32_t> &ids, int64_t E) {
    grouped_case c;
    const int64_t S = int64_t(ids.size());
    c.counts.resize(size_t(E));
    c.off.resize(size_t(E + 1));
    c.toff.resize(size_t(E + 1));
    c.sorted.resize(size_t(S));
    es::moe_plan_ref({ids.data(), S, E, es::moe_grouped_gemm_tile_rows, c.counts.data(), c.off.data(),
                      c.toff.data(), c.sorted.data()});
    c.p.sorted_slots = c.sorted.data();
    c.p.offsets = c.off.data();
    c.p.tile_offsets = c.toff.data();
    c.p.n_expert = E;
    c.p.max_tiles = es::moe_plan_max_tiles(S, E, es::moe_grouped_gemm_tile_rows);
    return c;
}
// grouped_over with the gate/up GLU's operands: x [T, H] read by the slots (K a token), the stack
// w [E, 2F, H] with its per-row scales (FP8) or none (BF16), SiLU(gate)·up into out [S, F].
inline grouped_case grouped_glu_over(const std::vector<int32_t> &ids, int64_t E, const es::bf16_t *x, int64_t H,
                                     int64_t K, const void *w, es::weight_format fmt, const float *w_scale,
                                     int64_t F, es::bf16_t *out) {
    grouped_case c = grouped_over(ids, E);
    c.p.a = x;
    c.p.lda = H;
    c.p.a_row_div = K;
    c.p.w = w;
    c.p.wfmt = fmt;
    c.p.w_scale = w_scale;
    c.p.k = H;
    c.p.n = F;
    c.p.glu = true;
    c.p.out_act = out;
    c.p.ldo = F;
    return c;
}

} // namespace es_test
